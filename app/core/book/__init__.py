"""Books into audiobooks, Qt-free: importers (EPUB 2/3, Markdown, HTML, plain text) into one
Book model, its script for the renderer, and the M4B writer (app.core.book.m4b)."""

from app.core.book.model import (  # noqa: F401
    KINDS,
    Book,
    BookError,
    Chapter,
    DamagedBookError,
    DrmProtectedError,
    NoSpineError,
    NoTextError,
    UnsupportedBookError,
)
from app.core.book.read import BOOK_EXTENSIONS, import_book  # noqa: F401
