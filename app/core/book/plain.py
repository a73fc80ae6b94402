"""A plain-text book -> a Book.

Paragraphs are blank-line blocks (hard-wrapped lines joined); inside a block whose lines are
flush left, a line indented by two or more spaces starts a new paragraph (verse paragraphs
printed without blank lines). Chapters start at heading lines: "CHAPTER I", "Chapter 1",
"Book XII", "Part Two", "Letter 4", "Stave III" (the word, a number or Roman numeral or number
word, then an optional title), with a short title block right after ("Down the Rabbit-Hole")
joined to it; failing those, at short all-caps lines when the text has at least two; failing
those, the text is one chapter. Text before the first heading is front matter when short (a
title page), and Project Gutenberg's header and licence (outside its "*** START OF" / "*** END
OF" lines) are front and back matter. A "Title:", "Author:", "Language:" or "Release Date:"
line gives the metadata, else the first lines of the title page.
"""

from __future__ import annotations

import os
import re

from app.core.book.matter import kind_of_title
from app.core.book.model import Book, BookError, NoTextError, build_chapter, clean_paragraph

MAX_TEXT_BYTES = 256 * 2**20
TITLE_PAGE_CHARS = 1000
_NUMBER = (r"(?:\d{1,4}|[IVXLCDM]{1,8}|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|"
           r"thirteen|fourteen|fifteen|sixteen|seventeen|eighteen|nineteen|twenty[\w-]*|thirty[\w-]*|first|"
           r"second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last)")
_HEADING = re.compile(rf"^(?:chapter|book|part|canto|letter|stave|section|act|volume|fit|chap\.)\s+{_NUMBER}\b"
                      r"[.:\-—–]?\s*(?P<rest>.{0,80})$", re.I)
_CAPS = re.compile(r"^[^a-z]*[A-Z][^a-z]*$")
_PG_START = re.compile(r"^\*{3}\s*START OF (THE|THIS) PROJECT GUTENBERG", re.I | re.M)
_PG_END = re.compile(r"^\*{3}\s*END OF (THE|THIS) PROJECT GUTENBERG", re.I | re.M)
_META = re.compile(r"^(?P<k>Title|Author|Language|Release Date|Original publication):\s*(?P<v>.+)$", re.I | re.M)
_LANGUAGES = {"english": "en", "french": "fr", "german": "de", "spanish": "es", "italian": "it", "dutch": "nl",
              "portuguese": "pt", "finnish": "fi", "swedish": "sv", "danish": "da", "norwegian": "no",
              "polish": "pl", "russian": "ru", "greek": "el", "chinese": "zh", "japanese": "ja", "hebrew": "he",
              "arabic": "ar", "turkish": "tr", "korean": "ko", "hindi": "hi"}


def read_book_file(path: str, limit: int = MAX_TEXT_BYTES) -> bytes:
    """The bytes of a one-file book, at most `limit` of them; BookError otherwise."""
    try:
        if os.path.getsize(path) > limit:
            raise BookError(f"{os.path.basename(path)} is more than {limit // 2**20} MB: too large to read as one book")
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise BookError(f"cannot read {path}: {e.strerror or e}") from None


def read_text_file(path: str) -> tuple[str, list[str]]:
    """The file's text (UTF-8, with or without a BOM; else Windows-1252, said in a note) with
    Unix line ends, and the notes."""
    name = os.path.basename(path)
    data = read_book_file(path)
    notes = []
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        text = data.decode("cp1252", errors="replace")
        notes.append(f"{name} is not UTF-8: read as Windows-1252")
    if "\x00" in text[:4096]:
        raise BookError(f"{name} is not a text file")
    return text.replace("\r\n", "\n").replace("\r", "\n"), notes


def paragraphs_of(text: str) -> list[tuple[str, int]]:
    """(paragraph, line number) of a text, hard-wrapped lines joined."""
    out: list[tuple[str, int]] = []
    line_no = 1
    for block in re.split(r"(\n[ \t]*\n)", text):
        if block.startswith("\n") and not block.strip():
            line_no += block.count("\n")
            continue
        lines = block.split("\n")
        indented = [ln.startswith("  ") for ln in lines if ln.strip()]
        split_indented = 0 < sum(indented) < len(indented) and len(indented) > 2
        para: list[str] = []
        start = line_no
        for k, ln in enumerate(lines):
            if split_indented and ln.startswith("  ") and para:
                out.append((" ".join(para), start))
                para, start = [], line_no + k
            if ln.strip():
                para.append(ln.strip())
        if para:
            out.append((" ".join(para), start))
        line_no += block.count("\n")
    return out


def _is_heading(p: str) -> bool:
    return len(p) <= 100 and _HEADING.match(p) is not None


def _is_caps_heading(p: str) -> bool:
    return 3 <= len(p) <= 60 and _CAPS.match(p) is not None and re.search(r"[A-Z]{2}", p) is not None \
        and not p.rstrip().endswith((",", ";"))


