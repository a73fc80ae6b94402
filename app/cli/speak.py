"""The speaking commands of the CLI: `say`, `live` and `bake`.

Audio goes to a file (WAV/FLAC/OGG/MP3 by extension, written atomically), to stdout as raw
s16le 24 kHz mono PCM (`-o -`, flushed chunk by chunk: pipe it into `aplay`/`ffplay`/
`play`), or without `-o` to the sound card. Logs go to stderr, so stdout stays clean.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import threading
import time

import numpy as np

from engine_native import options as schema
from engine_native.engine import PRESETS

SAMPLING_OPTIONS = schema.SAMPLING
# Multilingual models only (a Turbo / Nano model refuses them when given).
MULTILINGUAL_OPTIONS = ("language",) + schema.MTL


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def fail(message: str, code: int = 1) -> int:
    log(f"chatterbox-studio: error: {message}")
    return code


class UserError(Exception):
    """A problem with what the user asked for: reported in one line, exit status 1."""


class PipeClosed(Exception):
    """The reader of our standard output went away (`| head -c 100`): stop quietly."""


def check_output_target(target: str | None) -> None:
    """A file target's format and folder are checked before any synthesis."""
    if target in (None, "-"):
        return
    from app.core.take import ExportError, check_export_path

    try:
        check_export_path(target)
    except ExportError as e:
        raise UserError(str(e)) from None


def add_engine_arguments(p: argparse.ArgumentParser, *, sampling: bool = True) -> None:
    p.add_argument("-m", "--model", required=True, help="the model .gguf")
    add_option_argument(p, "threads", default=None, help="CPU threads (default: all cores)")
    add_device_argument(p)
    if not sampling:
        return
    g = p.add_argument_group("voice and sampling")
    g.add_argument("--voice", metavar="V.voice.gguf", help="speak with this voice (default: the model's own)")
    g.add_argument("--ref", metavar="AUDIO", help="clone the voice of this recording first (any format ffmpeg reads)")
    add_option_argument(g, "seed", default=None, help="same seed, same audio (default: random, printed)")
    g.add_argument("--preset", choices=sorted(PRESETS), default="quality",
                   help="low-latency: small first chunk, 1 CFM step, 4 s of voice prompt (first audio sooner, "
                   "a little less detail and likeness)")
    for name in schema.SAMPLING + schema.STREAMING:
        add_option_argument(g, name)
    add_multilingual_arguments(p)


def add_multilingual_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Multilingual models")
    g.add_argument("--language", metavar="CODE",
                   help="the text's language (ar da de el en es fi fr he hi it ja ko ms nl no pl pt ru sv sw tr zh; "
                   "default: detected from the text). `info MODEL` lists a model's languages")
    for name in schema.MTL:
        add_option_argument(g, name)


def add_device_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="auto", metavar="DEVICE",
                   help="where the engine runs: auto (the fastest present), cpu, cuda:0, vulkan:0, ... "
                   "(`chatterbox-studio info` lists them; a device that fails to start falls back to the CPU)")


def add_option_argument(group, name: str, **kw) -> None:
    """A flag for one option of the engine's schema: its help and range come from there. The
    value is parsed as a number of any size here and range-checked by the engine, which
    names the option and its range in one line."""
    opt = schema.option(name)
    kw.setdefault("help", f"{opt.doc} {opt.range_text()}")
    group.add_argument(opt.flag, dest=name, type=opt.kind, metavar="N" if opt.kind is int else "X", **kw)


def load_engine(args):
    from engine_native import Engine

    t0 = time.perf_counter()
    engine = Engine(args.model, device=getattr(args, "device", "auto"), threads=args.threads)
    log(f"model     {args.model} ({engine.variant} {engine.info['quantization']}, on {engine.device}, loaded in "
        f"{(time.perf_counter() - t0):.1f} s)")
    if engine.device_note:
        log(f"device    {engine.device_note}")
    return engine


def clone_from_file(engine, path: str, name: str | None = None):
    """A voice from any recording: decoded by the Voice Lab (ffmpeg or soundfile), cloned natively."""
    import hashlib

    from voice_lab import VoiceLabError
    from voice_lab.decode import decode

    try:
        samples, rate = decode(path)
    except VoiceLabError as e:
        raise UserError(str(e)) from None
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    voice = engine.voice_from_audio(samples, rate, name=name or os.path.basename(path).rsplit(".", 1)[0],
                                    source_file=os.path.basename(path), source_sha256=digest)
    log(f"voice     cloned from {path} in {time.perf_counter() - t0:.1f} s")
    return voice


def resolve_voice(engine, args):
    from engine_native import Voice

    if args.voice and args.ref:
        raise UserError("give --voice or --ref, not both")
    if args.voice:
        voice = Voice.load(args.voice)
        engine.check_voice(voice)
        log(f"voice     {voice.name} ({args.voice})")
        return voice
    if args.ref:
        return clone_from_file(engine, args.ref)
    return None


