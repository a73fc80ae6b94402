"""`book`: a book (EPUB, Markdown, HTML, plain text) -> an audiobook.

    chatterbox-studio book BOOK.epub --list
    chatterbox-studio book BOOK.epub -m MODEL [--voice V] [--cast NAME=VOICE ...] [--lexicon F] \\
        [--chapters 1,3-5] -o BOOK.m4b|BOOK.mp3|DIR/

The importer (app.core.book) reads the chapter list; `--list` shows it with what is included
(body chapters; front matter, back matter and notes are listed but left out unless chosen by
`--chapters`). The render (app.core.book.render) keeps finished pieces and chapters in
`OUT.parts/` and the same command resumes there after a crash, Ctrl-C or a kill; each finished
chapter is a WAV there that can be played at once. The output (app.core.book.m4b) is
normalised to -18 LUFS (`--loudness`). Synthesis options are `say`'s; a cast, a lexicon
(BOOK.lexicon.json beside the book is the book's own) and best-of-N work as in `say`.
A Multilingual model reads each chapter in the book's language (or the chapter's);
an English-only model refuses a book in another language unless `--any-language`.
"""

from __future__ import annotations

import os
import sys
import threading

from app.cli.common import UserError, add_engine_arguments, guarded, load_engine, log, provenance, resolve_voice
from app.cli.script_cli import ScriptSetup, add_script_arguments

CHAPTER_FORMATS = ("mp3", "m4a", "flac", "ogg", "wav")


def add_parser(sub) -> None:
    p = sub.add_parser("book", help="read a book (EPUB, Markdown, HTML, text) into an audiobook: M4B with chapters "
                       "and cover, MP3 with chapter marks, or one file per chapter")
    p.add_argument("book", help="BOOK.epub, .md, .html or .txt")
    p.add_argument("-o", "--output", help="BOOK.m4b (AAC, chapters, cover, tags), BOOK.mp3 (chapter marks), or "
                   "DIR/ (one file per chapter)")
    g = p.add_argument_group("the book")
    g.add_argument("--list", action="store_true", help="list the chapters (and which are read) and stop")
    g.add_argument("--chapters", metavar="SPEC", help="the chapters to read, numbered as --list shows them: 1,3-5, "
                   "'all', or a kind (body, front, back, notes); default: the body chapters")
    g.add_argument("--rename", action="append", default=[], metavar="N=TITLE", help="give chapter N another title")
    g.add_argument("--title", help="the audiobook's title (default: the book's)")
    g.add_argument("--author", help="the author (default: the book's)")
    g.add_argument("--narrator", help="the narrator tag (default: the voice's name)")
    g.add_argument("--cover", metavar="IMAGE", help="cover picture (default: the book's)")
    g.add_argument("--no-cover", action="store_true", help="no cover picture")
    g.add_argument("--loudness", type=float, default=None, metavar="LUFS",
                   help="integrated loudness of the audiobook (default -18 LUFS; true peaks held at -1.5 dBTP)")
    g.add_argument("--chapter-format", choices=CHAPTER_FORMATS, default="mp3",
                   help="format of the files when -o is a folder (default mp3)")
    g.add_argument("--chapter-pause", type=float, default=None, metavar="S",
                   help="silence after each chapter, seconds (default 2)")
    g.add_argument("--retries", type=int, default=1, metavar="N",
                   help="render a sentence again (another seed) when its take has an implausible length, up to N "
                   "times (default 1; 0: never)")
    g.add_argument("--any-language", action="store_true",
                   help="read a book in another language with an English-only model anyway")
    g.add_argument("--no-resume", action="store_true", help="do not keep finished pieces in OUT.parts/")
    g.add_argument("--keep-parts", action="store_true", help="keep OUT.parts/ after the audiobook is written")
    g.add_argument("--progress", choices=("auto", "bar", "lines", "none"), default="auto",
                   help="progress on stderr: a bar on a terminal, else a line per sentence (auto)")
    add_engine_arguments(p)
    for action in p._actions:                  # --list needs no model
        if action.dest == "model":
            action.required = False
    add_script_arguments(p, say=False)
    from app.cli.cluster_cli import add_cluster_arguments

    add_cluster_arguments(p)
    p.set_defaults(func=cmd_book)


def _read_book(args):
    from app.core.book import BookError, import_book

    try:
        book = import_book(args.book)
        if args.chapters:
            book.select(args.chapters)
        for spec in args.rename:
            n, sep, title = spec.partition("=")
            if not sep or not n.strip().isdigit():
                raise UserError(f"--rename takes N=TITLE; got {spec!r}")
            book.rename(int(n), title)
    except BookError as e:
        raise UserError(str(e)) from None
    return book


def print_chapters(book, out=None) -> None:
    out = out or sys.stdout
    meta = ", ".join(x for x in (book.author, book.language, book.year) if x)
    out.write(f"{book.title}{' (' + meta + ')' if meta else ''}  [{book.format}]\n")
    width = len(str(len(book.chapters)))
    for i, c in enumerate(book.chapters, 1):
        out.write(f"  {i:>{width}}  {'read' if c.included else '-   '}  {c.kind:<5}  {c.words:>7,} words  {c.title}\n")
    for note in book.notes:
        out.write(f"  note: {note}\n")


def _output_kind(target: str) -> str:
    if target.endswith(("/", os.sep)) or os.path.isdir(target):
        return "folder"
    ext = os.path.splitext(target)[1].lower().lstrip(".")
    if ext not in ("m4b", "m4a", "mp3"):
        raise UserError(f"cannot write a .{ext or '?'} audiobook: give BOOK.m4b, BOOK.m4a, BOOK.mp3 or a folder DIR/")
    folder = os.path.dirname(os.path.abspath(target))
    if not os.path.isdir(folder):
        raise UserError(f"cannot write {target}: the folder {folder} does not exist")
    return ext


