"""The app's script features (issue 20), pytest-qt on the real window and the small random
Nano model: likeness per take (history and Voice Lab), best-of-N as a setting, the cast
dialog (remembered per script, used when playing), the lexicon editor ("hear it", atomic
save) and "Export script..." (progress dialog, cancel, resume)."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6.QtWidgets import QApplication

from tests.helpers.main_window import STREAM, _close, _make_window, _wait

MAX_TOKENS = 20


@pytest.fixture(scope="module")
def win(qapp, tmp_path_factory):
    from tests.helpers.models import model_path

    folder = tmp_path_factory.mktemp("script_gui2")
    w = _make_window(folder)
    w.script.lexicon_path = str(folder / "lexicon.json")
    w.resize(1100, 720)
    w.show()
    w.controller.stream_options = dict(STREAM)
    loaded = []
    w.client.modelChanged.connect(loaded.append)
    w.load_model(str(model_path("nano", "q4_0")))
    deadline = time.monotonic() + 120
    while not loaded and time.monotonic() < deadline:
        QApplication.processEvents()
        time.sleep(0.01)
    assert loaded and loaded[-1], w.last_error
    w.toolbar.preset_combo.setCurrentText("Low latency")
    w.sampling_panel.spins["max_tokens"].setValue(MAX_TOKENS)
    w.sampling_panel.seed_random.setChecked(False)
    w.sampling_panel.seed_spin.setValue(3)
    w.lab.likeness_options = {"max_tokens": MAX_TOKENS, "cfm_steps": 1}
    w.folder = folder
    yield w
    _close(w)


def _idle(qtbot, w, what, timeout=120):
    _wait(qtbot, lambda: not w.client.busy and w.controller.state == "idle", timeout, what)


def _history_takes(w):
    from PySide6.QtCore import Qt

    return [w.editor.history.item(i).data(Qt.UserRole) for i in range(w.editor.history.count())]


def test_take_history_shows_likeness_computed_off_the_gui_thread(win, qtbot):
    w = win
    w.settings.best_of = 1
    calls = []
    real = w.client.worker.likeness
    w.client.worker.likeness = lambda s, v: (calls.append(not _on_gui_thread()), real(s, v))[1]
    try:
        w.editor.set_text("Hello there.")
        w.script.play_text(w.editor.text(), 0)
        _wait(qtbot, lambda: _history_takes(w) and _history_takes(w)[0].likeness is not None, 120, "likeness")
    finally:
        w.client.worker.likeness = real
    take = _history_takes(w)[0]
    assert calls == [True]                      # computed on the engine thread
    assert -1.0 <= take.likeness <= 1.0
    assert f"likeness {take.likeness:.2f}" in w.editor.history.item(0).text()
    _idle(qtbot, w, "idle")


def _on_gui_thread() -> bool:
    from PySide6.QtCore import QThread

    return QThread.currentThread() is QApplication.instance().thread()


def test_best_of_setting_renders_n_takes_and_scores_the_take(win, qtbot):
    w = win
    action = next(a for a in w.script.best_of_menu.actions() if a.text() == "Best of 2")
    action.trigger()
    assert w.settings.best_of == 2
    seen = []
    real = w.client.render_script
    w.client.render_script = lambda *a, **k: (seen.append(k["best_of"]), real(*a, **k))[1]
    try:
        w.editor.set_text("One more.")
        take = w.script.play_text(w.editor.text(), 0)
        _wait(qtbot, lambda: take.complete, 120, "a best-of take")
    finally:
        w.client.render_script = real
        w.settings.best_of = 1
    assert seen == [2]
    assert take.likeness is not None and take.frames > 0   # the winner's score, from the render
    _idle(qtbot, w, "idle")


def _library_voice(w, qtbot, name):
    """Save the model's built-in voice under `name` in the window's library (cheap stand-in voice)."""
    out = []
    os.makedirs(w.store.folder, exist_ok=True)
    path = os.path.join(w.store.folder, f"{name}.voice.gguf")
    w.client.submit(lambda wk, _j: wk.engine.builtin_voice.save(path, name), success=out.append)
    _wait(qtbot, lambda: out, 60, "a saved voice")
    w.library.reload()
    _wait(qtbot, lambda: not w.library.busy, 60, "the library read")
    return path


def test_cast_dialog_maps_speakers_to_library_voices_remembered_and_used(win, qtbot):
    w = win
    alice, bob = _library_voice(w, qtbot, "Alice"), _library_voice(w, qtbot, "Bob")
    text = "Alice: Hi Bob.\nBob: Hello."
    w.editor.set_text(text)
    dlg = w.script.edit_cast()
    assert list(dlg.combos) == ["Alice", "Bob"]
    for name, path in (("Alice", alice), ("Bob", bob)):
        c = dlg.combos[name]
        c.setCurrentIndex(c.findData(path))
    dlg.accept()
    dlg2 = w.script.edit_cast()                        # remembered for this script's speakers
    assert dlg2.combos["Alice"].currentData() == alice and dlg2.combos["Bob"].currentData() == bob
    dlg2.reject()
    used = []
    real = w.client.worker.voice
    w.client.worker.voice = lambda p: (used.append(p), real(p))[1]
    try:
        take = w.script.play_text(w.editor.text(), 0)
        _wait(qtbot, lambda: take.complete, 120, "a cast take")
    finally:
        w.client.worker.voice = real
    assert alice in used and bob in used
    spans = sorted(s.span for s in take.sentences.values())
    assert len(spans) == 2 and text[spans[0][0]:spans[0][1]] == "Hi Bob." \
        and text[spans[1][0]:spans[1][1]] == "Hello."   # the prefixes are not spoken
    _idle(qtbot, w, "idle")


def test_selected_lines_are_assigned_to_a_voice_in_one_undo_step(win, qtbot):
    from PySide6.QtGui import QTextCursor

    from app.qt.script_panels import load_cast

    w = win
    carol = _library_voice(w, qtbot, "carol the narrator #2")
    w.editor.set_text("Once upon a time.\nBob: There was a fox.\n\nThe end.")
    cur = w.editor.edit.textCursor()
    cur.setPosition(5)                                        # from inside line 1 ...
    cur.setPosition(len("Once upon a time.\nBob: Th"), QTextCursor.KeepAnchor)   # ... into line 2
    w.editor.edit.setTextCursor(cur)
    w.script.fill_assign_menu()
    names = [a.text() for a in w.script.assign_menu.actions()]
    assert names[0] == w.client.builtin_voice_name and "carol the narrator #2" in names
    w.script.assign_menu.actions()[names.index("carol the narrator #2")].trigger()
    assert w.editor.text() == ("Carol The Narrator: Once upon a time.\nCarol The Narrator: There was a fox."
                               "\n\nThe end.")
    assert load_cast(w.settings, w.editor.text()) == {"Carol The Narrator": carol}
    opts = w.script.script_options(w.editor.text())
    assert opts["voices"] == {"Carol The Narrator": carol} and opts["speakers"] == ["Carol The Narrator"]
    w.editor.edit.undo()                                      # one step back to the text as it was
    assert w.editor.text() == "Once upon a time.\nBob: There was a fox.\n\nThe end."


def test_regenerating_a_sentence_uses_its_speakers_voice_and_the_lexicon(win, qtbot):
    from app.qt.script_panels import save_cast
    from engine_native.lexicon import Lexicon

    w = win
    alice, bob = _library_voice(w, qtbot, "Alice"), _library_voice(w, qtbot, "Bob")
    text = "Alice: Hi Bob.\nBob: I met Nguyen."
    w.editor.set_text(text)
    save_cast(w.settings, text, {"Alice": alice, "Bob": bob})
    lex = Lexicon()
    lex.add("Nguyen", "Win")
    lex.save(w.script.lexicon_path)
    _wait(qtbot, lambda: w.script.lexicon_file.lexicon is not None, 30, "the lexicon read")  # (off the GUI thread)
    try:
        take = w.script.play_text(w.editor.text(), 0)
        _wait(qtbot, lambda: take.complete, 120, "a cast take")
        _idle(qtbot, w, "idle")
        streamed = []
        real = w.client.stream
        w.client.stream = lambda text, voice, *a, **k: (streamed.append((text, voice)), real(text, voice, *a, **k))[1]
        try:
            assert w.script.regenerate_at(text.index("met"))
            _idle(qtbot, w, "the regenerated sentence")
        finally:
            w.client.stream = real
    finally:
        os.remove(w.script.lexicon_path)
        _wait(qtbot, lambda: w.script.lexicon_file.lexicon is None, 30, "the lexicon gone")
    assert streamed == [("I met Win.", bob)]


def test_lexicon_editor_hear_it_and_atomic_save(win, qtbot):
    from engine_native.lexicon import Lexicon

    w = win
    dlg = w.script.edit_lexicon()
    assert dlg.path == w.script.lexicon_path
    dlg.add_row("Nguyen", "Win")
    dlg.add_row("SQL", "sequel")
    dlg.add_row("gone", "soon")
    dlg.remove_row()
    dlg.table.setCurrentCell(0, 1)
    takes = []
    w.controller.takeStarted.connect(takes.append)
    assert dlg.hear() == "Win"
    assert takes and takes[-1].text == "Win" and not takes[-1].in_history
    _idle(qtbot, w, "the word heard")
    op = dlg.save()  # written in the background
    _wait(qtbot, lambda: not op.running, 30, "the lexicon saved")
    assert op.error is None and not dlg.isVisible()
    assert Lexicon.load(w.script.lexicon_path).items() == [("Nguyen", "Win"), ("SQL", "sequel")]
    assert [f for f in os.listdir(os.path.dirname(w.script.lexicon_path)) if ".tmp" in f] == []
    opts = w.script.script_options("I met Nguyen.")  # the lexicon now routes plays through the script path
    assert opts is not None and opts["lexicon"].respell("I met Nguyen.") == "I met Win."
    os.remove(w.script.lexicon_path)
    _wait(qtbot, lambda: w.script.lexicon_file.lexicon is None, 30, "the lexicon gone")


def test_export_script_progress_cancel_and_resume(win, qtbot, monkeypatch):
    import soundfile as sf

    from app.core.long_render import PartsCache, parts_dir_for

    w = win
    w.editor.set_text("Hello there. [pause 0.5s] Second one. Third one. Four.")
    out = str(w.folder / "script.wav")
    real_put, jobs = PartsCache.put, []

    def put_then_cancel(self, key, samples):       # Cancel pressed once a piece is on disk (exactly)
        real_put(self, key, samples)
        if self.written == 1:
            jobs[0].cancel()

    monkeypatch.setattr(PartsCache, "put", put_then_cancel)
    job, dlg = w.script.export_script(out)
    jobs.append(job)
    assert dlg.isVisible() and dlg.maximum() == 1000
    _wait(qtbot, lambda: job.finished, 300, "the cancelled export")
    assert not os.path.exists(out) and not dlg.isVisible()
    assert len(os.listdir(parts_dir_for(out))) == 1      # the finished piece stays on disk
    monkeypatch.setattr(PartsCache, "put", real_put)

    done, failed, labels = [], [], []
    job2, dlg2 = w.script.export_script(out)
    ok, bad, prog = job2.success, job2.failure, job2.progress
    job2.success = lambda r: (done.append(r), ok(r))
    job2.failure = lambda e: (failed.append(e), bad(e))
    job2.progress = lambda p: (prog(p), labels.append((dlg2.value(), dlg2.labelText())))
    _wait(qtbot, lambda: job2.finished, 400, "the resumed export")
    assert not failed and done and done[0]["resumed"] == 1
    assert labels and all("of 4" in t and "left" in t for _v, t in labels)
    assert [v for v, _t in labels] == sorted(v for v, _t in labels)   # (a piece the random model ends at once gives no audio)
    data, rate = sf.read(out)
    assert data.size > 0.5 * rate and not os.path.exists(parts_dir_for(out))
    _idle(qtbot, w, "idle")

    job3, dlg3 = w.script.export_script(str(w.folder / "again.wav"))   # the dialog's Cancel button cancels
    dlg3.canceled.emit()   # what the Cancel button sends (QProgressDialog.cancel() itself only resets)
    assert job3.cancelled
    _wait(qtbot, lambda: job3.finished, 60, "the third export")


def test_voice_lab_shows_likeness_after_cloning(win, qtbot):
    w = win
    got = []
    w.client.submit(lambda wk, _j: wk.engine.builtin_voice, success=got.append)
    _wait(qtbot, lambda: got, 60, "a voice")
    w.lab.session.voice = got[0]
    w.lab.score_clone(got[0], "Cloned.")
    _wait(qtbot, lambda: w.lab.session.clone_likeness is not None, 120, "the clone's likeness")
    assert -1.0 <= w.lab.session.clone_likeness <= 1.0
    assert "Likeness of a test take" in w.lab.clone_status.text()
    assert np.isfinite(w.lab.session.clone_likeness)
