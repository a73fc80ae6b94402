"""An HTML page -> a Book: chapters at its headings (app.core.book.outline), the text read as
EPUB content is (app.core.book.html_text), metadata from <title>, <html lang> and the
`author` / `dcterms.date` / `DC.*` meta tags."""

from __future__ import annotations

import os
import re

from app.core.book.html_text import parse_markup, read_document
from app.core.book.model import Book, NoTextError
from app.core.book.outline import add_chapters, book_title, chapter_level
from app.core.book.plain import read_book_file

MAX_HTML_BYTES = 256 * 2**20


def _meta(root, *names: str) -> str:
    wanted = {n.lower() for n in names}
    for m in root.iter("meta", "{http://www.w3.org/1999/xhtml}meta"):
        if (m.get("name") or m.get("property") or "").lower() in wanted and (m.get("content") or "").strip():
            return " ".join(m.get("content").split())
    return ""


def import_html(path: str, data: bytes | None = None) -> Book:
    name = os.path.basename(path)
    if data is None:
        data = read_book_file(path, MAX_HTML_BYTES)
    try:
        root = parse_markup(data, xml_first=False)
    except ValueError as e:
        raise NoTextError(f"{name} holds no HTML text ({e})") from None
    doc = read_document(root)
    level = chapter_level(doc.blocks)
    year = re.search(r"\b(\d{4})\b", _meta(root, "dcterms.date", "dc.date", "date"))
    book = Book(book_title(doc.blocks, level) or doc.title or os.path.splitext(name)[0], [],
                author=_meta(root, "author", "dc.creator", "dcterms.creator"), language=doc.language,
                year=year.group(1) if year else None, format="html", source=path)
    add_chapters(book, doc.blocks, source=name, notes=doc.notes)
    if not book.chapters:
        raise NoTextError(f"{name} holds no text to read")
    return book
