"""Book importers (app.core.book) on real books, and on the bad books people have.

The real books are in tests/helpers/books/ (made by tests/helpers/books/make_books.py from two Project
Gutenberg etexts with pandoc's EPUB writer): Alice's Adventures in Wonderland as EPUB 3,
Markdown, HTML and the plain etext; Paradise Lost as EPUB 2.
"""

from __future__ import annotations

import gzip
import resource
import zipfile
from pathlib import Path

import pytest

from app.core.book import (
    Book,
    BookError,
    DamagedBookError,
    DrmProtectedError,
    NoSpineError,
    NoTextError,
    UnsupportedBookError,
    import_book,
)
from app.core.book.render import chapter_items, chapter_script
from engine_native.script import Piece
from tests.helpers.book_files import SHORT_BOOK, chapter_body, write_epub

BOOKS = Path(__file__).resolve().parents[3] / "helpers" / "books"
ALICE = ["Chapter I. Down the Rabbit-Hole", "Chapter II. The Pool of Tears",
         "Chapter III. A Caucus-Race and a Long Tale", "Chapter IV. The Rabbit Sends in a Little Bill",
         "Chapter V. Advice from a Caterpillar", "Chapter VI. Pig and Pepper", "Chapter VII. A Mad Tea-Party",
         "Chapter VIII. The Queen's Croquet-Ground", "Chapter IX. The Mock Turtle's Story",
         "Chapter X. The Lobster Quadrille", "Chapter XI. Who Stole the Tarts?", "Chapter XII. Alice's Evidence"]
ROMAN = "I II III IV V VI VII VIII IX X XI XII".split()


def _plain(s: str) -> str:
    return s.replace("\u2019", "'")


def _unzipped(tmp_path, name: str) -> Path:
    out = tmp_path / name
    out.write_bytes(gzip.decompress((BOOKS / f"{name}.gz").read_bytes()))
    return out


def _body(book: Book) -> list[str]:
    return [_plain(c.title) for c in book.chapters if c.included]


def test_epub3_alice_chapters_from_the_navigation_document():
    book = import_book(BOOKS / "alice.epub")
    assert (book.title, book.author, book.language, book.year, book.format) == \
        ("Alice\u2019s Adventures in Wonderland", "Lewis Carroll", "en-GB", "1865", "epub3")
    assert book.cover[:3] == b"\xff\xd8\xff" and book.cover_mime == "image/jpeg"
    assert _body(book) == ALICE
    assert [(c.kind, c.included) for c in book.chapters[:2]] == [("front", False), ("body", True)]  # the title page
    first = book.chapters[1]
    assert first.paragraphs[0].startswith("Alice was beginning to get very tired")   # the heading is the title
    assert 2100 < first.words < 2200 and not book.notes


def test_epub2_paradise_lost_chapters_from_the_ncx():
    book = import_book(BOOKS / "paradise-lost.epub")
    assert (book.title, book.author, book.language, book.year, book.format) == \
        ("Paradise Lost", "John Milton", "en", "1667", "epub2")
    assert book.cover_mime == "image/jpeg" and len(book.cover) > 1000
    assert [(c.title, c.kind) for c in book.chapters[:2]] == [("Paradise Lost", "front"),
                                                              ("A note on this etext", "front")]
    assert _body(book) == [f"Book {r}" for r in ROMAN]
    # Verse lines (<br/>) run on into their sentences.
    assert book.chapters[2].paragraphs[0].startswith("Of Man\u2019s first disobedience, and the fruit Of that")


def test_markdown_html_and_plain_text_alice(tmp_path):
    md = import_book(_unzipped(tmp_path, "alice.md"))
    assert (md.title, md.author, md.language, md.format) == \
        ("Alice's Adventures in Wonderland", "Lewis Carroll", "en-GB", "markdown")
    assert _body(md) == ALICE
    html = import_book(_unzipped(tmp_path, "alice.html"))
    assert html.format == "html" and html.language == "en-GB" and html.year == "1865"
    assert _body(html) == ALICE and html.chapters[0].kind == "front"      # pandoc's title block
    txt = import_book(_unzipped(tmp_path, "alice.txt"))
    assert (txt.title, txt.author, txt.format) == ("Alice's Adventures in Wonderland", "Lewis Carroll", "text")
    assert _body(txt) == ALICE and txt.chapters[0].title == "Title page" and not txt.chapters[0].included
    # Hard-wrapped lines joined into paragraphs, as in the other editions.
    assert txt.chapters[1].paragraphs[1].startswith("So she was considering in her own mind (as well as she could,")
    for book in (md, html, txt):
        assert abs(book.chapters[-1].words - 2104) < 40   # dashes split words differently


def test_selection_and_renaming():
    book = import_book(BOOKS / "alice.epub")
    book.select("1,3-4")
    assert [n for n, _ in book.included()] == [1, 3, 4]
    book.select("front,13")
    assert [n for n, _ in book.included()] == [1, 13]
    book.rename(3, "  The   Pool ")
    assert book.chapters[2].title == "The Pool"
    for bad in ("0", "2-99", "x", ""):
        with pytest.raises(BookError):
            book.select(bad)


