"""Scripts on the command line: `say`/`live` with pause tags, a cast, a lexicon, best-of-N,
progress with an ETA, resumable long renders and chapters.

    chatterbox-studio say -f BOOK.txt -o BOOK.mp3 -m M --cast Alice=alice.voice.gguf Bob=Bob \\
        --lexicon names.json --best-of 3 --chapters headings

- Pauses: `[pause 0.5s]`, `[pause 500ms]`, SSML `<break time="1s"/>`, and `--paragraph-pause S`
  (default 0.75 s) at blank lines (engine_native.script).
- Cast: `--cast NAME=VOICE ...`: lines starting `NAME: ` are spoken by VOICE, a .voice.gguf
  path or the name (or file name) of a voice in the app's library; other lines by --voice/--ref
  or the model's own voice.
- Lexicon (engine_native.lexicon): the global list `<app data>/lexicon.json`, then the
  project's (`BOOK.lexicon.json` or `BOOK.lexicon.tsv` beside `-f BOOK.txt`), then each
  `--lexicon FILE` in order; later lists win. `--no-global-lexicon` skips the global one.
- `--best-of N`: N takes per piece, the best likeness of plausible length kept.
- Long renders into a file keep finished pieces in `OUT.parts/` and resume from them
  (app.core.long_render); progress goes to stderr: a bar on a terminal, else one line per piece.
- Chapters: `--chapters headings|blocks` marks chapters (MP3: ID3 chapter marks) or, with
  `--chapter-files`, writes one file per chapter (BOOK-01.mp3, ...).
"""

from __future__ import annotations

import os
import sys
import threading
import time

import numpy as np

from app.cli.common import (
    Output,
    UserError,
    check_output_target,
    guarded,
    load_engine,
    log,
    provenance,
    read_text,
    resolve_voice,
    stream_options,
)
from app.core.paths import global_lexicon_path
from engine_native.options import random_seed

STREAM_ONLY = ("first_chunk_tokens", "chunk_tokens")


def project_lexicon_path(script_file: str | None) -> str | None:
    """BOOK.lexicon.json (or .tsv) beside BOOK.txt, when it exists."""
    if not script_file:
        return None
    stem = os.path.splitext(script_file)[0]
    for ext in (".lexicon.json", ".lexicon.tsv"):
        if os.path.isfile(stem + ext):
            return stem + ext
    return None


def add_script_arguments(p, *, say: bool) -> None:
    g = p.add_argument_group("script")
    g.add_argument("--lexicon", action="append", default=[], metavar="FILE",
                   help="pronunciation list (JSON or TSV; repeatable; later lists win over earlier and over the "
                   "global and project lists)")
    g.add_argument("--no-global-lexicon", action="store_true", help="ignore the app's global lexicon")
    g.add_argument("--cast", nargs="+", action="extend", default=[], metavar="NAME=VOICE",
                   help="lines starting 'NAME: ' are spoken by VOICE (a .voice.gguf or a library voice's name)")
    g.add_argument("--paragraph-pause", type=float, default=None, metavar="S",
                   help="silence at a blank line, seconds (default 0.75)")
    g.add_argument("--best-of", type=int, default=1, metavar="N",
                   help="render N takes per sentence and keep the best likeness of plausible length")
    if say:
        g.add_argument("--chapters", choices=("headings", "blocks"), default=None,
                       help="chapters at Markdown headings or at blank-line blocks: chapter marks in an MP3, "
                       "or one file per chapter with --chapter-files")
        g.add_argument("--chapter-files", action="store_true", help="one output file per chapter (OUT-01.ext, ...)")
        g.add_argument("--no-resume", action="store_true",
                       help="do not keep finished pieces in OUT.parts/ (no resume after a crash)")
        g.add_argument("--keep-parts", action="store_true", help="keep OUT.parts/ after the output is written")
        g.add_argument("--progress", choices=("auto", "bar", "lines", "none"), default="auto",
                       help="progress on stderr: a bar on a terminal, else a line per sentence (auto)")
        from app.cli.cluster_cli import add_cluster_arguments

        add_cluster_arguments(p)


