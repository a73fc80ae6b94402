"""Making an audiobook in the app, end to end (app.qt.book_dialog -> app.qt.book_render_view ->
EngineClient.render_book -> app.core.book.render -> app.core.book.job.write_book), with the real
engine on Nano Q4_0 (random weights), the cheapest preset and two speech tokens per sentence:

- the review of an EPUB (a chapter excluded, one renamed) rendered into an M4B whose chapters
  ffprobe reads with the titles given; the first chapter played through the app's player while
  the second renders; the summary at the end; the GUI thread never busy for long meanwhile;
- a Play in the studio during the render goes first, and the same job goes on afterwards;
- Cancel: the finished chapters written into an audiobook of their own;
- the real Alice EPUB's title page (front matter, ticked in the review) with the book's cover and tags;
- a render paused mid-chapter, the app closed and opened again: the job comes back paused,
  Resume finishes it, and every chapter's samples equal an uninterrupted render's.
"""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pytest
import soundfile as sf

pytest.importorskip("pytestqt")

from tests.helpers.book_files import SHORT_BOOK, write_epub  # noqa: E402
from tests.helpers.main_window import TimerProbe, _close, _make_window, _wait, load_and_wait  # noqa: E402

BOOKS = os.path.join(os.path.dirname(__file__), "..", "..", "helpers", "books")
MAX_TOKENS = 2


@pytest.fixture(scope="module")
def model():
    from tests.helpers.models import model_path

    return str(model_path("nano", "q4_0"))


def _window(folder, model):
    w = _make_window(folder)
    w.show()
    if model:
        load_and_wait(w, model)
    w.toolbar.preset_combo.setCurrentText("Low latency")           # one CFM step, a 4 s voice prompt
    w.sampling_panel.spins["max_tokens"].setValue(MAX_TOKENS)
    w.sampling_panel.seed_random.setChecked(False)
    w.sampling_panel.seed_spin.setValue(7)
    return w


def _reviewed(qtbot, w, path, output, *, exclude=(), include=(), rename=None):
    dlg = w.books.make_audiobook(path)
    _wait(qtbot, lambda: dlg.book is not None or dlg.error, 60, "the book to be read")
    for r in range(dlg.table.rowCount()):
        if r in exclude:
            dlg.set_chapter(r, included=False)
        if r in include:
            dlg.set_chapter(r, included=True)
    for r, title in (rename or {}).items():
        dlg.set_chapter(r, title=title)
    dlg.output_edit.setText(str(output))
    dlg.render_button.click()
    assert not dlg.isVisible(), dlg.error_label.text()
    return w.books.view


def _probe(path) -> dict:
    return json.loads(subprocess.run(["ffprobe", "-v", "error", "-show_chapters", "-show_streams", "-show_format",
                                      "-of", "json", str(path)], capture_output=True, text=True).stdout)


def _chapter_samples(view) -> list[np.ndarray]:
    return [sf.read(p, dtype="float32")[0] for _n, (_t, p) in sorted(view.done.items())]


def test_review_render_to_m4b_play_the_first_chapter_and_the_summary(qtbot, tmp_path, model):
    w = _window(tmp_path, model)
    book = write_epub(tmp_path / "short.epub", SHORT_BOOK, title="Three Short Chapters", author="A. Writer")
    probe = TimerProbe()
    probe.start()
    view = _reviewed(qtbot, w, book, tmp_path / "short.m4b", exclude={0}, rename={2: "The Last"})
    assert view.state == "rendering" and view.table.rowCount() == 2
    assert w.settings.book_job and json.loads(w.settings.book_job)["chapters"] == [2, 3]
    # The first finished chapter plays through the app's player while the second renders.
    _wait(qtbot, lambda: 2 in view.done, 300, "the first chapter")
    second_rendering = view.state == "rendering" and 3 not in view.done
    assert view.table.cellWidget(0, 3).isEnabled() and view.table.item(0, 2).text().startswith("done")
    view.table.cellWidget(0, 3).click()
    _wait(qtbot, lambda: w.player.snapshot().fed_s > 0, 30, "the chapter in the player")
    frames = sf.info(view.done[2][1]).frames
    _wait(qtbot, lambda: view.state in ("done", "failed"), 600, "the audiobook")
    assert view.state == "done", view.status_label.text()
    probe.stop()
    probe.check("while the book was read, rendered, played and written")   # the GUI thread never waited
    assert abs(w.player.snapshot().fed_s - frames / w.client.sample_rate) < 1e-3   # the whole chapter, once
    view.stop_playing()
    probe = _probe(tmp_path / "short.m4b")
    titles = [c["tags"]["title"] for c in probe["chapters"]]
    print("\nchapters:", [(c["tags"]["title"], c["start_time"], c["end_time"]) for c in probe["chapters"]],
          "\nsummary:\n" + "\n".join(view.summary), "\nsecond chapter still rendering at play:", second_rendering)
    assert titles == ["Chapter Two", "The Last"]
    assert probe["streams"][0]["codec_name"] == "aac" and probe["format"]["tags"]["title"] == "Three Short Chapters"
    assert probe["format"]["tags"]["artist"] == "A. Writer"
    text = "\n".join(view.summary)
    assert "2 chapters" in text and "characters" in text and "regenerated" in text and "LUFS" in text
    assert view.summary_label.isVisible() and w.settings.book_job == ""
    assert view.result.rendered == view.result.pieces == 5     # chapter 2: title + 2 lines; chapter 3: title + 1
    view.close()
    _wait(qtbot, lambda: not (tmp_path / "short.m4b.parts").exists(), 30, "the parts folder to go")
    assert w.books.view is None
    _close(w)


