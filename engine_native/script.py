"""Scripts as people write them: timed pauses, SSML breaks, paragraphs and a cast of speakers.

    items = parse_script(text, speakers={"Alice", "Bob"})      # [Piece | Pause, ...]
    for part in render(engine, items, voices={"Alice": alice, "Bob": bob, None: narrator}, seed=1):
        play(part.samples)

What the parser understands (everything else is text, spoken as written):

- Timed pauses: `[pause 0.5s]`, `[pause 500ms]`, `[pause 2]` (seconds; also `sec`), any case,
  up to `MAX_PAUSE_SECONDS`. They become exact silence (round(seconds x rate) zero samples)
  and never reach the tokenizer. A bare `[pause]` is one of the model's own expression
  tags (engine_native.tags) and stays in the text for T3 to render.
- SSML, for pasted SSML: `<break time="500ms"/>` / `time="1.5s"` is a timed pause;
  `<break strength="..."/>` maps none/x-weak/weak/medium/strong/x-strong to
  0/0.1/0.25/0.5/0.75/1.0 s (a bare `<break/>` is medium); `<p>`/`</p>` are paragraph breaks;
  other SSML tags (`<speak>`, `<s>`, `<prosody>`, `<emphasis>`, ...) are dropped, their text kept.
- Paragraphs: a blank line between two spoken paragraphs is a pause of `paragraph_pause`
  seconds (default `DEFAULT_PARAGRAPH_PAUSE` = 0.75 s). Pauses that meet add up.
- A cast: a line that starts with `Name: ` is spoken by that speaker's voice; the prefix is
  not spoken. It holds for that line only (a line without a prefix is the narrator's: the
  default voice). With `speakers` given, only those names (case-insensitive) are speaker
  prefixes ("Note: ..." stays text); with `speakers=True` any name of one to three
  capitalised words is; with the default `None`, no line has a speaker.

A timed pause inside a sentence cuts it into two pieces. Each speakable piece is one
sentence by the engine's own rule (engine_native.text), keeps its character span in the
input (which the GUI highlights), and has a global index: it is rendered with seed
`seed + index`, exactly as `Engine.stream(text, seed=seed)` seeds its sentences, so a text
without pauses renders to the same samples as one `Engine.stream` call, and adding a pause
adds exactly its silence.
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np

from engine_native.errors import ParameterError
from engine_native.options import derived_seed
from engine_native.text import split_text

DEFAULT_PARAGRAPH_PAUSE = 0.75
MAX_PAUSE_SECONDS = 60.0
# Best-of-N: candidate k of a piece with seed s is rendered with seed s + k * BEST_OF_SEED_STRIDE
# (k = 0 is the ordinary take).
BEST_OF_SEED_STRIDE = 1_000_000_007
_STRENGTH = {"none": 0.0, "x-weak": 0.1, "weak": 0.25, "medium": 0.5, "strong": 0.75, "x-strong": 1.0}

# No two adjacent parts of a pattern may match the same whitespace ("\s*(unit)?\s*", "\s*/?\s*",
# a lazy run before "\s*>"): on a long run of spaces that is quadratic backtracking, seconds
# per line for a pasted text (docs/FUZZING.md). An SSML break's attrs keep its closing "/".
_PAUSE_TAG = r"\[\s*pause\s+(?P<num>\d+(?:\.\d*)?|\.\d+)\s*(?:(?P<unit>ms|s|secs?|seconds?)\s*)?\]"
_BREAK = r"<\s*break\b(?P<attrs>[^<>]*)>(?:\s*<\s*/\s*break\s*>)?"
_PARA_TAG = r"<\s*(?:/\s*)?p\s*>"
_SSML_TAG = (r"<\s*(?:/\s*)?(?:speak|s|prosody|emphasis|voice|say-as|sub|lang|mark|phoneme|audio|w|amazon:[\w-]+)"
             r"\b[^<>]*>|<\?xml[^<>]*\?>")
_MARKER = re.compile(rf"(?P<pause>{_PAUSE_TAG})|(?P<brk>{_BREAK})|(?P<para>{_PARA_TAG})|(?P<tag>{_SSML_TAG})",
                     re.IGNORECASE)
_ATTR = re.compile(r"""(?P<k>[\w:-]+)\s*=\s*(?:"(?P<v1>[^"]*)"|'(?P<v2>[^']*)')""")
_TIME = re.compile(r"^\s*(?P<num>\d+(?:\.\d*)?|\.\d+)\s*(?:(?P<unit>ms|s)\s*)?$", re.IGNORECASE)
_NAME = r"[A-Z][\w'.-]*(?: [A-Z][\w'.-]*){0,2}"
_PREFIX = re.compile(r"[ \t]*(?P<name>[^\W\d_][\w'. -]{0,40}?)[ \t]*:[ \t]+")
_ANY_NAME = re.compile(rf"^{_NAME}$")
_HEADING = re.compile(r"[ \t]*#{1,6}[ \t]+")


