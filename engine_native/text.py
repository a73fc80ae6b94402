"""Text -> the pieces T3 speaks one at a time.

Sentences end at . ! ? (with any closing quotes/brackets) followed by a space, a newline,
the end, or an uppercase letter ("Hi.There" is two sentences), except a period after a
common abbreviation (Mr., Dr., etc.). A newline also ends an utterance (titles, lists). A sentence too long for one
T3 pass is cut at clause punctuation, else at spaces, so each piece stays within
`max_chars`. Pieces without a letter or digit (e.g. "..." or "--") are skipped: T3 has
nothing to say for them. Every piece keeps its character span in the input, which is what
the GUI highlights while the piece plays.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SENTENCE_END = re.compile(r"[.!?…]+[\"'”’)\]]*(?=\s|$|[A-Z])")
_CLAUSE_BREAK = re.compile(r"[,;:—–]\s+|\s+-\s+")
_SPEAKABLE = re.compile(r"\w", re.UNICODE)

DEFAULT_MAX_CHARS = 300
# A period after these ends no sentence ("Mr. Smith" is one name, not two utterances).
_ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "no", "mt", "fig"}
_WORD_BEFORE = re.compile(r"([\w.]+)$")


def _is_abbreviation(text: str, end_of_word: int, terminator: str) -> bool:
    if terminator != ".":
        return False
    m = _WORD_BEFORE.search(text, 0, end_of_word)
    return bool(m) and m.group(1).lower().rstrip(".") in _ABBREVIATIONS


@dataclass(frozen=True)
class Sentence:
    text: str
    start: int   # character span in the input text
    end: int


def _trimmed(text: str, start: int, end: int) -> Sentence | None:
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    if start == end or not _SPEAKABLE.search(text, start, end):
        return None
    return Sentence(text[start:end], start, end)


def _cut_long(text: str, s: Sentence, max_chars: int) -> list[Sentence]:
    """Cut one over-long sentence at the last clause break (else space) before max_chars."""
    out, start = [], s.start
    while s.end - start > max_chars:
        limit = start + max_chars
        cut = None
        for m in _CLAUSE_BREAK.finditer(text, start, limit):
            cut = m.end()
        if cut is None or cut - start < max_chars // 3:
            space = text.rfind(" ", start + 1, limit)
            cut = space + 1 if space > start else limit
        piece = _trimmed(text, start, cut)
        if piece:
            out.append(piece)
        start = cut
    piece = _trimmed(text, start, s.end)
    if piece:
        out.append(piece)
    return out


def split_text(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> list[Sentence]:
    if max_chars < 20:
        raise ValueError("max_chars must be at least 20")
    pieces, start = [], 0
    for m in _SENTENCE_END.finditer(text):
        if _is_abbreviation(text, m.start(), m.group().strip()):
            continue
        pieces.append((start, m.end()))
        start = m.end()
    pieces.append((start, len(text)))
    out: list[Sentence] = []
    for a, b in pieces:
        # A newline also ends an utterance (lists, dialogue, one line per sentence).
        for line in re.finditer(r"[^\n]+", text[a:b]):
            s = _trimmed(text, a + line.start(), a + line.end())
            if s:
                out.extend(_cut_long(text, s, max_chars) if len(s.text) > max_chars else [s])
    return out
