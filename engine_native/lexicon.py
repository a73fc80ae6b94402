"""A pronunciation dictionary: words or phrases the model says wrong, and how to spell them
so that it says them right ("Nguyen" -> "Win", "SQL" -> "sequel").

Rules:
- Whole words only: an entry matches where it is neither preceded nor followed by a letter,
  digit or underscore ("cat" does not touch "catalog"). A phrase ("New York") matches with
  any run of whitespace between its words.
- Case-insensitive (Unicode case folding): "nguyen", "Nguyen" and "NGUYEN" all match the
  entry "Nguyen". The respelling is used exactly as written.
- The longest match wins at a position (a phrase before its first word); the text is
  scanned once, left to right, so a respelling is never replaced again.
- Lists merge: a later list (the project's) overrides an earlier one (the global list) for
  the same word (compared case-insensitively).

File formats (chosen by extension):
- JSON (`.json`, what the app writes):
      {"format": "chatterbox-lexicon", "version": 1,
       "entries": [{"word": "Nguyen", "say": "Win"}, {"word": "SQL", "say": "sequel"}]}
- TSV (any other extension): one entry a line, `word<TAB>respelling`; blank lines and
  lines starting with `#` are ignored.

`Lexicon.apply(text)` returns the spoken text and a `SpanMap` that maps character spans
of the spoken text back to the original, so the GUI keeps highlighting what the user wrote.
"""

from __future__ import annotations

import bisect
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from engine_native.errors import EngineError

FORMAT = "chatterbox-lexicon"
VERSION = 1


class LexiconError(EngineError):
    """A lexicon file cannot be read or holds a bad entry; the message names the file and line."""


def _key(word: str) -> str:
    return " ".join(word.split()).casefold()


@dataclass
class SpanMap:
    """Offsets of a rewritten text -> offsets of the original. `edits` are (new_start,
    new_end, old_start, old_end) of each replaced region, in order."""
    edits: list[tuple[int, int, int, int]] = field(default_factory=list)

    def to_original(self, pos: int, *, end: bool = False) -> int:
        """An offset in the rewritten text as an offset in the original. An offset inside a
        replacement maps to the replaced word's start (or its end, for `end=True`)."""
        i = bisect.bisect_right([e[0] for e in self.edits], pos) - 1
        if i < 0:
            return pos
        ns, ne, os_, oe = self.edits[i]
        if pos >= ne:
            return oe + (pos - ne)
        if pos == ns:
            return os_
        return oe if end else os_

    def span(self, start: int, end: int) -> tuple[int, int]:
        return self.to_original(start), self.to_original(end, end=True)


@dataclass
class Lexicon:
    entries: dict[str, tuple[str, str]] = field(default_factory=dict)   # key -> (word as written, respelling)
    _pattern: re.Pattern | None = field(default=None, repr=False, compare=False)

    # ------------------------------------------------------------------ building
    def add(self, word: str, say: str) -> None:
        word = " ".join(str(word).split())
        if not word:
            raise LexiconError("a lexicon entry needs a word")
        if not isinstance(say, str):
            raise LexiconError(f"the respelling of {word!r} must be text")
        self.entries[_key(word)] = (word, say)
        self._pattern = None

    def remove(self, word: str) -> None:
        self.entries.pop(_key(word), None)
        self._pattern = None

    def merged(self, other: "Lexicon | None") -> "Lexicon":
        """This list, overridden by `other` (e.g. global.merged(project))."""
        out = Lexicon(dict(self.entries))
        if other is not None:
            out.entries.update(other.entries)
        return out

    def __len__(self) -> int:
        return len(self.entries)

    def items(self) -> list[tuple[str, str]]:
        return [v for v in self.entries.values()]

    # ------------------------------------------------------------------ files
    @classmethod
    def load(cls, path: str | os.PathLike) -> "Lexicon":
        path = Path(path)
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise LexiconError(f"lexicon file not found: {path}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise LexiconError(f"cannot read lexicon {path}: {e}") from None
        lex = cls()
        if path.suffix.lower() == ".json":
            try:
                data = json.loads(raw)
            except json.JSONDecodeError as e:
                raise LexiconError(f"{path}: not valid JSON ({e})") from None
            entries = data.get("entries") if isinstance(data, dict) else data
            if not isinstance(entries, list):
                raise LexiconError(f"{path}: expected {{\"format\": \"{FORMAT}\", \"entries\": [...]}}")
            for n, e in enumerate(entries, 1):
                if not isinstance(e, dict) or not isinstance(e.get("word"), str) or not isinstance(e.get("say"), str):
                    raise LexiconError(f"{path}: entry {n} must be {{\"word\": ..., \"say\": ...}}")
                lex._add_checked(e["word"], e["say"], f"{path}: entry {n}")
        else:
            for n, line in enumerate(raw.splitlines(), 1):
                if not line.strip() or line.lstrip().startswith("#"):
                    continue
                if "\t" not in line:
                    raise LexiconError(f"{path}:{n}: expected WORD<TAB>RESPELLING")
                word, say = line.split("\t", 1)
                lex._add_checked(word, say.strip(), f"{path}:{n}")
        return lex

    def _add_checked(self, word: str, say: str, where: str) -> None:
        if not word.strip():
            raise LexiconError(f"{where}: the word is empty")
        self.add(word, say)

    def save(self, path: str | os.PathLike) -> Path:
        """Atomically, as JSON (or TSV for a non-.json name)."""
        from engine_native.files import atomic_write

        path = Path(path)
        if path.suffix.lower() == ".json":
            data = {"format": FORMAT, "version": VERSION,
                    "entries": [{"word": w, "say": s} for w, s in self.items()]}
            body = json.dumps(data, ensure_ascii=False, indent=2) + "\n"
        else:
            body = "# word<TAB>respelling (chatterbox-studio lexicon)\n" + "".join(
                f"{w}\t{s}\n" for w, s in self.items())

        def write(tmp):
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(body)

        atomic_write(path, write)
        return path

    # ------------------------------------------------------------------ use
    def _regex(self) -> re.Pattern | None:
        if self._pattern is None and self.entries:
            words = sorted((w for w, _ in self.entries.values()), key=lambda w: (-len(w), w))
            alts = "|".join(r"\s+".join(re.escape(part) for part in w.split()) for w in words)
            self._pattern = re.compile(rf"(?<!\w)(?:{alts})(?!\w)", re.IGNORECASE | re.UNICODE)
        return self._pattern

    def apply(self, text: str) -> tuple[str, SpanMap]:
        """The text with every entry replaced, and the map back to the original's offsets."""
        rx = self._regex()
        spans = SpanMap()
        if rx is None:
            return text, spans
        out, pos, shift = [], 0, 0
        for m in rx.finditer(text):
            entry = self.entries.get(_key(m.group(0)))
            if entry is None:   # a case-folding corner (e.g. "ß" vs "ss"): leave it
                continue
            say = entry[1]
            out += [text[pos:m.start()], say]
            ns = m.start() + shift
            spans.edits.append((ns, ns + len(say), m.start(), m.end()))
            shift += len(say) - (m.end() - m.start())
            pos = m.end()
        out.append(text[pos:])
        return "".join(out), spans

    def respell(self, text: str) -> str:
        return self.apply(text)[0]


def load_lexicons(*paths) -> Lexicon:
    """Lists merged in order (later ones win); missing optional paths (None) are skipped."""
    lex = Lexicon()
    for p in paths:
        if p is not None:
            lex = lex.merged(Lexicon.load(p))
    return lex
