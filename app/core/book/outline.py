"""Headings -> chapters, for books that are one document (Markdown, HTML, plain text).

The chapter level is the highest heading level that occurs more than once; a single heading
above it (the book's title) opens no chapter of its own. Text before the first chapter heading
is a chapter too: front matter when it is short (a title page), else the book's opening.
Deeper headings stay in their chapter as paragraphs.
"""

from __future__ import annotations

from collections import Counter

from app.core.book.html_text import Block
from app.core.book.matter import kind_of
from app.core.book.model import Book, build_chapter

# Text before the first chapter heading up to this long is a title page, not the book's opening.
TITLE_PAGE_CHARS = 1000


def chapter_level(blocks: list[Block]) -> int | None:
    levels = Counter(b.level for b in blocks if b.level)
    if not levels:
        return None
    for level in sorted(levels):
        if levels[level] > 1 or level == max(levels):
            return level
    return None


def book_title(blocks: list[Block], level: int | None) -> str:
    """The text of a single heading above the chapter level, if the book has one."""
    above = [b for b in blocks if b.level and level is not None and b.level < level]
    return above[0].text if len(above) == 1 else ""


def add_chapters(book: Book, blocks: list[Block], *, source: str, notes: list[str] = ()) -> None:
    level = chapter_level(blocks)
    current: tuple[str, list[str], str] | None = None        # title, paragraphs, where

    def close() -> None:
        if current is None:
            return
        title, paras, where = current
        opening = not book.chapters and where.endswith(":1") and title == ""
        kind = kind_of(title=title)
        if not book.chapters and title.casefold() == book.title.casefold() and \
                sum(len(p) for p in paras) <= TITLE_PAGE_CHARS:
            kind = "front"                                   # the title block under the book's own title
        if opening:
            short = sum(len(p) for p in paras) <= TITLE_PAGE_CHARS
            kind, title = ("front", "Title page") if short else ("body", paras[0][:60] if paras else "")
        ch = build_chapter(title, paras, kind, language=book.language, source=where, notes=book.notes)
        if ch is not None:
            book.chapters.append(ch)

    for i, b in enumerate(blocks):
        if level is not None and b.level == level:
            close()
            current = (b.text, [], f"{source}:{i + 1}")
        elif level is not None and b.level and b.level < level:
            continue                                        # the book's title
        else:
            if current is None:
                current = ("", [], f"{source}:1")
            current[1].append(b.text)
    close()
    if notes:
        ch = build_chapter("Notes", list(notes), "notes", language=book.language, source=f"{source} (notes)",
                           notes=book.notes)
        if ch is not None:
            book.chapters.append(ch)