def parse_cast(specs: list[str]) -> dict[str, str]:
    cast: dict[str, str] = {}
    for s in specs:
        name, sep, voice = s.partition("=")
        if not sep or not name.strip() or not voice.strip():
            raise UserError(f"--cast takes NAME=VOICE; got {s!r}")
        cast[" ".join(name.split())] = voice.strip()
    return cast


def library_voices(folder: str | None = None) -> dict[str, str]:
    """casefolded file stem and name -> path, for the voices of the app's library."""
    from app.core.paths import library_dir
    from app.core.voice_library import VoiceFolder

    out: dict[str, str] = {}
    for f in VoiceFolder(folder or library_dir()).scan():
        out.setdefault(f.stem.casefold(), f.path)
        if not f.error:
            out.setdefault(f.name.casefold(), f.path)
    return out


def load_voice_spec(engine, spec: str, library: dict | None = None):
    """A voice from a .voice.gguf path or a library voice's name."""
    from engine_native import Voice

    if os.path.isfile(spec) or spec.endswith(".gguf"):
        voice = Voice.load(spec)
    else:
        library = library_voices() if library is None else library
        path = library.get(spec.casefold())
        if path is None:
            names = ", ".join(sorted(library)) or "none"
            raise UserError(f"no voice file or library voice named {spec!r} (library voices: {names})")
        voice = Voice.load(path)
    engine.check_voice(voice)
    return voice


def gather_lexicon(args):
    from engine_native.lexicon import Lexicon, LexiconError

    paths = []
    if not getattr(args, "no_global_lexicon", False) and os.path.isfile(global_lexicon_path()):
        paths.append(global_lexicon_path())
    project = project_lexicon_path(getattr(args, "file", None))
    if project:
        paths.append(project)
    paths += list(args.lexicon or [])
    lex = Lexicon()
    try:
        for p in paths:
            lex = lex.merged(Lexicon.load(p))
    except LexiconError as e:
        raise UserError(str(e)) from None
    for p in paths:
        log(f"lexicon   {p}")
    return lex if len(lex) else None


class ScriptSetup:
    """Everything a render needs besides the text: voices, lexicon, options."""

    def __init__(self, args, engine, voice):
        from engine_native.script import DEFAULT_PARAGRAPH_PAUSE

        cast = parse_cast(args.cast or [])
        library = library_voices() if any(not os.path.isfile(v) and not v.endswith(".gguf")
                                          for v in cast.values()) else {}
        self.voices = {None: voice}
        for name, spec in cast.items():
            self.voices[name] = load_voice_spec(engine, spec, library)
            log(f"cast      {name}: {self.voices[name].name}")
        self.cast = cast
        self.lexicon = gather_lexicon(args)
        self.paragraph_pause = DEFAULT_PARAGRAPH_PAUSE if args.paragraph_pause is None else args.paragraph_pause
        if args.best_of < 1:
            raise UserError(f"--best-of must be at least 1; got {args.best_of}")
        self.best_of = args.best_of
        opts = stream_options(args, engine)
        self.stream = {k: opts.pop(k) for k in STREAM_ONLY if k in opts}
        self.options = opts

    def parse(self, text: str, *, require_words: bool = True):
        from engine_native.script import parse_script, pieces, speaker_names

        items = parse_script(text, paragraph_pause=self.paragraph_pause, speakers=list(self.cast) or None)
        if self.cast:
            known = {n.casefold() for n in self.cast}
            extra = [n for n in speaker_names(text) if n.casefold() not in known]
            if extra:
                log(f"note      no --cast voice for {', '.join(extra)}: those lines are spoken as written")
        if require_words and not pieces(items):
            raise UserError("nothing to say: the text holds no words")
        return items

    def render(self, engine, items, seed, **kw):
        """Parts of the items, from the engine (or a cluster's: app.cluster's ClusterEngine)."""
        from engine_native.script import render

        run = getattr(engine, "render_script", None) or (lambda items, **k: render(engine, items, **k))
        return run(items, voices=self.voices, seed=seed, lexicon=self.lexicon, best_of=self.best_of,
                   options=self.options, stream_options=self.stream, **kw)


