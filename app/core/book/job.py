"""An audiobook job as the app keeps it: what the person chose in the review (the chapters,
their titles, the voice, a cast and a lexicon for this book, the output) and what the render
needs to resume after a pause or an app restart, as one plain object that saves to JSON.

    job = BookJob(book_path, output="alice.m4b", chapters=[2, 3], renames={3: "The Pool"}, ...)
    job.apply(book)                          # the review's choices onto the imported Book
    settings = job.settings(book, voices, lexicon, languages)   # app.core.book.render.BookSettings
    ... render_book(engine, book, settings, job.parts_folder) ...
    report, plan = write_book(result.chapters, job.target, job.kind, rate, job.tags(book, narrator), cover)

Resuming: the render keeps finished pieces and chapters in `job.parts_folder` (the folder
the command line's `book -o OUT` uses, OUT.parts/), keyed by everything their samples depend
on; the job holds its seed, so the same job renders the same keys and a resumed book equals
an uninterrupted one. The book's own lexicon is BOOK.lexicon.json beside the book, as the
command line reads it.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field

from app.core.book.model import Book, BookError

OUTPUT_KINDS = ("m4b", "mp3", "folder")
STREAM_ONLY = ("first_chunk_tokens", "chunk_tokens")


def book_lexicon_path(book_path: str) -> str:
    """The book's own lexicon: BOOK.lexicon.json beside BOOK.epub (the command line reads it too)."""
    return os.path.splitext(book_path)[0] + ".lexicon.json"


def default_output(book_path: str, kind: str = "m4b") -> str:
    stem = os.path.splitext(book_path)[0]
    return stem + "-chapters" if kind == "folder" else f"{stem}.{kind}"


def output_kind(target: str) -> str:
    """"m4b" (also .m4a), "mp3" or "folder" for an output path; BookError for anything else."""
    if target.endswith(("/", os.sep)) or os.path.isdir(target):
        return "folder"
    ext = os.path.splitext(target)[1].lower().lstrip(".")
    if ext in ("m4b", "m4a"):
        return "m4b"
    if ext == "mp3":
        return "mp3"
    raise BookError(f"cannot write a .{ext or '?'} audiobook: give BOOK.m4b, BOOK.m4a, BOOK.mp3 or a folder")


def language_rule(book: Book, languages: dict, *, model_name: str, any_language: bool = False,
                  hint: str = "load a Multilingual model to read it"):
    """The chapter -> language code function for a Multilingual model (`languages`: its codes;
    a chapter in another language is left to the engine's guess), None for an English-only one;
    BookError when an English-only model would read a book in another language (unless
    `any_language`), ending with `hint`."""
    from engine_native.language import NAMES

    def code(tag: str | None) -> str | None:
        return tag.split("-")[0].split("_")[0].lower() if tag else None

    langs = {code(book.chapter_language(c)) for _, c in book.included()} - {None}
    if not languages:
        foreign = sorted(lang for lang in langs if lang != "en")
        if foreign and not any_language:
            names = ", ".join(f"{c} ({NAMES.get(c, c)})" for c in foreign)
            raise BookError(f"this book is in {names} and {model_name} speaks English only; {hint}")
        return None

    def rule(chapter) -> str | None:
        c = code(book.chapter_language(chapter))
        return c if c in languages else None

    return rule