def _language_rule(args, engine, book):
    """The chapter -> language code function for a Multilingual model, or None."""
    from app.core.book import BookError
    from app.core.book.job import language_rule

    try:
        rule = language_rule(book, engine.languages, model_name=os.path.basename(args.model),
                             any_language=args.any_language,
                             hint="load a Multilingual model, or pass --any-language to read it with this one")
    except BookError as e:
        raise UserError(str(e)) from None
    if rule is None or args.language:
        return None                            # the given --language is in the options already
    unknown = sorted({c for _, ch in book.included() if (c := _code(book.chapter_language(ch)))}
                     - set(engine.languages))
    if unknown:
        log(f"note      {', '.join(unknown)} is not among the model's languages: detected from the text instead")
    return rule


def _code(tag: str | None) -> str | None:
    return tag.split("-")[0].split("_")[0].lower() if tag else None


def cmd_book(args) -> int:
    def body() -> int:
        book = _read_book(args)
        if args.list:
            print_chapters(book)
            return 0
        if not args.model:
            raise UserError("give -m MODEL (or --list to see the chapters)")
        if not args.output:
            raise UserError("give -o BOOK.m4b, BOOK.mp3 or a folder DIR/ (or --list to see the chapters)")
        kind = _output_kind(args.output)
        if not book.included():
            raise UserError("no chapter is selected (see --list and --chapters)")
        if args.retries < 0:
            raise UserError(f"--retries must be 0 or more; got {args.retries}")
        cover = _cover(args, book)
        pool = None
        if args.cluster:                       # the pieces rendered on a Ray cluster's workers
            from app.cli.cluster_cli import open_pool

            pool = open_pool(args)
        try:
            engine = pool.engine if pool else load_engine(args)
            voice = resolve_voice(engine, args)
            args.file = args.book              # BOOK.lexicon.json beside the book is its own lexicon
            setup = ScriptSetup(args, engine, voice)
            rc = _render(args, book, engine, voice, setup, kind, cover)
            if pool is not None:
                from app.cli.cluster_cli import pool_summary

                log(f"cluster   {pool_summary(pool)}")
            return rc
        finally:
            if pool is not None:
                pool.close()

    return guarded(body)


def _cover(args, book):
    if args.no_cover:
        return None
    if args.cover:
        ext = os.path.splitext(args.cover)[1].lower()
        try:
            with open(args.cover, "rb") as f:
                data = f.read()
        except OSError as e:
            raise UserError(f"cannot read the cover {args.cover}: {e.strerror}") from None
        return data, {".jpg": "image/jpeg", ".jpeg": "image/jpeg", ".png": "image/png"}.get(ext, "image/" + ext[1:])
    return (book.cover, book.cover_mime) if book.cover else None


def _render(args, book, engine, voice, setup, kind, cover) -> int:
    from app.core.book.job import summary_lines, write_book
    from app.core.book.m4b import AudiobookError, Tags
    from app.core.book.render import DEFAULT_CHAPTER_PAUSE, BookSettings, Cancelled, render_book
    from app.core.long_render import format_eta, parts_dir_for

    target = args.output.rstrip("/" + os.sep) if kind == "folder" else args.output
    folder = parts_dir_for(target)
    if folder.is_dir() and any(folder.iterdir()):
        log(f"resume    finished work in {folder}")
    settings = BookSettings(
        voices=setup.voices, lexicon=setup.lexicon, seed=args.seed,
        options=setup.options, stream_options=setup.stream, best_of=setup.best_of,
        paragraph_pause=setup.paragraph_pause,
        chapter_pause=DEFAULT_CHAPTER_PAUSE if args.chapter_pause is None else args.chapter_pause,
        speakers=list(setup.cast) or None, retries=args.retries, language=_language_rule(args, engine, book))
    tty = getattr(sys.stderr, "isatty", lambda: False)()
    mode = ("bar" if tty else "lines") if args.progress == "auto" else args.progress

    def on_event(e) -> None:
        if e.kind == "chapter-done":
            log(f"{'ready':<10}chapter {e.chapter}/{e.chapters} {e.title!r}: {e.path}")
        elif e.kind == "piece" and mode != "none":
            text = (f"chapter {e.chapter}/{e.chapters}  {100 * e.fraction:5.1f}%  {e.audio_s:8.1f} s of audio  "
                    f"ETA {format_eta(e.eta_s)}  {e.title[:40]}")
            sys.stderr.write(f"\r{text}\x1b[K" if mode == "bar" else f"progress  {text}\n")
            sys.stderr.flush()

    cancel = threading.Event()
    try:
        result = render_book(engine, book, settings, folder, model_path=args.model, cancel=cancel, on_event=on_event)
    except Cancelled:
        log(f"stopped   finished pieces are kept in {folder}; the same command resumes")
        return 130
    if mode == "bar":
        sys.stderr.write("\n")
    narrator = args.narrator or (voice.name if voice is not None else os.path.splitext(os.path.basename(args.model))[0])
    tags = Tags(args.title or book.title, args.author if args.author is not None else book.author, narrator,
                book.year, comment=f"Read by {narrator} with Chatterbox Studio",
                provenance=provenance(engine, setup.voices))
    try:
        report, plan = write_book(result.chapters, target, kind, result.rate, tags, cover, loudness=args.loudness,
                                  chapter_format=args.chapter_format)
    except AudiobookError as e:
        raise UserError(str(e)) from None
    if not args.keep_parts and not args.no_resume:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    elif args.no_resume:
        import shutil

        shutil.rmtree(folder, ignore_errors=True)
    for line in summary_lines(result, report, plan):
        log(line)
    return 0
