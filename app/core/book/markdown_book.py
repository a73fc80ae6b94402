"""A Markdown file -> a Book, parsed by markdown-it-py (CommonMark): chapters at its headings
(app.core.book.outline); images, code blocks and raw HTML tags are not read; footnote
references (`[^1]`) are left out and their definitions kept as notes; pandoc's line blocks (`| verse`)
are read as lines. A YAML front-matter
block's simple `title`, `author`, `date` and `lang` keys (and pandoc's `creator` list) give
the metadata."""

from __future__ import annotations

import os
import re

from markdown_it import MarkdownIt

from app.core.book.html_text import Block
from app.core.book.model import Book, NoTextError
from app.core.book.outline import add_chapters, book_title, chapter_level
from app.core.book.plain import read_text_file

_FRONT_MATTER = re.compile(r"\A---[ \t]*\n(?P<body>.*?)\n(?:---|\.\.\.)[ \t]*\n", re.S)
_FOOTNOTE_DEF = re.compile(r"(?m)^\[\^[^\]\s]+\]:[ \t]*(?P<text>.*(?:\n(?:[ \t]+.*|))*)")
_FOOTNOTE_REF = re.compile(r"\[\^[^\]\s]+\]")
_TAG = re.compile(r"<[^<>]*>")
# A pandoc line block (verse: "| line"), not a table row (which ends in "|").
_LINE_BLOCK = re.compile(r"(?m)^\|[ \t](?=.*[^|\s][ \t]*$)")


def front_matter(text: str) -> tuple[dict[str, str], str]:
    """The simple scalar keys of a leading `---` block, and the text after it."""
    m = _FRONT_MATTER.match(text)
    if not m:
        return {}, text
    out: dict[str, str] = {}
    key = None
    for line in m.group("body").splitlines():
        kv = re.match(r"^(?P<k>[A-Za-z][\w-]*):\s*(?P<v>.*)$", line)
        if kv:
            key = kv.group("k").lower()
            v = kv.group("v").strip().strip("'\"")
            if v:
                out.setdefault(key, v)
        elif key == "creator" and (t := re.match(r"^\s*(?:-\s*)?text:\s*(?P<v>.+)$", line)):
            out.setdefault("author", t.group("v").strip().strip("'\""))
        elif key in ("author", "creator") and (t := re.match(r"^\s*-\s*(?P<v>[^:]+)$", line)):
            out.setdefault("author", t.group("v").strip().strip("'\""))
    return out, text[m.end():]


def _inline_text(token) -> str:
    out = []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            out.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            out.append(" ")
        elif child.type == "html_inline":
            continue
        elif child.type == "image":
            continue
    return _FOOTNOTE_REF.sub("", "".join(out))


def blocks_of(text: str) -> tuple[list[Block], list[str]]:
    notes = [" ".join(m.group("text").split()) for m in _FOOTNOTE_DEF.finditer(text)]
    text = _LINE_BLOCK.sub("", _FOOTNOTE_DEF.sub("", text))
    tokens = MarkdownIt("commonmark").parse(text)
    blocks: list[Block] = []
    level = 0
    for tok in tokens:
        if tok.type == "heading_open":
            level = int(tok.tag[1])
        elif tok.type == "heading_close":
            level = 0
        elif tok.type == "inline":
            t = _inline_text(tok)
            if t.strip():
                blocks.append(Block(" ".join(t.split()), level))
        elif tok.type == "html_block":
            t = " ".join(_TAG.sub(" ", tok.content).split())
            if t:
                blocks.append(Block(t))
    return blocks, [n for n in notes if n]


def import_markdown(path: str) -> Book:
    name = os.path.basename(path)
    text, notes = read_text_file(path)
    meta, body = front_matter(text)
    blocks, footnotes = blocks_of(body)
    level = chapter_level(blocks)
    year = re.search(r"\b(\d{4})\b", meta.get("date", ""))
    book = Book(meta.get("title") or book_title(blocks, level) or os.path.splitext(name)[0], [],
                author=meta.get("author", ""), language=meta.get("lang") or meta.get("language"),
                year=year.group(1) if year else None, format="markdown", source=path, notes=notes)
    add_chapters(book, blocks, source=name, notes=footnotes)
    if not book.chapters:
        raise NoTextError(f"{name} holds no text to read")
    return book