def test_footnote_markers_page_numbers_images_and_notes_are_left_out(tmp_path):
    body = ('<section epub:type="chapter"><h1>One</h1><p>It was cold<a epub:type="noteref" href="#n1">1</a>, '
            'very cold.<sup>2</sup> <span epub:type="pagebreak" id="p7" title="7">7</span>The end<span '
            'class="pagenum">[Pg 8]</span> came.<img src="x.png" alt="A picture"/></p>'
            '<div role="doc-pagebreak" aria-label="9"/><p>Next<sup><a href="#n2">[2]</a></sup> day.</p>'
            '<aside epub:type="footnote" id="n1"><p>A cold winter.</p></aside></section>')
    notes = '<section epub:type="endnotes"><h1>Notes</h1><ol><li><p>An endnote.</p></li></ol></section>'
    book = import_book(write_epub(tmp_path / "m.epub", [("One", body), ("Notes", notes)]))
    one = book.chapters[0]
    assert one.paragraphs == ["It was cold, very cold. The end came.", "Next day."]
    # Footnotes and the endnotes section: one notes chapter, left out unless chosen.
    assert [(c.title, c.kind, c.included) for c in book.chapters[1:]] == [("Notes", "notes", False)]
    assert book.chapters[1].paragraphs == ["A cold winter.", "An endnote."]


def test_drm_protected_epubs_are_refused_saying_so(tmp_path):
    enc = ('<encryption xmlns="urn:oasis:names:tc:opendocument:xmlns:container" '
           'xmlns:enc="http://www.w3.org/2001/04/xmlenc#"><enc:EncryptedData>'
           '<enc:EncryptionMethod Algorithm="http://www.w3.org/2001/04/xmlenc#aes128-cbc"/>'
           '<enc:CipherData><enc:CipherReference URI="OEBPS/c1.xhtml"/></enc:CipherData>'
           '</enc:EncryptedData></encryption>')
    for extra in ({"META-INF/encryption.xml": enc}, {"META-INF/rights.xml": "<rights/>"}):
        path = write_epub(tmp_path / "drm.epub", SHORT_BOOK, extra=extra)
        with pytest.raises(DrmProtectedError, match="drm.epub is DRM-protected"):
            import_book(path)
    # Fonts obfuscated by the IDPF algorithm are no DRM: the book reads.
    fonts = enc.replace("http://www.w3.org/2001/04/xmlenc#aes128-cbc", "http://www.idpf.org/2008/embedding") \
        .replace("OEBPS/c1.xhtml", "OEBPS/font.otf")
    assert len(import_book(write_epub(tmp_path / "f.epub", SHORT_BOOK, extra={"META-INF/encryption.xml": fonts}))
               .chapters) == 3


def test_broken_books_get_one_clear_error(tmp_path):
    good = (BOOKS / "alice.epub").read_bytes()
    (tmp_path / "cut.epub").write_bytes(good[: len(good) // 2])
    with pytest.raises(DamagedBookError, match="zip archive is damaged"):
        import_book(tmp_path / "cut.epub")
    with pytest.raises(NoSpineError, match="no reading order"):
        import_book(write_epub(tmp_path / "nospine.epub", SHORT_BOOK, spine=False))
    bad_opf = tmp_path / "badopf.epub"
    with zipfile.ZipFile(write_epub(tmp_path / "good.epub", SHORT_BOOK)) as src, zipfile.ZipFile(bad_opf, "w") as z:
        for name in src.namelist():
            z.writestr(name, src.read(name)[:-20] if name.endswith(".opf") else src.read(name))   # cut short
    with pytest.raises(DamagedBookError, match="not well-formed XML"):
        import_book(bad_opf)
    with pytest.raises(NoTextError):
        import_book(write_epub(tmp_path / "empty.epub", [("Pictures", '<p><img src="a.png"/></p>')]))
    with pytest.raises(UnsupportedBookError, match="cannot read .pdf books"):
        (tmp_path / "b.pdf").write_bytes(b"%PDF-1.4")
        import_book(tmp_path / "b.pdf")


def test_an_empty_chapter_is_skipped_with_a_note(tmp_path):
    docs = [SHORT_BOOK[0], ("Chapter Blank", chapter_body("Chapter Blank", [])), SHORT_BOOK[1]]
    book = import_book(write_epub(tmp_path / "e.epub", docs))
    assert [c.title for c in book.chapters] == ["Chapter One", "Chapter Two"]
    assert book.notes == ["skipped the empty chapter 'Chapter Blank' (OEBPS/c2.xhtml)"]


def test_a_10_mb_chapter_imports_and_parses_in_bounded_memory(tmp_path):
    sentence = "The long chapter goes on and on, as long chapters do. "
    paragraph = sentence * 40
    paras = [paragraph] * (10_000_000 // (len(paragraph) - 1) + 1)
    path = write_epub(tmp_path / "long.epub", [("Long", chapter_body("Long", paras))])
    assert zipfile.ZipFile(path).getinfo("OEBPS/c1.xhtml").file_size > 10_000_000
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    book = import_book(path)
    ch = book.chapters[0]
    assert ch.chars == len(paras) * len(paragraph.strip()) > 10_000_000
    # The pieces come a group of paragraphs at a time: the first arrive without parsing the rest.
    items = chapter_items(ch, base_index=0, paragraph_pause=0.75)
    first = [next(items) for _ in range(5)]
    assert isinstance(first[0], Piece) and first[0].text == "Long"
    # Through the first group of paragraphs (GROUP_CHARS) into the second: the pieces keep their
    # order, indices and spans in the chapter's script.
    script = chapter_script(ch)
    got = [i for _, i in zip(range(4000), items) if isinstance(i, Piece)]
    assert [p.index for p in got] == list(range(5 - sum(not isinstance(i, Piece) for i in first), 5 -
                                                sum(not isinstance(i, Piece) for i in first) + len(got)))
    assert got[-1].start > 100_000 and all(script[p.start:p.end] == p.text for p in got[-50:])
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert grown_mb < 400, grown_mb
    assert chapter_script(ch).startswith("# Long\n\nThe long chapter")