@dataclass(frozen=True)
class Pause:
    seconds: float
    start: int          # the tag's (or the blank line's) span in the input
    end: int
    kind: str           # "tag", "ssml", "paragraph"


@dataclass(frozen=True)
class Piece:
    text: str           # what is spoken (tags dropped, whitespace runs collapsed)
    start: int          # its span in the input
    end: int
    speaker: str | None  # None: the narrator (the default voice)
    index: int          # global piece index: seed offset


def _seconds(num: str, unit: str | None) -> float:
    v = float(num)
    return v / 1000.0 if unit and unit.lower() == "ms" else v


def _checked(seconds: float, what: str) -> float:
    if not (0.0 <= seconds <= MAX_PAUSE_SECONDS):
        raise ParameterError(f"{what}: a pause must be between 0 and {MAX_PAUSE_SECONDS:g} s; got {seconds:g} s")
    return seconds


def _break_seconds(attrs: str, where: str) -> float:
    a = {m.group("k").lower(): m.group("v1") if m.group("v1") is not None else m.group("v2")
         for m in _ATTR.finditer(attrs)}
    if "time" in a:
        m = _TIME.match(a["time"])
        if not m:
            raise ParameterError(f"{where}: <break time=\"{a['time']}\"/> is not a time (e.g. 500ms or 1.5s)")
        return _checked(_seconds(m.group("num"), m.group("unit") or "s"), where)
    strength = a.get("strength", "medium").lower()
    if strength not in _STRENGTH:
        raise ParameterError(f"{where}: unknown break strength {strength!r} (one of {', '.join(_STRENGTH)})")
    return _STRENGTH[strength]


def _where(text: str, pos: int) -> str:
    return f"line {text.count(chr(10), 0, pos) + 1}"


def speaker_names(text: str) -> list[str]:
    """Names of one to three capitalised words used as `Name: ` line prefixes, in order of
    first appearance (what the app shows as the script's cast)."""
    out: list[str] = []
    for m in re.finditer(rf"(?m)^[ \t]*(?P<name>{_NAME})[ \t]*:[ \t]+\S", text):
        if m.group("name") not in out:
            out.append(m.group("name"))
    return out


def speaker_at(text: str, pos: int) -> str | None:
    """The `Name: ` speaker of the line holding character `pos`, or None."""
    a = text.rfind("\n", 0, max(0, pos)) + 1
    m = re.match(rf"[ \t]*(?P<name>{_NAME})[ \t]*:[ \t]+\S", text[a:])
    return m.group("name") if m else None


def speaker_label(voice_name: str) -> str:
    """A `Name: ` prefix for a voice's name: its first three words, capitalised, in the
    characters a speaker name may hold ("my voice #2" -> "My Voice 2"); "Voice" if none is left."""
    ascii_name = unicodedata.normalize("NFKD", voice_name).encode("ascii", "ignore").decode()  # "Été" -> "Ete"
    words = ["".join(ch for ch in w if ch.isalnum() or ch in "'.-") for w in ascii_name.split()]
    words = [w for w in words if w and w[0].isalnum()]
    words = [w[0].upper() + w[1:] if w[0].isalpha() else "V" + w for w in words][:3]
    label = " ".join(words)
    return label if label and _ANY_NAME.match(label) else "Voice"


