"""A book as the importers read it: its metadata, a cover, and chapters of paragraphs.

    book = import_book("alice.epub")             # app.core.book
    book.select("1,3-5")                         # the chapters to read (1-based, as listed)
    for number, chapter in book.included(): ...

Chapters are of four kinds: "body" (the text), "front" (cover, title page, copyright, contents,
dedication, a publisher's note), "back" (colophon, index, licence) and "notes" (footnotes and
endnotes). Only body chapters are included by default; the person reviewing the list may
include any chapter, exclude it, or rename it. `notes` holds what the importer did on its
own (an empty chapter skipped, a guess about the encoding), for the person to read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

KINDS = ("body", "front", "back", "notes")
# Soft hyphens, zero-width spaces, byte-order marks and control characters (an etext's ^Z).
_INVISIBLE = re.compile("[\u00ad\u200b\ufeff\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class BookError(Exception):
    """A book that cannot be read: one line that names the file and what is wrong."""


class DrmProtectedError(BookError):
    """The content documents are encrypted (Adobe ADEPT, Apple FairPlay, Readium LCP...)."""


class DamagedBookError(BookError):
    """Not a readable book: a broken zip archive, or a package document that is not XML."""


class NoSpineError(BookError):
    """An EPUB whose package document lists no reading order (no spine, or an empty one)."""


class NoTextError(BookError):
    """Nothing to read: no chapter holds any text."""


class UnsupportedBookError(BookError):
    """A file type no importer reads."""


@dataclass
class Chapter:
    title: str
    paragraphs: list[str]
    kind: str = "body"
    included: bool | None = None     # None: by kind (body chapters are included)
    language: str | None = None      # a BCP 47 tag ("en-GB"), when the book says
    source: str = ""                 # where it came from (a file in the EPUB, a line)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"a chapter's kind is one of {', '.join(KINDS)}; got {self.kind!r}")
        if self.included is None:
            self.included = self.kind == "body"

    @property
    def chars(self) -> int:
        return sum(len(p) for p in self.paragraphs)

    @property
    def words(self) -> int:
        return sum(len(p.split()) for p in self.paragraphs)


@dataclass
class Book:
    title: str
    chapters: list[Chapter]
    author: str = ""
    language: str | None = None      # BCP 47, from the book's metadata
    year: str | None = None
    cover: bytes | None = None
    cover_mime: str | None = None    # "image/jpeg", "image/png", ...
    format: str = ""                 # "epub3", "epub2", "markdown", "html", "text"
    source: str = ""                 # the file it was read from
    notes: list[str] = field(default_factory=list)

    def included(self) -> list[tuple[int, Chapter]]:
        """(number, chapter) of the chapters to read; numbers are 1-based over all chapters."""
        return [(i + 1, c) for i, c in enumerate(self.chapters) if c.included]

    def select(self, spec: str) -> None:
        """Include exactly the chapters of `spec` ("1,3-5", "all", "body"), numbered as listed."""
        wanted = parse_selection(spec, len(self.chapters), self.chapters)
        for i, c in enumerate(self.chapters):
            c.included = i + 1 in wanted

    def rename(self, number: int, title: str) -> None:
        if not 1 <= number <= len(self.chapters):
            raise BookError(f"there is no chapter {number}: the book has {len(self.chapters)}")
        title = " ".join(title.split())
        if not title:
            raise BookError(f"chapter {number} needs a title")
        self.chapters[number - 1].title = title

    def chapter_language(self, chapter: Chapter) -> str | None:
        return chapter.language or self.language


def parse_selection(spec: str, n: int, chapters: list[Chapter] | None = None) -> set[int]:
    """Chapter numbers (1-based) of "1,3-5", "all", or a kind ("body", "front", ...)."""
    out: set[int] = set()
    for raw in spec.split(","):
        part = raw.strip().lower()
        if not part:
            continue
        if part == "all":
            out.update(range(1, n + 1))
            continue
        if part in KINDS and chapters is not None:
            out.update(i + 1 for i, c in enumerate(chapters) if c.kind == part)
            continue
        m = re.fullmatch(r"(\d+)\s*(?:-\s*(\d*))?", part)
        if not m:
            raise BookError(f"chapters are given as numbers and ranges (1,3-5), 'all' or a kind "
                            f"({', '.join(KINDS)}); got {raw.strip()!r}")
        a = int(m.group(1))
        b = a if m.group(2) is None and "-" not in part else int(m.group(2) or n)
        if not (1 <= a <= b <= n):
            raise BookError(f"chapter range {raw.strip()!r} is outside 1-{n} (the book has {n} chapters)")
        out.update(range(a, b + 1))
    if not out:
        raise BookError(f"no chapter selected by {spec!r}")
    return out


def clean_paragraph(text: str) -> str:
    """Whitespace runs (line breaks, non-breaking spaces) as one space, invisible characters
    (soft hyphens, zero-width spaces, control characters) removed, the ends trimmed."""
    text = _INVISIBLE.sub("", text)
    return " ".join(text.split())


def build_chapter(title: str, paragraphs: list[str], kind: str, *, language: str | None, source: str,
                  notes: list[str]) -> Chapter | None:
    """A chapter of the non-empty paragraphs; None (and a note) when nothing is left to read.
    A first paragraph that only repeats the title is dropped: the title is read once."""
    paras = [p for p in (clean_paragraph(p) for p in paragraphs) if p]
    title = clean_paragraph(title)
    if paras and title and _same_words(paras[0], title):
        if len(paras[0]) > len(title):      # the heading says more ("Chapter I. Down the Rabbit-Hole")
            title = paras[0]
        paras = paras[1:]
    if not any(re.search(r"\w", p) for p in paras):
        if kind == "body":
            notes.append(f"skipped the empty chapter {title or source!r} ({source})")
        return None
    return Chapter(title or paras[0][:60], paras, kind, language=language, source=source)


def _same_words(heading: str, title: str) -> bool:
    """Does the paragraph `heading` only repeat the chapter's title (or its start)?"""
    wh, wt = re.findall(r"\w+", heading.casefold()), re.findall(r"\w+", title.casefold())
    return bool(wh) and len(wh) <= 24 and (wh == wt[: len(wh)] or wt == wh[: len(wt)])
