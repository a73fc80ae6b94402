"""A book's included chapters -> one audio file per chapter, resumable.

    result = render_book(engine, book, settings, parts_folder, model_path=..., on_event=print)

Each chapter is the script `# Title`, a blank line, then its paragraphs (engine_native.script:
the title is spoken, a paragraph break is a pause), rendered with engine_native.script.render.
Finished pieces go to the parts folder (app.core.long_render.PartsCache, as `say -f` keeps
them), and every finished chapter to `PARTS/chapters/NNN-KEY.wav` (float32; RF64 so no length
limits it), whole or not at all: a person can play chapter 1 while the rest renders, and a
later run (after a crash, Ctrl-C or a cancel) takes finished chapters as they are and
finished pieces from the cache, so the result equals an uninterrupted render sample for sample.
KEY is a hash of everything the chapter's samples depend on.

Seeds: piece k of the chapter numbered n (1-based over all the book's chapters) is rendered
with seed `seed + n * CHAPTER_SEED_STRIDE + k`, so including, excluding or renaming another
chapter re-renders nothing else. A chapter's text is parsed in groups of paragraphs
(GROUP_CHARS), so a very long chapter never sits in memory as one list of pieces.

A take whose length is implausible for its text (engine_native.likeness.plausible_seconds:
the model ran on or stopped at once) is rendered again with the next best-of seed, up to
`retries` times; the most plausible take is kept, and the summary counts them.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from app.core.book.model import Book, Chapter
from app.core.long_render import PartsCache, _voice_digest
from app.core.provenance import Provenance, voice_names
from engine_native.script import (
    BEST_OF_SEED_STRIDE,
    DEFAULT_PARAGRAPH_PAUSE,
    Pause,
    Piece,
    parse_script,
    render,
)

CHAPTER_SEED_STRIDE = 2**32
GROUP_CHARS = 100_000
DEFAULT_CHAPTER_PAUSE = 2.0     # silence after each chapter, seconds


class Cancelled(Exception):
    """The render was cancelled; finished pieces and chapters stay in the parts folder."""


@dataclass
class BookSettings:
    voices: dict | None = None           # speaker -> Voice; None -> the narrator (engine_native.script.voice_for)
    lexicon: object = None
    seed: int | None = 0                 # None: the one an earlier run of this parts folder drew, else a new one
    options: dict = field(default_factory=dict)          # synthesis options (language set per chapter)
    stream_options: dict = field(default_factory=dict)
    best_of: int = 1
    paragraph_pause: float = DEFAULT_PARAGRAPH_PAUSE
    chapter_pause: float = DEFAULT_CHAPTER_PAUSE
    speakers: list[str] | None = None    # cast names (`Name: ` line prefixes)
    retries: int = 0
    language: Callable[[Chapter], str | None] | None = None   # Multilingual: the chapter's language code


@dataclass
class ChapterAudio:
    number: int            # in the whole book, 1-based
    title: str
    path: str              # the chapter's float32 WAV
    frames: int
    cached: bool = False   # finished by an earlier run


@dataclass
class BookEvent:
    kind: str              # "chapter-start", "piece", "chapter-done"
    chapter: int           # position among the included chapters, 1-based
    chapters: int
    title: str
    fraction: float        # of the whole book's text
    eta_s: float | None
    audio_s: float
    path: str = ""


@dataclass
class BookResult:
    chapters: list[ChapterAudio]
    rate: int
    characters: int = 0
    pieces: int = 0
    rendered: int = 0          # pieces rendered now (the others came from the parts folder)
    regenerated: int = 0       # implausible takes rendered again
    implausible: int = 0       # pieces still implausible after the retries
    failed: list[str] = field(default_factory=list)   # pieces the engine refused (their text), left out
    wall_s: float = 0.0

    @property
    def frames(self) -> int:
        return sum(c.frames for c in self.chapters)


def chapter_script(chapter: Chapter) -> str:
    """The chapter as script text: its title as a heading, then its paragraphs."""
    paras = [p.lstrip("#").lstrip() if p.startswith("#") else p for p in chapter.paragraphs]
    return "\n\n".join([f"# {chapter.title}"] + paras) + "\n"


def chapter_items(chapter: Chapter, *, base_index: int, paragraph_pause: float,
                  speakers: list[str] | None = None, group_chars: int = GROUP_CHARS) -> Iterator[Piece | Pause]:
    """The chapter's pieces and pauses, parsed a group of paragraphs at a time; piece indices
    run on from `base_index` and spans are offsets in `chapter_script(chapter)`."""
    groups: list[list[str]] = [[f"# {chapter.title}"]]
    size = 0
    for p in chapter_script(chapter).split("\n\n")[1:]:
        if size + len(p) > group_chars and groups[-1]:
            groups.append([])
            size = 0
        groups[-1].append(p.rstrip("\n"))
        size += len(p)
    index, offset = base_index, 0
    for g, paras in enumerate(groups):
        text = "\n\n".join(paras)
        if g:
            yield Pause(paragraph_pause, offset - 2, offset, "paragraph")
        for item in parse_script(text, paragraph_pause=paragraph_pause, speakers=speakers):
            if isinstance(item, Piece):
                item = replace(item, start=item.start + offset, end=item.end + offset, index=index)
                index += 1
            else:
                item = replace(item, start=item.start + offset, end=item.end + offset)
            yield item
        offset += len(text) + 2


def chapter_key(chapter: Chapter, number: int, settings: BookSettings, model_id: str) -> str:
    voices = {str(k): _voice_digest(v) for k, v in (settings.voices or {}).items()}
    blob = json.dumps({"script": chapter_script(chapter), "number": number, "seed": settings.seed,
                       "options": settings.options, "stream": settings.stream_options, "best_of": settings.best_of,
                       "paragraph_pause": settings.paragraph_pause, "chapter_pause": settings.chapter_pause,
                       "speakers": settings.speakers, "retries": settings.retries, "voices": voices,
                       "language": settings.language(chapter) if settings.language else None,
                       "lexicon": settings.lexicon.items() if settings.lexicon is not None else None,
                       "model": model_id}, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _plausibility(samples: np.ndarray, rate: int, text: str) -> float:
    """0 for a take of plausible length, else how far outside the range it is (seconds)."""
    from engine_native.likeness import plausible_seconds

    lo, hi = plausible_seconds(text)
    s = samples.size / rate
    return max(0.0, lo - s, s - hi)


class _Renderer:
    def __init__(self, engine, book: Book, settings: BookSettings, folder, *, model_path=None, cancel=None,
                 on_event: Callable[[BookEvent], None] | None = None):
        self.engine, self.book, self.s = engine, book, settings
        self.rate = engine.sample_rate
        self.folder = Path(folder)
        self.cache = PartsCache(self.folder, model_path=model_path, model_id=getattr(engine, "model_id", None),
                                stream_options=settings.stream_options, rate=self.rate, watermark=engine.watermark)
        if settings.seed is None:          # resuming without a seed finds the first run's pieces
            self.s = settings = replace(settings, seed=self.cache.seed(None))
        self.provenance = Provenance.of(engine, voice_names(settings.voices, engine.builtin_voice.name))
        self.cancel, self.on_event = cancel, on_event
        self.result = BookResult([], self.rate)
        chosen = book.included()
        self.chosen = chosen
        self.total_chars = sum(c.chars + len(c.title) for _, c in chosen) or 1
        self.done_chars = self.worked_chars = 0
        self.audio_s = 0.0
        self.t0 = time.perf_counter()

    def event(self, kind: str, k: int, chapter: Chapter, path: str = "") -> None:
        if self.on_event is None:
            return
        eta = None
        if self.worked_chars > 0:
            speed = self.worked_chars / max(time.perf_counter() - self.t0, 1e-6)
            eta = (self.total_chars - self.done_chars) / speed
        self.on_event(BookEvent(kind, k, len(self.chosen), chapter.title, self.done_chars / self.total_chars, eta,
                                self.audio_s, path))

    def run(self) -> BookResult:
        for k, (number, chapter) in enumerate(self.chosen, 1):
            self.chapter(k, number, chapter)
        self.result.wall_s = time.perf_counter() - self.t0
        return self.result

    def chapter(self, k: int, number: int, chapter: Chapter) -> None:
        import soundfile as sf

        from engine_native.files import WriteFailed, atomic_write

        key = chapter_key(chapter, number, self.s, self.cache.model_id)
        path = self.folder / "chapters" / f"{number:03d}-{key}.wav"
        self.result.characters += chapter.chars
        self.event("chapter-start", k, chapter)
        if path.is_file():
            frames = sf.info(str(path)).frames
            self.done_chars += chapter.chars + len(chapter.title)
            self.audio_s += frames / self.rate
            self.result.chapters.append(ChapterAudio(number, chapter.title, str(path), frames, cached=True))
            self.event("chapter-done", k, chapter, str(path))
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        frames = 0

        cancelled = False

        def write(tmp) -> None:
            nonlocal frames, cancelled
            with sf.SoundFile(str(tmp), "w", self.rate, 1, "FLOAT", format="RF64") as f:
                self.provenance.tag_soundfile(f)
                try:
                    for samples in self.chapter_audio(k, number, chapter):
                        f.write(samples)
                        frames += samples.size
                except Cancelled:
                    cancelled = True
                    raise

        try:
            atomic_write(path, write)      # a cancelled chapter leaves no file, only its finished pieces
        except WriteFailed:
            if cancelled:
                raise Cancelled() from None
            raise
        self.result.chapters.append(ChapterAudio(number, chapter.title, str(path), frames))
        self.event("chapter-done", k, chapter, str(path))

    def chapter_audio(self, k: int, number: int, chapter: Chapter) -> Iterator[np.ndarray]:
        options = dict(self.s.options)
        if self.s.language is not None:
            lang = self.s.language(chapter)
            if lang:
                options["language"] = lang
        items = chapter_items(chapter, base_index=number * CHAPTER_SEED_STRIDE,
                              paragraph_pause=self.s.paragraph_pause, speakers=self.s.speakers)
        for item, first in self.first_takes(items, options):
            if self.cancel is not None and self.cancel.is_set():
                raise Cancelled()
            if isinstance(item, Pause):
                yield np.zeros(int(round(item.seconds * self.rate)), np.float32)
                continue
            samples = self.piece(item, options, first)
            self.result.pieces += 1
            self.done_chars += len(item.text)
            if samples is not None:
                self.audio_s += samples.size / self.rate
                yield samples
            self.event("piece", k, chapter)
        yield np.zeros(int(round(self.s.chapter_pause * self.rate)), np.float32)

    def parts(self, items, options: dict, **kw):
        """The items' Parts from the engine, or from a cluster's (app.cluster's ClusterEngine
        renders pieces ahead on its workers and yields them in order)."""
        run = getattr(self.engine, "render_script", None) or (lambda items, **k: render(self.engine, items, **k))
        return run(items, voices=self.s.voices, seed=self.s.seed, lexicon=self.s.lexicon, best_of=self.s.best_of,
                   options=options, stream_options=self.s.stream_options, cache=self.cache, cancel=self.cancel, **kw)

    def take(self, piece: Piece, options: dict) -> tuple[np.ndarray, bool] | None:
        got, cached = [], True
        for part in self.parts([piece], options):
            got.append(part.samples)
            cached = cached and part.cached
        if self.cancel is not None and self.cancel.is_set():
            raise Cancelled()
        if not got:
            return None
        return np.concatenate(got), cached

    def refused(self, piece: Piece, error: Exception) -> None:
        self.result.failed.append(f"{piece.text[:60]!r}: {error}")

    def first_takes(self, items, options: dict) -> Iterator[tuple[Piece | Pause, tuple | None]]:
        """(item, its first take (samples, cached) or None) in order; a piece the engine refuses
        is recorded in `failed` and has no take."""
        from engine_native.errors import EmptyTextError, ParameterError

        if hasattr(self.engine, "render_script"):
            for part in self.parts(items, options, refused=self.refused):
                yield part.item, (part.samples, part.cached) if isinstance(part.item, Piece) else None
            if self.cancel is not None and self.cancel.is_set():
                raise Cancelled()
            return
        for item in items:
            if isinstance(item, Pause):
                yield item, None
                continue
            try:
                yield item, self.take(item, options)
            except (ParameterError, EmptyTextError) as e:
                self.refused(item, e)
                yield item, None

    def piece(self, piece: Piece, options: dict, first) -> np.ndarray | None:
        if first is None:
            return None
        samples, cached = first
        if not cached:
            self.result.rendered += 1
            self.worked_chars += len(piece.text)
        if self.s.best_of > 1 or self.s.retries <= 0:
            return samples
        best, off = samples, _plausibility(samples, self.rate, piece.text)
        for r in range(1, self.s.retries + 1):
            if off == 0.0:
                break
            self.result.regenerated += 1
            again = self.take(replace(piece, index=piece.index + r * BEST_OF_SEED_STRIDE), options)
            if again is None:
                break
            o = _plausibility(again[0], self.rate, piece.text)
            if o < off:
                best, off = again[0], o
        if off > 0.0:
            self.result.implausible += 1
        return best


def render_book(engine, book: Book, settings: BookSettings, folder: str | os.PathLike, *, model_path=None,
                cancel=None, on_event: Callable[[BookEvent], None] | None = None) -> BookResult:
    """Renders the book's included chapters into `folder` (see the module); Cancelled when
    `cancel` (a threading.Event) is set."""
    return _Renderer(engine, book, settings, folder, model_path=model_path, cancel=cancel, on_event=on_event).run()