def assign_speaker(lines: str, name: str) -> str:
    """Give every non-blank line of `lines` the prefix `name: `, replacing a speaker prefix it
    already has (how a selection is assigned to a voice in the app)."""
    if not _ANY_NAME.match(name):
        raise ParameterError(f"{name!r} is not a speaker name (one to three capitalised words)")
    own = re.compile(rf"^[ \t]*{_NAME}[ \t]*:[ \t]+")
    out = []
    for line in lines.split("\n"):
        body = own.sub("", line, count=1).strip()
        out.append(f"{name}: {body}" if body else line)
    return "\n".join(out)


def _speaker_matcher(speakers):
    if speakers is None or speakers is False:
        return None
    if speakers is True:
        return lambda name: name if _ANY_NAME.match(name) else None
    known = {" ".join(s.split()).casefold(): s for s in speakers}
    return lambda name: known.get(" ".join(name.split()).casefold())


def parse_script(text: str, *, paragraph_pause: float = DEFAULT_PARAGRAPH_PAUSE,
                 speakers: Iterable[str] | bool | None = None) -> list[Piece | Pause]:
    """The text as pieces to speak and pauses, in order (see the module's rules)."""
    if not isinstance(text, str):
        raise ParameterError(f"text must be a string; got {type(text).__name__}")
    paragraph_pause = _checked(float(paragraph_pause), "paragraph_pause")
    match_speaker = _speaker_matcher(speakers)
    items: list[Piece | Pause] = []
    index = 0
    spoken = False            # anything spoken yet (no paragraph pause before the first words)
    para_at: int | None = None  # a paragraph break is pending (its position)

    def flush_para(pos: int) -> None:
        nonlocal para_at
        if para_at is not None and spoken and paragraph_pause > 0:
            items.append(Pause(paragraph_pause, para_at, pos, "paragraph"))
        para_at = None

    def add_run(clean: list[str], base: int, speaker: str | None) -> None:
        nonlocal index, spoken
        run = "".join(clean)
        for s in split_text(run):
            flush_para(base + s.start)
            start, end = base + s.start, base + s.end
            spoken = " ".join(_MARKER.sub("", text[start:end]).split())  # tags dropped, not blanked
            items.append(Piece(spoken, start, end, speaker, index))
            index += 1
            spoken = True

    pos = 0
    n = len(text)
    while pos <= n:
        nl = text.find("\n", pos)
        end = n if nl < 0 else nl
        line_start = pos
        speaker = None
        if match_speaker is not None:
            m = _PREFIX.match(text, pos, end)
            if m and (name := match_speaker(m.group("name"))):
                speaker, pos = name, m.end()
        if speaker is None and (h := _HEADING.match(text, pos, end)):
            pos = h.end()        # a Markdown heading: its text is spoken, the hashes are not
        if not text[line_start:end].strip():
            if spoken and para_at is None:
                para_at = line_start
        else:
            clean: list[str] = []   # the line with markers blanked (same length: spans stay valid)
            run_base = pos
            for m in _MARKER.finditer(text, pos, end):
                clean.append(text[pos:m.start()])
                if m.group("tag"):
                    clean.append(" " * (m.end() - m.start()))
                    pos = m.end()
                    continue
                add_run(clean, run_base, speaker)
                clean, run_base = [], m.end()
                if m.group("para"):
                    if spoken and para_at is None:
                        para_at = m.start()
                else:
                    where = _where(text, m.start())
                    if m.group("pause"):
                        secs, kind = _checked(_seconds(m.group("num"), m.group("unit")), where), "tag"
                    else:
                        secs, kind = _break_seconds(m.group("attrs") or "", where), "ssml"
                    flush_para(m.start())
                    items.append(Pause(secs, m.start(), m.end(), kind))
                pos = m.end()
            clean.append(text[pos:end])
            add_run(clean, run_base, speaker)
        if nl < 0:
            break
        pos = nl + 1
    return items