def test_the_real_alice_title_page_with_its_cover_and_tags(qtbot, tmp_path, model):
    w = _window(tmp_path, model)
    alice = os.path.join(BOOKS, "alice.epub")
    view = _reviewed(qtbot, w, alice, tmp_path / "alice.m4b", include={0}, exclude=set(range(1, 13)),
                     rename={0: "Title page"})
    _wait(qtbot, lambda: view.state in ("done", "failed"), 600, "the audiobook")
    assert view.state == "done", view.status_label.text()
    probe = _probe(tmp_path / "alice.m4b")
    assert [c["tags"]["title"] for c in probe["chapters"]] == ["Title page"]
    tags = probe["format"]["tags"]
    assert tags["title"] == "Alice’s Adventures in Wonderland" and tags["artist"] == "Lewis Carroll"
    assert any(s.get("disposition", {}).get("attached_pic") for s in probe["streams"])   # the cover
    # how the speech was made (app.core.provenance), after the book's own comment: marked, as the app's default
    assert tags["comment"].startswith("Read by ") and tags["comment"].endswith("watermark: perth"), tags["comment"]
    assert "; model: " in tags["comment"]
    view.close()
    _close(w)


def test_paused_closed_reopened_and_resumed_equals_uninterrupted(qtbot, tmp_path, model):
    book = write_epub(tmp_path / "short.epub", SHORT_BOOK[:2])
    # Uninterrupted.
    (tmp_path / "a").mkdir()
    w = _window(tmp_path / "a", model)
    whole = _reviewed(qtbot, w, book, tmp_path / "whole.m4b")
    _wait(qtbot, lambda: whole.state in ("done", "failed"), 600, "the uninterrupted audiobook")
    assert whole.state == "done", whole.status_label.text()
    expected = _chapter_samples(whole)
    _close(w)
    # Paused in the middle of chapter 2, the app closed.
    (tmp_path / "b").mkdir()
    w = _window(tmp_path / "b", model)
    view = _reviewed(qtbot, w, book, tmp_path / "resumed.m4b")
    _wait(qtbot, lambda: 1 in view.done and view.bars[1].value() > 0, 600, "chapter 2 under way")
    view.pause()
    assert view.state == "paused" and view.pause_button.text() == "Resume"
    _wait(qtbot, lambda: not w.client.busy, 120, "the engine to stop")
    assert 2 not in view.done and w.settings.book_job
    _close(w)
    chapters = sorted(p.name[:3] for p in (tmp_path / "resumed.m4b.parts" / "chapters").glob("*.wav"))
    assert chapters == ["001"]
    # Opened again: the job is back, paused; Resume finishes it from the parts folder.
    w = _window(tmp_path / "b", None)
    view = w.books.view
    assert view is not None
    _wait(qtbot, lambda: view.book is not None, 60, "the book read again")
    assert view.state == "paused"
    load_and_wait(w, model)
    view.pause_button.click()
    _wait(qtbot, lambda: view.state in ("done", "failed"), 600, "the resumed audiobook")
    assert view.state == "done", view.status_label.text()
    assert [c.cached for c in view.result.chapters] == [True, False]
    assert 0 < view.result.rendered < view.result.pieces
    got = _chapter_samples(view)
    assert [x.size for x in got] == [x.size for x in expected]
    assert all(np.array_equal(a, b) for a, b in zip(got, expected))
    assert [c["tags"]["title"] for c in _probe(tmp_path / "resumed.m4b")["chapters"]] == ["Chapter One", "Chapter Two"]
    _close(w)


def test_a_play_in_the_studio_goes_first_and_the_book_goes_on(qtbot, tmp_path, model):
    w = _window(tmp_path, model)
    book = write_epub(tmp_path / "short.epub", SHORT_BOOK[:2])
    view = _reviewed(qtbot, w, book, tmp_path / "short.m4b")
    job = view.engine_job
    _wait(qtbot, lambda: view.bars[0].value() > 0, 300, "the book under way")
    take = w.script.play_text("A word between.", 0)
    _wait(qtbot, lambda: w.controller.state == "idle", 300, "the studio's take")
    assert take.frames > 0 and view.state in ("rendering", "writing", "done")     # not paused by it
    _wait(qtbot, lambda: view.state in ("done", "failed"), 600, "the audiobook")
    assert view.state == "done", view.status_label.text()
    assert view.engine_job is job and not job.cancelled                          # the same job went on
    assert view.result.rendered < view.result.pieces                             # from its parts folder
    assert [c["tags"]["title"] for c in _probe(tmp_path / "short.m4b")["chapters"]] == ["Chapter One", "Chapter Two"]
    view.close()
    _close(w)


def test_cancel_keeps_the_finished_chapters_and_writes_them_on_their_own(qtbot, tmp_path, model):
    w = _window(tmp_path, model)
    book = write_epub(tmp_path / "short.epub", SHORT_BOOK[:2])
    view = _reviewed(qtbot, w, book, tmp_path / "short.m4b")
    _wait(qtbot, lambda: 1 in view.done, 300, "the first chapter")
    view.cancel()
    assert view.state == "cancelled" and w.settings.book_job == ""          # forgotten: no resume at the next start
    _wait(qtbot, lambda: not w.client.busy, 120, "the engine to stop")
    assert view.write_button.isVisible() and "1 finished chapter kept" in view.status_label.text()
    view.write_button.click()
    _wait(qtbot, lambda: view.state in ("done", "failed"), 300, "the finished chapters written")
    assert view.state == "done", view.status_label.text()
    assert [c["tags"]["title"] for c in _probe(tmp_path / "short.m4b")["chapters"]] == ["Chapter One"]
    assert view.summary[0].endswith("1 chapter") and view.result is None
    view.close()
    _close(w)