class ProgressReport:
    """Progress on stderr: a bar redrawn in place on a terminal, else one plain line per update."""

    def __init__(self, mode: str = "auto", stream=None):
        self.stream = stream or sys.stderr
        tty = getattr(self.stream, "isatty", lambda: False)()
        self.mode = ("bar" if tty else "lines") if mode == "auto" else mode
        self._last = 0.0

    def show(self, progress, *, final: bool = False) -> None:
        from app.core.long_render import format_eta

        if self.mode == "none":
            return
        pct = 100.0 * progress.fraction
        eta = "done" if final else f"ETA {format_eta(progress.eta_s)}"
        text = (f"{progress.done}/{progress.total} sentences  {pct:5.1f}%  {progress.audio_s:7.1f} s of audio  "
                f"{eta}")
        if self.mode == "bar":
            width = 28
            fill = int(round(width * progress.fraction))
            self.stream.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {text}\x1b[K" + ("\n" if final else ""))
        else:
            self.stream.write(f"progress  {text}\n")
        self.stream.flush()


def cmd_say(args) -> int:
    """`say` over engine_native.script: pauses, cast, lexicon, best-of, progress, resume, chapters."""

    def body() -> int:
        text = read_text(args)
        if not text.strip():
            raise UserError("nothing to say: give TEXT or -f FILE with some text")
        check_output_target(args.output)
        file_out = args.output not in (None, "-")
        if (args.chapter_files or args.chapters) and not file_out:
            raise UserError("chapters need a file output (-o BOOK.mp3)")
        pool = None
        if args.cluster:
            from app.cli.cluster_cli import open_pool

            pool = open_pool(args)
        try:
            return render_said(args, text, file_out, pool.engine if pool else load_engine(args), pool)
        finally:
            if pool is not None:
                pool.close()

    return guarded(body)


def render_said(args, text: str, file_out: bool, engine, pool=None) -> int:
    """`say`'s render with the engine loaded (or a cluster's, with its pool)."""
    from app.core.long_render import PartsCache, parts_dir_for
    from engine_native.script import Piece, Progress, chapter_of, chapters

    voice = resolve_voice(engine, args)
    setup = ScriptSetup(args, engine, voice)
    items = setup.parse(text)
    cache = None
    if file_out and not args.no_resume:
        cache = PartsCache(parts_dir_for(args.output), model_path=args.model, stream_options=setup.stream,
                           model_id=getattr(engine, "model_id", None), rate=engine.sample_rate,
                           watermark=engine.watermark)
        if cache.count():
            log(f"resume    {cache.count()} finished pieces in {cache.folder}")
    # a render kept for resuming keeps its seed with its pieces (PartsCache.seed)
    seed = cache.seed(args.seed) if cache is not None else (args.seed if args.seed is not None else random_seed())
    tags = provenance(engine, setup.voices)
    out = Output(args.output, engine.sample_rate, tags)   # a file target: kept in memory, written at the end
    progress = Progress(items)
    report = ProgressReport(args.progress if file_out else "none")
    starts = [c[1] for c in chapters(text, args.chapters)] if args.chapters else [0]
    bounds = [None] * len(starts)          # (first sample, last sample) per chapter
    pos = 0
    if setup.best_of > 1 and hasattr(engine, "likeness_encoder"):   # a local engine (a cluster's workers score alike)
        from engine_native.likeness import TRAINED, scored_by

        by = scored_by(engine, voice)
        why = ("" if by == TRAINED else " (no trained speaker encoder: scripts/setup.sh converts one)"
               if engine.likeness_encoder is None else " (the voice keeps no recording beside it to compare with)")
        log(f"best-of   {setup.best_of} takes a sentence, likeness by {by}{why}")
    t0 = time.perf_counter()
    first_audio = None
    for part in setup.render(engine, items, seed, cache=cache):
        if first_audio is None:
            first_audio = time.perf_counter() - t0
        out.write(part.samples)
        ch = chapter_of(starts, part.item.start)
        a = (bounds[ch] or (pos, pos))[0]
        bounds[ch] = (a, pos + part.samples.size)
        pos += part.samples.size
        progress.update(part)
        if part.final and isinstance(part.item, Piece):
            if part.score is not None and setup.best_of > 1:
                scores = ", ".join(f"{c[1]:.3f}{'' if c[3] else '*'}" for c in part.candidates)
                log(f"best-of   {part.item.text[:40]!r}: seed {part.seed}, likeness {part.score:.3f} "
                    f"(of {scores}; * implausible length)")
            report.show(progress)
    if report.mode == "bar":
        report.show(progress, final=True)
    audio_s = pos / engine.sample_rate
    if file_out and args.chapter_files:
        _write_chapter_files(args.output, out.kept, bounds, chapters(text, args.chapters) if args.chapters
                             else [("", 0)], engine.sample_rate, tags)
    else:
        out.finish()
        if file_out and args.chapters:
            _chapter_marks(args.output, bounds, chapters(text, args.chapters), engine.sample_rate)
    if cache is not None and not args.keep_parts:
        cache.remove()
    wall = time.perf_counter() - t0
    log(f"said      {audio_s:.2f} s of audio in {wall:.2f} s (first audio after {first_audio or wall:.2f} s, "
        f"RTF {wall / max(audio_s, 1e-9):.2f}), seed {seed}")
    if pool is not None:
        from app.cli.cluster_cli import pool_summary

        log(f"cluster   {pool_summary(pool)}")
    return 0


def _write_chapter_files(output: str, kept: list, bounds, chs, rate: int, tags) -> None:
    from app.core.long_render import chapter_files
    from app.core.take import ExportError, export_audio

    audio = np.concatenate(kept) if kept else np.zeros(0, np.float32)
    used = [(t, b) for (t, _), b in zip(chs, bounds) if b is not None and b[1] > b[0]]
    for path, (title, (a, b)) in zip(chapter_files(output, len(used)), used):
        try:
            export_audio(audio[a:b], rate, path, tags)
        except ExportError as e:
            raise UserError(str(e)) from None
        log(f"chapter   {path} ({(b - a) / rate:.2f} s) {title}")


def _chapter_marks(output: str, bounds, chs, rate: int) -> None:
    from app.core.long_render import add_chapter_marks

    marks = [(t, b[0], b[1]) for (t, _), b in zip(chs, bounds) if b is not None and b[1] > b[0]]
    if not output.lower().endswith(".mp3"):
        log(f"note      {os.path.splitext(output)[1]} holds no chapter marks here; use .mp3 or --chapter-files")
        return
    try:
        add_chapter_marks(output, marks, rate)
    except OSError as e:
        raise UserError(str(e)) from None
    log(f"chapters  {len(marks)} marks in {output}")


class ScriptStream:
    """A script render with the interface `speak.speak` uses (iterate, cancel, close)."""

    def __init__(self, setup: ScriptSetup, engine, text: str, seed):
        self._cancel = threading.Event()
        items = setup.parse(text, require_words=False)
        self._gen = setup.render(engine, items, random_seed() if seed is None else seed, cancel=self._cancel)

    def __iter__(self):
        return self._gen

    def cancel(self) -> None:
        self._cancel.set()

    def close(self) -> None:
        self._cancel.set()
        self._gen.close()


def live_script(setup: ScriptSetup, engine):
    """For `live`: a function text, seed -> ScriptStream (each typed sentence is a small script)."""
    return lambda text, seed: ScriptStream(setup, engine, text, seed)