def strip_timed_pauses(text: str) -> str:
    """The text without timed pause tags and SSML markup (for a caller that sends text
    straight to the engine)."""
    return re.sub(r"[ \t]{2,}", " ", _MARKER.sub(" ", text)).strip() if _MARKER.search(text) else text


def chapters(text: str, by: str = "headings") -> list[tuple[str, int]]:
    """(title, start offset) of each chapter. by="headings": a chapter starts at each
    Markdown heading line (`# Title`; text before the first heading, if any, is a chapter of
    its own); without headings the whole text is one chapter. by="blocks": a chapter per
    blank-line block (its first line is the title)."""
    out: list[tuple[str, int]] = []
    if by == "headings":
        for m in re.finditer(r"(?m)^[ \t]*#{1,6}[ \t]+(?P<title>[^ \t\n](?:[^\n]*[^ \t\n])?)[ \t]*$", text):
            out.append((m.group("title"), m.start()))
        if not out or text[:out[0][1]].strip():
            first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
            out.insert(0, (first[:60], 0))
    elif by == "blocks":
        # A line at a time (a regex over runs of blank lines backtracks quadratically).
        pos, after_blank = 0, True
        for line in text.split("\n"):
            if not line.strip():
                after_blank = True
            elif after_blank:
                out.append((line.strip()[:60], pos + len(line) - len(line.lstrip())))
                after_blank = False
            pos += len(line) + 1
    else:
        raise ParameterError(f"chapters are found by 'headings' or 'blocks'; got {by!r}")
    return out or [("", 0)]


def chapter_of(starts: list[int], pos: int) -> int:
    """Index of the chapter (by start offsets, ascending) holding offset `pos`."""
    import bisect

    return max(0, bisect.bisect_right(starts, pos) - 1)


def pieces(items) -> list[Piece]:
    return [i for i in items if isinstance(i, Piece)]


# ------------------------------------------------------------------------------ rendering
@dataclass
class Part:
    """One stretch of rendered audio: a chunk of a piece, or a pause."""
    samples: np.ndarray
    sample_rate: int
    item: Piece | Pause
    final: bool                  # the piece (or pause) is complete with this part
    seed: int | None = None      # the seed of the take used (best-of: the winner's)
    spoken_text: str = ""        # the piece's text after the lexicon
    score: float | None = None   # likeness of the piece (best-of, or when asked)
    candidates: list = field(default_factory=list)   # best-of: [(seed, score, seconds, plausible)]
    cached: bool = False         # served by the cache (not rendered now)


def pause_samples(seconds: float, rate: int) -> np.ndarray:
    return np.zeros(int(round(seconds * rate)), np.float32)


def voice_for(voices: dict | None, speaker: str | None):
    """The voice of a speaker: voices[speaker], else voices[None] (the narrator), else None
    (the model's own)."""
    if not voices:
        return None
    if speaker is not None and speaker in voices:
        return voices[speaker]
    return voices.get(None)


def spoken_text(piece: Piece, tags, lexicon=None) -> str:
    """What the engine is given for a piece: its expression tags in the model's spelling
    (`tags`: the engine's expression_tags), then the lexicon's respellings."""
    from engine_native.tags import canonical_tags

    spoken = canonical_tags(piece.text, tags)
    return lexicon.respell(spoken) if lexicon is not None else spoken


