"""Text -> the pieces T3 speaks one at a time; the one sentence-boundary rule of the project.

A sentence ends at . ! ? … (Hindi's danda । and Arabic's ؟ too; with any closing
quotes/brackets) followed by whitespace, an uppercase letter ("Hi.There" is two sentences)
or the end of the text, except a period after a common abbreviation ("Mr. Smith" is one name, not two utterances). CJK full stops
(。！？) end a sentence with nothing after them. A newline also ends an utterance (titles,
lists). `split_text`, live typing in the app and `live` on the command line all use
`sentence_boundaries`; for text still being typed (`at_end=False`) the end of the text
does not confirm a sentence, since more may follow.

A sentence too long for one T3 pass is cut at clause punctuation, else at spaces, so each
piece stays within `max_chars`. Pieces without a letter or digit ("..." or "--") are
skipped: T3 has nothing to say for them. Every piece keeps its character span in the
input, which is what the GUI highlights while the piece plays.

Everything here is one pass over the text (linear in its length): the abbreviation check
looks back a bounded number of characters, never from the start of the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

DEFAULT_MAX_CHARS = 300
# One call's text limit: about 1,500 pages. Splitting is linear, so this bounds memory and
# time (a few seconds), not a quadratic blow-up.
MAX_TEXT_CHARS = 5_000_000

_BOUNDARY = re.compile(
    r"(?P<cjk>[。！？]+[」』）”’]*)"                          # CJK: needs nothing after it
    r"|(?P<term>[.!?…।؟]+[\"'”’)\]]*)(?=\s|[A-Z]|\Z)"        # Latin, Devanagari, Arabic: then space, capital or end
    r"|(?P<nl>\n)")
_CLAUSE_BREAK = re.compile(r"[,;:—–]\s+|\s+-\s+")
_SPEAKABLE = re.compile(r"\w", re.UNICODE)

# A period after these ends no sentence.
_ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "prof", "st", "jr", "sr", "vs", "etc", "e.g", "i.e", "no", "mt", "fig"}
_ABBREVIATION_LOOKBACK = max(map(len, _ABBREVIATIONS)) + 2


def _is_abbreviation(text: str, period: int) -> bool:
    """Is the word (letters, digits and dots) ending at `period` an abbreviation? Looks back
    at most a few characters: a longer word is no abbreviation."""
    k = period
    floor = max(0, period - _ABBREVIATION_LOOKBACK)
    while k > floor and (text[k - 1].isalnum() or text[k - 1] == "." or text[k - 1] == "_"):
        k -= 1
    if k == floor and k > 0 and (text[k - 1].isalnum() or text[k - 1] == "."):
        return False
    return text[k:period].lower().rstrip(".") in _ABBREVIATIONS


def sentence_boundaries(text: str, start: int = 0, *, at_end: bool = True) -> Iterator[int]:
    """Offsets just after each complete sentence (or newline) in text[start:], in order."""
    n = len(text)
    for m in _BOUNDARY.finditer(text, start):
        if m.group("term") is not None:
            if m.end() == n and not at_end:
                return                      # still being typed: "Hello." may become "Hello..."
            if m.group("term") == "." and _is_abbreviation(text, m.start()):
                continue
        yield m.end()


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


def _cut_long(text: str, s: Sentence, max_chars: int) -> Iterator[Sentence]:
    """Cut one over-long sentence at the last clause break (else space) before max_chars."""
    start = s.start
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
            yield piece
        start = cut
    piece = _trimmed(text, start, s.end)
    if piece:
        yield piece


def iter_sentences(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> Iterator[Sentence]:
    """The speakable pieces of a whole text, lazily, in order."""
    if max_chars < 20:
        raise ValueError("max_chars must be at least 20")
    start = 0
    for end in _with_end(sentence_boundaries(text), len(text)):
        s = _trimmed(text, start, end)
        start = end
        if s:
            yield from (_cut_long(text, s, max_chars) if len(s.text) > max_chars else (s,))


def _with_end(ends: Iterator[int], n: int) -> Iterator[int]:
    last = 0
    for e in ends:
        last = e
        yield e
    if last < n:
        yield n


def split_text(text: str, max_chars: int = DEFAULT_MAX_CHARS) -> list[Sentence]:
    return list(iter_sentences(text, max_chars))


def has_speech(text: str) -> bool:
    """Does the text hold anything T3 can say (a letter or digit)?"""
    return _SPEAKABLE.search(text) is not None


def split_completed(text: str, start: int = 0) -> tuple[list[Sentence], int]:
    """For text being typed: the sentences completed in text[start:] and the new mark
    (everything before it has been handed over)."""
    out, pos = [], start
    for end in sentence_boundaries(text, start, at_end=False):
        s = _trimmed(text, pos, end)
        if s:
            out.append(s)
        pos = end
    return out, pos