def stream_options(args, engine) -> dict:
    opts = dict(engine.presets[args.preset])
    for k in SAMPLING_OPTIONS + ("first_chunk_tokens", "chunk_tokens") + MULTILINGUAL_OPTIONS:
        if getattr(args, k, None) is not None:
            opts[k] = getattr(args, k)
    return opts


def to_s16le(samples: np.ndarray, rate: int) -> bytes:
    """Through libsndfile, the same conversion as a 16-bit WAV file gets."""
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.clip(samples, -1.0, 1.0), rate, format="RAW", subtype="PCM_16", endian="LITTLE")
    return buf.getvalue()


class Output:
    """Where chunks go: stdout PCM, the sound card, or memory (for a file at the end)."""

    def __init__(self, target: str | None, rate: int):
        self.target, self.rate, self.kept = target, rate, []
        self._stream = None
        if target is None:
            import sounddevice as sd

            try:
                self._stream = sd.OutputStream(samplerate=rate, channels=1, dtype="float32")
                self._stream.start()
            except Exception as e:  # PortAudio errors: no device, busy device...
                raise UserError(f"cannot open the sound card ({e}); write a file with -o instead") from None

    def write(self, samples: np.ndarray) -> None:
        if self.target == "-":
            try:
                sys.stdout.buffer.write(to_s16le(samples, self.rate))
                sys.stdout.buffer.flush()
            except BrokenPipeError:
                raise PipeClosed() from None
            except OSError as e:
                from engine_native.files import describe_error

                raise UserError(f"cannot write to standard output: {describe_error(e)}") from None
        elif self._stream is not None:
            self._stream.write(np.ascontiguousarray(samples, np.float32).reshape(-1, 1))
        else:
            self.kept.append(samples)

    def finish(self) -> None:
        if self._stream is not None:
            self._stream.stop()  # plays out what is queued
            self._stream.close()
        elif self.target not in (None, "-"):
            from app.core.take import ExportError, export_audio

            audio = np.concatenate(self.kept) if self.kept else np.zeros(0, np.float32)
            try:
                export_audio(audio, self.rate, self.target)
            except ExportError as e:
                raise UserError(str(e)) from None
            log(f"wrote     {self.target} ({audio.size / self.rate:.2f} s)")


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


def _read_text(args) -> str:
    if args.file and args.text:
        raise UserError("give TEXT or -f FILE, not both")
    if args.file:
        try:
            with open(args.file, encoding="utf-8") as f:
                return f.read()
        except OSError as e:
            raise UserError(f"cannot read {args.file}: {e.strerror}") from None
        except UnicodeDecodeError:
            raise UserError(f"{args.file} is not UTF-8 text") from None
    return args.text or ""


def _guarded(body) -> int:
    from engine_native import EngineError
    from engine_native.files import WriteFailed

    try:
        return body()
    except UserError as e:
        return fail(str(e))
    except EngineError as e:
        return fail(str(e))
    except WriteFailed as e:  # the one atomic writer's error already names the file and the cause
        return fail(str(e))
    except PipeClosed:
        # Like any Unix filter whose reader quit: no message; stdout goes to /dev/null so the
        # interpreter's final flush cannot complain either. 141 = 128 + SIGPIPE.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except KeyboardInterrupt:
        log("stopped")
        return 130


def cmd_say(args) -> int:
    def body() -> int:
        text = _read_text(args)
        if not text.strip():
            raise UserError("nothing to say: give TEXT or -f FILE with some text")
        check_output_target(args.output)
        engine = load_engine(args)
        voice = resolve_voice(engine, args)
        opts = stream_options(args, engine)
        seed = args.seed if args.seed is not None else int.from_bytes(os.urandom(4), "little") >> 1
        out = Output(args.output, engine.sample_rate)
        r = speak(engine, text, voice, opts, seed, out)
        out.finish()
        log(f"said      {r['audio_s']:.2f} s of audio in {r['wall_s']:.2f} s (first audio after "
            f"{r['first_audio_s']:.2f} s, RTF {r['wall_s'] / max(r['audio_s'], 1e-9):.2f}), seed {seed}")
        return 0

    return _guarded(body)


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
        from app.cli.script_cli import live_script

        script = live_script(args, engine, voice)
        out = Output(args.output, engine.sample_rate)
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

    return _guarded(body)


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

    return _guarded(body)


def add_parsers(sub) -> None:
    p = sub.add_parser("say", help="speak TEXT (or a file) to the sound card, a file, or stdout")
    p.add_argument("text", nargs="?", help="what to say")
    p.add_argument("-f", "--file", help="read the text from FILE (UTF-8)")
    p.add_argument("-o", "--output", help="OUT.wav|.flac|.ogg|.mp3, or - for raw s16le 24 kHz mono PCM on stdout; "
                   "default: play it")
    add_engine_arguments(p)
    from app.cli import script_cli

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