def render(engine, items, *, voices: dict | None = None, seed: int = 0, lexicon=None, best_of: int = 1,
           score: bool = False, options: dict | None = None, stream_options: dict | None = None,
           cache=None, cancel=None) -> Iterator[Part]:
    """Audio of parsed script items, in order, as Parts.

    Each piece is rendered with `Engine.stream` (so the first audio comes at once) with
    seed `seed + piece.index`; with `best_of` > 1 each piece is rendered `best_of` times
    (seeds see BEST_OF_SEED_STRIDE) and the take with the best likeness among those of a
    plausible length is kept (likeness.best_take), in one Part. `lexicon` (an
    engine_native.lexicon.Lexicon) respells each piece before tokenisation; spans stay
    those of the input. `cache` (optional: `get(key) -> samples | None`, `put(key, samples)`,
    `key(piece_text, voice, seed, options, best_of)`) serves finished pieces and keeps new
    ones. `cancel` (a threading.Event) stops between chunks."""
    from engine_native.likeness import best_take, likeness

    options = dict(options or {})
    stream_options = dict(stream_options or {})
    best_of = int(best_of)
    if best_of < 1:
        raise ParameterError(f"best_of must be at least 1; got {best_of}")
    rate = engine.sample_rate
    tags = engine.expression_tags
    for item in items:
        if cancel is not None and cancel.is_set():
            return
        if isinstance(item, Pause):
            yield Part(pause_samples(item.seconds, rate), rate, item, True)
            continue
        spoken = spoken_text(item, tags, lexicon)
        if not spoken.strip():
            continue
        voice = voice_for(voices, item.speaker)
        s_seed = derived_seed(seed, item.index)
        key = cache.key(spoken, voice, s_seed, options, best_of) if cache is not None else None
        if key is not None:
            hit = cache.get(key)
            if hit is not None:
                yield Part(hit, rate, item, True, s_seed, spoken, cached=True)
                continue
        if best_of > 1:
            take = best_take(engine, spoken, voice, seeds=[derived_seed(s_seed, k * BEST_OF_SEED_STRIDE) for k in range(best_of)],
                             options=options, stream_options=stream_options, cancel=cancel)
            if take is None:
                return
            if cache is not None:
                cache.put(key, take.samples)
            yield Part(take.samples, rate, item, True, take.seed, spoken, take.score, take.candidates)
            continue
        got = []
        it = engine.stream(spoken, voice, seed=s_seed, **stream_options, **options)
        try:
            for chunk in it:
                if cancel is not None and cancel.is_set():
                    return
                got.append(chunk.samples)
                last = chunk.is_last
                part = Part(chunk.samples, rate, item, last, s_seed, spoken)
                if last:
                    whole = np.concatenate(got)
                    if score:
                        part.score = likeness(engine, whole, voice)
                    if cache is not None:
                        cache.put(key, whole)
                yield part
        finally:
            it.close()


def render_all(engine, items, **kw) -> tuple[np.ndarray, list[Part]]:
    """The whole script as one array, and the final Part of every piece and pause."""
    audio, finals = [], []
    for part in render(engine, items, **kw):
        audio.append(part.samples)
        if part.final:
            finals.append(part)
    return (np.concatenate(audio) if audio else np.zeros(0, np.float32)), finals


class Progress:
    """Pieces done / total and an estimate of the time left from the text still to render
    (characters per second of wall time so far); pauses cost nothing."""

    def __init__(self, items):
        self.total_chars = sum(len(p.text) for p in pieces(items)) or 1
        self.total = len(pieces(items))
        self.done = 0
        self.done_chars = 0
        self.audio_s = 0.0
        self.t0 = time.perf_counter()
        self.cached_chars = 0

    def update(self, part: Part) -> None:
        self.audio_s += part.samples.size / part.sample_rate
        if part.final and isinstance(part.item, Piece):
            self.done += 1
            self.done_chars += len(part.item.text)
            if part.cached:
                self.cached_chars += len(part.item.text)

    @property
    def fraction(self) -> float:
        return self.done_chars / self.total_chars

    @property
    def eta_s(self) -> float | None:
        worked = self.done_chars - self.cached_chars
        if worked <= 0:
            return None
        rate = worked / max(time.perf_counter() - self.t0, 1e-6)
        return (self.total_chars - self.done_chars) / rate
