"""Opening files on the main window, each for what it is (app.qt.file_opener): a model loads, a
.voice.gguf joins the library after the user says so, a Markdown / EPUB / text file becomes the
script (one undo step), a recording opens the Voice Lab; another program's GGUF and an unknown
type are refused with a message. Also as a drop on the script editor, and the routing by kind
(app.core.open_files) without Qt."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("pytestqt")

from app.core.open_files import MODEL, RECORDING, SCRIPT, VOICE, CannotOpen, classify, read_script  # noqa: E402
from tests.helpers.main_window import _close, _make_window, _wait, drop_file  # noqa: E402

BOOKS = os.path.join(os.path.dirname(__file__), "..", "..", "helpers", "books")


@pytest.fixture(scope="module")
def model():
    from tests.helpers.models import model_path

    return str(model_path("nano", "q4_0"))


@pytest.fixture(scope="module")
def files(model, tmp_path_factory):
    """A voice (the model's own, saved as a file), a recording, a Markdown script, a GGUF of
    another program, a file of an unknown type."""
    import soundfile as sf
    from gguf import GGUFReader, GGUFWriter

    from engine_native import Voice

    folder = tmp_path_factory.mktemp("files")
    r = GGUFReader(model)
    t = {x.name: np.array(x.data) for x in r.tensors if x.name.startswith("voice.")}
    voice = Voice(speaker_emb=t["voice.speaker_emb"].reshape(-1), cond_prompt_speech_tokens=t[
        "voice.cond_prompt_speech_tokens"].reshape(-1).astype(np.int32), embedding=t["voice.embedding"].reshape(-1),
        prompt_token=t["voice.prompt_token"].reshape(-1).astype(np.int32),
        prompt_feat=t["voice.prompt_feat"].reshape(-1, t["voice.prompt_feat"].shape[-1]), variant="nano", meta={})
    voice.save(folder / "narrator.voice.gguf", name="Narrator")
    rate = 24000
    tone = 0.3 * np.sin(2 * np.pi * 220 * np.arange(3 * rate) / rate)
    sf.write(folder / "talk.wav", tone.astype(np.float32), rate)
    (folder / "story.md").write_text("# A story\n\nOnce upon a time.\n\n## The end\n\nThey *lived*.\n", encoding="utf-8")
    w = GGUFWriter(str(folder / "llama.gguf"), "llama")
    w.add_tensor("x", np.zeros(4, np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    (folder / "notes.xyz").write_text("?", encoding="utf-8")
    return {k: str(folder / n) for k, n in (("voice", "narrator.voice.gguf"), ("wav", "talk.wav"), ("md", "story.md"),
                                             ("llama", "llama.gguf"), ("xyz", "notes.xyz"))}


def test_files_are_classified_by_what_they_are(model, files, tmp_path):
    assert classify(model).kind == MODEL
    assert classify(files["voice"]).kind == VOICE
    renamed = tmp_path / "narrator.gguf"  # a voice under a model's name is still a voice (its header says so)
    os.link(files["voice"], renamed)
    assert classify(str(renamed)).kind == VOICE
    assert classify(files["wav"]).kind == RECORDING
    assert classify(files["md"]).kind == SCRIPT
    assert classify(os.path.join(BOOKS, "alice.epub")).kind == SCRIPT
    for bad, words in ((files["llama"], "another program (architecture 'llama')"), (files["xyz"], "opens models"),
                       (str(tmp_path / "gone.wav"), "no such file")):
        with pytest.raises(CannotOpen) as e:
            classify(bad)
        assert words in str(e.value), str(e.value)
    assert read_script(files["md"]) == "# A story\n\nOnce upon a time.\n\n# The end\n\nThey lived.\n"
    assert read_script(os.path.join(BOOKS, "alice.epub")).startswith("# Chapter I. Down the Rabbit-Hole\n\nAlice was")


def _answer_book_prompt(qtbot, w, answer: str, *, default: bool) -> None:
    """A book file asks: an audiobook, or the script? Click `answer`; `default`: is it the default?"""
    _wait(qtbot, lambda: w.opener.book_prompt is not None, 30, "the book-or-script question")
    box = w.opener.book_prompt
    button = next(b for b in box.buttons() if b.text() == answer)
    assert (box.defaultButton() is button) == default
    button.click()


def test_each_file_opens_for_what_it_is(qtbot, tmp_path, model, files):
    w = _make_window(tmp_path)
    qtbot.addWidget(w)
    w.show()
    loaded = []
    w.client.modelChanged.connect(loaded.append)
    w.open_files([model])
    _wait(qtbot, lambda: loaded and loaded[-1], 180, "the model to load")
    assert loaded[-1]["variant"] == "nano" and w.models.status_label.text() != "No model loaded"
    assert w.stack.currentWidget() is w.studio_page  # not the Voice Lab

    # a voice: asked first; "Add and use" copies it into the library and makes it the voice
    w.open_files([files["voice"]])
    _wait(qtbot, lambda: w.opener.voice_prompt is not None, 30, "the voice prompt")
    box = w.opener.voice_prompt
    assert "narrator" in box.text()
    use = next(b for b in box.buttons() if b.text() == "Add and use")
    use.click()
    _wait(qtbot, lambda: w.settings.voice.startswith(w.store.folder), 30, "the voice in the library")
    assert os.path.basename(w.settings.voice) == "Narrator.voice.gguf" and w.voices.name() == "Narrator"

    # a script: the editor's text, one undo step from the old one
    w.editor.set_text("The old script.")
    w.open_files([files["md"]])
    _answer_book_prompt(qtbot, w, "Open as the script", default=True)
    _wait(qtbot, lambda: "Once upon a time." in w.editor.text(), 30, "the script")
    assert w.editor.text() == "# A story\n\nOnce upon a time.\n\n# The end\n\nThey lived.\n"
    w.editor.edit.undo()
    assert w.editor.text() == "The old script."
    drop_file(w.editor.edit.viewport(), os.path.join(BOOKS, "alice.epub"))  # dropped: opened, not pasted as a path
    _answer_book_prompt(qtbot, w, "Open as the script", default=False)  # an EPUB's default is the audiobook
    _wait(qtbot, lambda: "Down the Rabbit-Hole" in w.editor.text(), 60, "the EPUB as the script")
    assert "alice.epub" not in w.editor.text()

    # what the app cannot open: one message, nothing else changes
    w.open_files([files["llama"]])
    _wait(qtbot, lambda: "another program" in w.last_error, 30, "the refusal")
    print("\nrefused:", w.last_error)

    # a recording: the Voice Lab
    w.open_files([files["wav"]])
    assert w.stack.currentWidget() is w.lab
    _wait(qtbot, lambda: w.lab.session.busy == "", 60, "the Voice Lab's analysis")  # before the window goes
    _close(w)
