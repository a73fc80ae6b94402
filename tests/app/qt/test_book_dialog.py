"""The audiobook review (app.qt.book_dialog) on real books: the EPUB of Alice's Adventures in
Wonderland (tests/helpers/books) shows its title, author, language, cover and chapter list
with the front matter unticked; excluding and renaming chapters become the job; an EPUB opened
on the window offers the audiobook; a broken archive and a DRM-protected EPUB each give one
clear message in the dialog. No model is needed: the book is read without the engine."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("pytestqt")

from tests.helpers.book_files import SHORT_BOOK, write_epub  # noqa: E402
from tests.helpers.main_window import _close, _make_window, _wait  # noqa: E402

BOOKS = os.path.join(os.path.dirname(__file__), "..", "..", "helpers", "books")


@pytest.fixture
def window(qtbot, tmp_path):
    w = _make_window(tmp_path)
    qtbot.addWidget(w)
    w.show()
    yield w
    _close(w)


def _review(qtbot, w, path):
    dlg = w.books.make_audiobook(path)
    _wait(qtbot, lambda: dlg.book is not None or dlg.error, 60, "the book to be read")
    return dlg


def test_a_real_epub_is_reviewed_and_the_choices_become_the_job(qtbot, window, tmp_path):
    alice = os.path.abspath(os.path.join(BOOKS, "alice.epub"))
    dlg = _review(qtbot, window, alice)
    assert dlg.error == "" and not dlg.error_label.isVisible()
    assert dlg.title_edit.text() == "Alice’s Adventures in Wonderland" and dlg.author_edit.text() == "Lewis Carroll"
    assert dlg.language_label.text() == "en-GB" and "epub" in dlg.source_label.text()
    assert dlg.cover.pixmap() is not None and not dlg.cover.pixmap().isNull()      # the book's cover
    rows = [dlg.chapter_row(r) for r in range(dlg.table.rowCount())]
    assert len(rows) == 13 and rows[1] == (True, "Chapter I. Down the Rabbit-Hole")
    assert rows[0] == (False, "Alice’s Adventures in Wonderland")                  # the title page: front matter
    assert dlg.table.item(0, 1).text() == "Front matter" and dlg.table.item(1, 1).text() == "Chapter"
    assert dlg.count_label.text() == "12 of 13 chapters, 26,291 words" and dlg.render_button.isEnabled()
    # Exclude chapter III, include the title page, rename chapter I; an empty title stops Render.
    dlg.set_chapter(3, included=False)
    dlg.set_chapter(0, included=True)
    dlg.set_chapter(1, title="")
    assert not dlg.render_button.isEnabled() and "needs a title" in dlg.count_label.text()
    dlg.set_chapter(1, title="  The Rabbit   Hole ")
    assert dlg.render_button.isEnabled()
    job = dlg.job(seed=5)
    assert job.chapters == [1, 2, 3, 5, 6, 7, 8, 9, 10, 11, 12, 13] and job.renames == {2: "The Rabbit Hole"}
    assert job.output == alice[:-5] + ".m4b" and job.kind == "m4b" and job.seed == 5
    assert job.lexicon == alice[:-5] + ".lexicon.json" and job.voice == ""
    book = job.apply(dlg.book)
    assert [n for n, _c in book.included()][:3] == [1, 2, 3] and book.chapters[1].title == "The Rabbit Hole"
    # The output's kind: an MP3 with chapter marks, a folder of chapter files; a wrong name is refused.
    dlg.kind_combo.setCurrentIndex(dlg.kind_combo.findData("mp3"))
    assert dlg.output_edit.text() == alice[:-5] + ".mp3"
    dlg.kind_combo.setCurrentIndex(dlg.kind_combo.findData("folder"))
    assert dlg.output_edit.text() == alice[:-5] + "-chapters"
    dlg.kind_combo.setCurrentIndex(dlg.kind_combo.findData("m4b"))
    dlg.output_edit.setText(str(tmp_path / "alice.wav"))
    dlg.accept()
    assert dlg.isVisible() and "cannot write a .wav audiobook" in dlg.error_label.text()
    dlg.output_edit.setText(str(tmp_path / "nowhere" / "alice.m4b"))
    dlg.accept()
    assert dlg.isVisible() and "does not exist" in dlg.error_label.text()
    dlg.reject()


def test_an_epub_opened_on_the_window_offers_the_audiobook(qtbot, window):
    alice = os.path.join(BOOKS, "alice.epub")
    window.open_files([alice])
    _wait(qtbot, lambda: window.opener.book_prompt is not None, 30, "the question")
    box = window.opener.book_prompt
    assert box.defaultButton().text() == "Make an audiobook…"
    box.defaultButton().click()
    _wait(qtbot, lambda: window.books.dialog is not None and window.books.dialog.book is not None, 60, "the review")
    assert window.books.dialog.table.rowCount() == 13


def test_a_bad_book_gives_one_clear_message_in_the_dialog(qtbot, window, tmp_path):
    broken = tmp_path / "broken.epub"
    good = open(os.path.join(BOOKS, "alice.epub"), "rb").read()
    broken.write_bytes(good[: len(good) // 2])                 # cut short: the zip's directory is gone
    enc = ('<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
           'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
           '<enc:EncryptionMethod Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>'
           '<enc:CipherData><enc:CipherReference URI="OEBPS/c1.xhtml"/></enc:CipherData>'
           '</enc:EncryptedData></encryption>')
    drm = write_epub(tmp_path / "drm.epub", SHORT_BOOK, extra={"META-INF/encryption.xml": enc})
    for path, words in ((str(broken), "zip archive is damaged"), (drm, "DRM-protected")):
        dlg = _review(qtbot, window, path)
        print(f"\n{os.path.basename(path)}: {dlg.error}")
        assert words in dlg.error and dlg.error_label.text() == dlg.error and dlg.error_label.isVisible()
        assert dlg.error.count("\n") == 0 and "Traceback" not in dlg.error
        assert dlg.book is None and not dlg.render_button.isEnabled() and not dlg.table.isEnabled()
        assert window.last_error == ""                          # in the dialog, not a second message elsewhere
        dlg.reject()
    assert broken.stat().st_size == len(good) // 2              # nothing of the file was touched