@dataclass
class BookJob:
    book_path: str
    output: str = ""
    kind: str = "m4b"                  # OUTPUT_KINDS
    chapter_format: str = "mp3"        # the files' format when kind is "folder"
    chapters: list[int] = field(default_factory=list)        # the included chapters' numbers (1-based)
    renames: dict[int, str] = field(default_factory=dict)    # number -> the title the person gave
    title: str = ""                    # the audiobook's title and author tags ("" -> the book's)
    author: str = ""
    voice: str = ""                    # the narrator: a library voice's path, "" the model's built-in
    cast: dict[str, str] = field(default_factory=dict)       # `Name:` speaker -> voice path
    lexicon: str = ""                  # the book's lexicon file ("" -> none)
    options: dict = field(default_factory=dict)              # synthesis and stream options
    seed: int = 0
    retries: int = 1
    model_path: str = ""

    def __post_init__(self) -> None:
        if self.kind not in OUTPUT_KINDS:
            raise BookError(f"an audiobook is one of {', '.join(OUTPUT_KINDS)}; got {self.kind!r}")
        self.renames = {int(k): v for k, v in self.renames.items()}
        if not self.output:
            self.output = default_output(self.book_path, self.kind)

    @property
    def target(self) -> str:
        return self.output.rstrip("/" + os.sep) if self.kind == "folder" else self.output

    @property
    def parts_folder(self):
        from app.core.long_render import parts_dir_for

        return parts_dir_for(self.target)

    def apply(self, book: Book) -> Book:
        """The review's choices onto the imported book: which chapters are read, and their titles."""
        n = len(book.chapters)
        bad = [k for k in [*self.chapters, *self.renames] if not 1 <= k <= n]
        if bad:
            raise BookError(f"{os.path.basename(self.book_path)} has {n} chapters now, not {max(bad)}: "
                            "review it again")
        for i, c in enumerate(book.chapters, 1):
            c.included = i in self.chapters
        for k, title in self.renames.items():
            book.rename(k, title)
        return book

    def settings(self, book: Book, voices: dict, lexicon, languages: dict, *, model_name: str = "the model"):
        """The renderer's BookSettings for this job (`voices`: speaker (None: the narrator) -> Voice)."""
        from app.core.book.render import BookSettings
        from engine_native.script import DEFAULT_PARAGRAPH_PAUSE

        options = {k: v for k, v in self.options.items() if v is not None and k not in ("seed", "language")}
        stream = {k: options.pop(k) for k in STREAM_ONLY if k in options}
        return BookSettings(voices=voices, lexicon=lexicon, seed=int(self.seed), options=options,
                            stream_options=stream, paragraph_pause=DEFAULT_PARAGRAPH_PAUSE,
                            speakers=list(self.cast) or None, retries=self.retries,
                            language=language_rule(book, languages, model_name=model_name))

    def tags(self, book: Book, narrator: str, provenance=None):
        """The audiobook's tags; `provenance` (app.core.provenance.Provenance): how its speech was
        made, at the comment's end and in encoded_by."""
        from app.core.book.m4b import Tags

        return Tags(self.title or book.title, self.author or book.author, narrator, book.year,
                    comment=f"Read by {narrator} with Chatterbox Studio", provenance=provenance)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> BookJob:
        """The job saved by to_json; BookError for anything else."""
        try:
            data = json.loads(text)
            return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})
        except (ValueError, TypeError) as e:
            raise BookError(f"the saved audiobook job cannot be read: {e}") from None


def write_book(chapters, target: str, kind: str, rate: int, tags, cover, *, loudness: float | None = None,
               chapter_format: str = "mp3"):
    """The rendered chapters (objects with .title, .path, .frames) into the audiobook, brought to
    the loudness target: (AudiobookReport, LoudnessPlan). AudiobookError when it cannot be written."""
    from app.core.book.m4b import LOUDNESS_TARGET_LUFS, loudness_plan, write_audiobook, write_chapter_files

    plan = loudness_plan([c.path for c in chapters], rate, target=LOUDNESS_TARGET_LUFS if loudness is None else loudness)
    if kind == "folder":
        return write_chapter_files(chapters, target, chapter_format, rate, tags, cover, plan), plan
    return write_audiobook(chapters, target, rate, tags, cover, plan), plan


def chapter_files(done: list[tuple[int, str, str]]) -> list:
    """ChapterAudio of chapters a render finished, from (number, title, path) as its
    "chapter-done" events named them (a cancelled render's finished chapters), in the book's order."""
    import soundfile as sf

    from app.core.book.render import ChapterAudio

    return [ChapterAudio(n, title, path, sf.info(path).frames, cached=True) for n, title, path in sorted(done)]


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.1f}"


def summary_lines(result, report, plan) -> list[str]:
    """The end of a render in words: the file, the duration and chapters, the text, the
    sentences regenerated or refused, the loudness met, the time it took."""
    from app.core.long_render import format_eta

    lines = [f"wrote     {report.path}: {format_eta(report.seconds)} ({report.seconds:.1f} s), "
             f"{_count(report.chapters, 'chapter')}" + (f" in {len(report.files)} files" if len(report.files) > 1 else "")]
    if result is not None:
        cached = sum(c.cached for c in result.chapters)
        lines += [f"text      {_count(result.characters, 'character')}; {_count(result.rendered, 'sentence')} rendered "
                  f"now, {result.pieces - result.rendered:,} taken from earlier runs, {_count(cached, 'chapter')} "
                  "finished before",
                  f"retakes   {_count(result.regenerated, 'sentence')} regenerated for an implausible length, "
                  f"{result.implausible} still implausible, {len(result.failed)} refused by the engine"]
        lines += [f"refused   {f}" for f in result.failed[:10]]
    lines.append(f"loudness  {_fmt(plan.measured_lufs)} LUFS -> {_fmt(report.lufs)} LUFS (target {plan.target_lufs:g}), "
                 f"gain {plan.gain_db:+.1f} dB{', peaks limited' if plan.limiter else ''}; true peak "
                 f"{_fmt(report.peak_dbtp)} dBTP")
    if result is not None:
        lines.append(f"time      {format_eta(result.wall_s)} rendering")
    return lines