def _is_subtitle(p: str) -> bool:
    """A chapter's title printed under its number: short, no sentence end but ? or !, and in
    title case (most of its longer words capitalised)."""
    long_words = [w for w in re.findall(r"[^\W\d_][\w'’-]*", p) if len(w) > 3]
    capitalised = sum(w[0].isupper() for w in long_words)
    return (len(p) <= 70 and not re.search(r"[.,;:]['’\"”]?$", p) and p[:1].isupper() and not _is_heading(p)
            and (not long_words or capitalised * 2 >= len(long_words)))


def import_text(path: str) -> Book:
    name = os.path.basename(path)
    text, notes = read_text_file(path)
    front_text, back_text = "", ""
    if (s := _PG_START.search(text)) and (e := _PG_END.search(text, s.end())):
        front_text, back_text = text[: s.start()], text[e.start():]
        text = text[text.index("\n", s.end()) + 1 if "\n" in text[s.end():] else s.end(): e.start()]
    meta = {m.group("k").lower(): m.group("v").strip() for m in _META.finditer(front_text or text[:5000])}
    paras = paragraphs_of(text)
    heads = [i for i, (p, _) in enumerate(paras) if _is_heading(p)]
    if not heads:
        caps = [i for i, (p, _) in enumerate(paras) if _is_caps_heading(p)]
        heads = caps if len(caps) >= 2 else []
    lang = meta.get("language", "")
    book = Book(meta.get("title", ""), [], author=meta.get("author", ""),
                language=_LANGUAGES.get(lang.lower(), lang or None) if lang else None,
                year=(re.search(r"\b(\d{4})\b", meta.get("original publication", "") or meta.get("release date", ""))
                      or [None, None])[1] if meta else None,
                format="text", source=path, notes=notes)
    if front_text.strip():
        _add(book, "Project Gutenberg header", [p for p, _ in paragraphs_of(front_text)], "front", f"{name}:1")
    opening = paras[: heads[0]] if heads else paras
    if heads and opening:
        body = [p for p, _ in opening]
        publisher = any("project gutenberg" in b.lower() or "etext" in b.lower() for b in body[:3])
        kind = "front" if publisher or sum(map(len, body)) <= TITLE_PAGE_CHARS else "body"
        title = "Project Gutenberg's note" if publisher else "Title page" if kind == "front" else body[0][:60]
        _add(book, title, body, kind, f"{name}:{opening[0][1]}")
        if kind == "front" and not publisher:
            _title_page(book, body)
    elif not heads:
        _add(book, book.title or os.path.splitext(name)[0], [p for p, _ in paras], "body", f"{name}:1")
    for k, i in enumerate(heads):
        end = heads[k + 1] if k + 1 < len(heads) else len(paras)
        title, first = _tidy_title(paras[i][0]), i + 1
        numbered = _HEADING.match(paras[i][0])
        if numbered and not numbered.group("rest") and first < end and _is_subtitle(paras[first][0]):
            title, first = f"{title}. {paras[first][0]}", first + 1
        _add(book, title, [p for p, _ in paras[first:end]], kind_of_title(title) or "body", f"{name}:{paras[i][1]}")
    if back_text.strip():
        _add(book, "Project Gutenberg licence", [p for p, _ in paragraphs_of(back_text)], "back", f"{name} (end)")
    if not book.title:
        book.title = os.path.splitext(name)[0]
    if not any(c.paragraphs for c in book.chapters):
        raise NoTextError(f"{name} holds no text to read")
    return book


def _add(book: Book, title: str, paragraphs: list[str], kind: str, source: str) -> None:
    ch = build_chapter(title, paragraphs, kind, language=book.language, source=source, notes=book.notes)
    if ch is not None:
        book.chapters.append(ch)


def _tidy_title(title: str) -> str:
    """"CHAPTER I" -> "Chapter I" (a shouted heading in title case; Roman numerals kept)."""
    title = clean_paragraph(title)
    if title.isupper():
        small = {"a", "an", "and", "at", "by", "for", "in", "of", "on", "or", "the", "to"}
        words = title.split()
        title = " ".join(w if re.fullmatch(r"[IVXLCDM]+\.?", w) else
                         w.lower() if k and w.lower() in small else w.capitalize() for k, w in enumerate(words))
    return title


def _title_page(book: Book, lines: list[str]) -> None:
    """Title and author from a short title page: its first line, and a "by X" or name line."""
    if not book.title and lines:
        book.title = _tidy_title(lines[0]) if lines[0].isupper() else lines[0]
    if not book.author:
        for ln in lines[1:4]:
            m = re.match(r"^(?:by\s+)?(?P<name>[A-Z][\w.'-]+(?:\s+[A-Z][\w.'-]+){1,3})$", ln)
            if m and not ln.isupper():
                book.author = m.group("name")
                break
