"""The speaking commands of the CLI: `live` and `bake`, and the parsers of `say` (whose body
is app.cli.script_cli's), `live` and `bake`. What they share is app.cli.common."""

from __future__ import annotations

import os
import sys
import threading
import time

from app.cli import script_cli
from app.cli.common import (
    Output,
    UserError,
    add_engine_arguments,
    check_output_target,
    clone_from_file,
    guarded,
    load_engine,
    log,
    provenance,
    resolve_voice,
    stream_options,
)


def speak(engine, text: str, voice, opts: dict, seed, out: Output, stop: threading.Event | None = None,
          script=None) -> dict:
    """Streams one text into `out`; returns totals for the log line."""
    t0 = time.perf_counter()
    first_audio = None
    audio_s = 0.0
    # script: text, seed -> a stream of the script's parts (pauses, cast, lexicon: app.cli.script_cli)
    it = engine.stream(text, voice, seed=seed, **opts) if script is None else script(text, seed)
    try:
        for chunk in it:
            if first_audio is None:
                first_audio = time.perf_counter() - t0
            out.write(chunk.samples)
            audio_s += chunk.samples.size / chunk.sample_rate
            if stop is not None and stop.is_set():
                it.cancel()
    finally:
        it.close()
    wall = time.perf_counter() - t0
    return {"audio_s": audio_s, "wall_s": wall, "first_audio_s": first_audio or wall, "seed": seed}


def _follow(path: str, stop: threading.Event):
    """Yield text appended to `path` as it grows (like `tail -f`), from its current end."""
    with open(path, encoding="utf-8", errors="replace") as f:
        f.seek(0, os.SEEK_END)
        while not stop.is_set():
            data = f.read()
            if data:
                yield data
            else:
                time.sleep(0.1)


def sentences_from(chunks, by_line: bool):
    """Complete utterances out of a stream of typed text: whole lines with --by-line, else
    each sentence by the engine's own rule (engine_native.text: not after "Mr.", CJK full
    stops, newlines). What is left at the end of input is spoken too."""
    from engine_native.text import split_completed

    buf = ""
    for data in chunks:
        buf += data
        if by_line:
            *lines, buf = buf.split("\n")
            done = [line.strip() for line in lines]
        else:
            sentences, mark = split_completed(buf)
            done, buf = [s.text for s in sentences], buf[mark:]
        yield from (d for d in done if d)
    if buf.strip():
        yield buf.strip()


def _stdin_chunks(interactive: bool):
    while True:
        if interactive:
            sys.stderr.write("> ")
            sys.stderr.flush()
        line = sys.stdin.readline()
        if not line:
            return
        yield line


def cmd_live(args) -> int:
    """Speak text as it is typed: a queue between the reader and the speaker keeps order,
    and each sentence is spoken exactly once, as soon as it is complete."""
    import queue

    def body() -> int:
        check_output_target(args.output)
        engine = load_engine(args)
        voice = resolve_voice(engine, args)
        opts = stream_options(args, engine)
        setup = script_cli.ScriptSetup(args, engine, voice)
        script = script_cli.live_script(setup, engine)
        out = Output(args.output, engine.sample_rate, provenance(engine, setup.voices))
        stop = threading.Event()
        todo: queue.Queue = queue.Queue()
        seed = args.seed

        def reader():
            try:
                if args.input_file:
                    chunks = _follow(args.input_file, stop)
                else:
                    chunks = _stdin_chunks(sys.stdin.isatty())
                for s in sentences_from(chunks, args.by_line):
                    todo.put(s)
            finally:
                todo.put(None)

        if args.input_file and not os.path.isfile(args.input_file):
            raise UserError(f"input file not found: {args.input_file}")
        if sys.stdin.isatty() and not args.input_file:
            log("type; each sentence is spoken when it ends (. ! ? then space or Enter). Ctrl-D or Ctrl-C ends.")
        threading.Thread(target=reader, daemon=True).start()
        try:
            while (sentence := todo.get()) is not None:
                r = speak(engine, sentence, voice, opts, seed, out, stop, script=script)
                log(f"spoke     {sentence!r}: {r['audio_s']:.2f} s, first audio after {r['first_audio_s']:.2f} s")
        except KeyboardInterrupt:
            stop.set()
            log("stopped")
        finally:
            stop.set()
            out.finish()
        return 0

    return guarded(body)


def cmd_bake(args) -> int:
    def body() -> int:
        if not args.output and not args.into_model:
            raise UserError("give -o NAME.voice.gguf, --into-model OUT.gguf, or both")
        engine = load_engine(args)
        voice = clone_from_file(engine, args.audio, args.name)
        if args.output:
            path = voice.save(args.output, name=args.name or voice.name)
            log(f"wrote     {path} ({os.path.getsize(path) / 1024:.0f} KiB, voice '{voice.name}', "
                f"{voice.meta['duration_s']:.1f} s recording)")
        if args.into_model:   # a copy of the model whose built-in voice is this clone (engine_native.bake)
            from engine_native.bake import bake_into_model

            if args.name:
                voice.meta["name"] = args.name
            path = bake_into_model(args.model, voice, args.into_model)
            log(f"wrote     {path} ({os.path.getsize(path) / 2**20:.0f} MiB, the model with voice '{voice.name}' "
                f"built in)")
        return 0

    return guarded(body)


def add_parsers(sub) -> None:
    p = sub.add_parser("say", help="speak TEXT (or a file) to the sound card, a file, or stdout")
    p.add_argument("text", nargs="?", help="what to say")
    p.add_argument("-f", "--file", help="read the text from FILE (UTF-8)")
    p.add_argument("-o", "--output", help="OUT.wav|.flac|.ogg|.mp3, or - for raw s16le 24 kHz mono PCM on stdout; "
                   "default: play it")
    add_engine_arguments(p)
    script_cli.add_script_arguments(p, say=True)
    p.set_defaults(func=script_cli.cmd_say)  # say runs through engine_native.script

    p = sub.add_parser("live", help="type and hear each sentence as soon as it is complete")
    p.add_argument("--input-file", help="follow this file as it grows (like tail -f) instead of reading stdin")
    p.add_argument("--by-line", action="store_true", help="one line is one utterance")
    p.add_argument("-o", "--output", help="a file to write at the end, or - for PCM on stdout; default: play")
    add_engine_arguments(p)
    script_cli.add_script_arguments(p, say=False)
    p.set_defaults(func=cmd_live)

    p = sub.add_parser("bake", help="clone the voice of a recording into a .voice.gguf file")
    p.add_argument("audio", help="the recording (more than 5 s; 10 s or more of clean speech is best)")
    p.add_argument("-o", "--output", help="NAME.voice.gguf to write")
    p.add_argument("--into-model", metavar="OUT.gguf",
                   help="also (or instead) write a copy of the model whose built-in voice is this clone")
    p.add_argument("--name", help="the voice's name (default: the recording's file name)")
    add_engine_arguments(p, sampling=False)
    p.set_defaults(func=cmd_bake)
