"""One entry point for every book format: the importer is chosen by the file's extension."""

from __future__ import annotations

import os

from app.core.book.model import Book, BookError, UnsupportedBookError

BOOK_EXTENSIONS = {".epub": "EPUB", ".md": "Markdown", ".markdown": "Markdown", ".html": "HTML",
                   ".htm": "HTML", ".xhtml": "HTML", ".txt": "plain text", ".text": "plain text"}


def import_book(path: str | os.PathLike) -> Book:
    """The book in `path`; BookError (one line: the file and what is wrong) when it cannot be read."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise BookError(f"{path}: no such file")
    if os.path.isdir(path):
        raise BookError(f"{path} is a folder, not a book")
    ext = os.path.splitext(path)[1].lower()
    if ext == ".epub":
        from app.core.book.epub import import_epub

        return import_epub(path)
    if ext in (".md", ".markdown"):
        from app.core.book.markdown_book import import_markdown

        return import_markdown(path)
    if ext in (".html", ".htm", ".xhtml"):
        from app.core.book.html_book import import_html

        return import_html(path)
    if ext in (".txt", ".text"):
        from app.core.book.plain import import_text

        return import_text(path)
    raise UnsupportedBookError(f"{os.path.basename(path)}: cannot read {ext or 'files without an extension'} "
                               f"books; give one of {', '.join(sorted(BOOK_EXTENSIONS))}")
