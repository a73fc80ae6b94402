"""What the speaking commands share (`say`, `live`, `bake`: app.cli.speak and app.cli.script_cli):
errors and logging, the engine / voice / sampling arguments, loading the engine and the voice,
and where the audio goes (a file, raw PCM on stdout, or the sound card).

Speech is watermarked (the engine's default; `--no-watermark` turns it off). Audio goes to a
file (WAV/FLAC/OGG/MP3 by extension, written atomically, with its provenance in the tags), to
stdout as raw
s16le 24 kHz mono PCM (`-o -`, flushed chunk by chunk: pipe it into `aplay`/`ffplay`/
`play`), or without `-o` to the sound card. Logs go to stderr, so stdout stays clean.
"""

from __future__ import annotations

import argparse
import os
import sys
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
    add_decoder_argument(p)
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
    add_watermark_argument(g)
    add_multilingual_arguments(p)


WATERMARK_NOTE = ("on by default: it marks generated speech as machine-made (Resemble AI's Perth watermark), as the "
                  "official Chatterbox does; `chatterbox-studio detect` finds it")


def add_watermark_argument(group) -> None:
    group.add_argument("--no-watermark", action="store_true",
                       help=f"do not watermark the speech ({WATERMARK_NOTE})")


def marks_speech(args) -> bool:
    """Whether this command's engine watermarks: commands that speak do unless --no-watermark;
    the others (bake, lab) speak nothing and need no watermark model."""
    return hasattr(args, "no_watermark") and not args.no_watermark


def add_multilingual_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("Multilingual models")
    g.add_argument("--language", metavar="CODE",
                   help="the text's language (ar da de el en es fi fr he hi it ja ko ms nl no pl pt ru sv sw tr zh; "
                   "default: detected from the text). `info MODEL` lists a model's languages")
    for name in schema.MTL:
        add_option_argument(g, name)


def add_decoder_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--decoder", metavar="MODEL.gguf",
                   help="decode the model's speech with this model's S3Gen and HiFT instead of its own: a Turbo "
                   "or Nano file gives the Multilingual model Turbo's 1-2 step decoder (several times faster; "
                   "the decoder's sound, not the Multilingual S3Gen's)")


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
    from app.core.speaker_identity import equip
    from engine_native import Engine

    if getattr(args, "voice", None):  # a wrong --voice is told before the model takes seconds to load
        check_voice_file(args.voice)
    t0 = time.perf_counter()
    engine = Engine(args.model, device=getattr(args, "device", "auto"), threads=args.threads,
                    watermark=marks_speech(args), decoder=getattr(args, "decoder", None))
    log(f"model     {args.model} ({engine.variant} {engine.info['quantization']}, on {engine.device}, loaded in "
        f"{(time.perf_counter() - t0):.1f} s)" + ("" if engine.watermark or not hasattr(args, "no_watermark")
                                                 else "; not watermarking (--no-watermark)"))
    if engine.info["decoder"]:
        log(f"decoder   {engine.info['decoder']} (its S3Gen and HiFT, {engine.defaults['cfm_steps']} CFM steps)")
    if engine.device_note:
        log(f"device    {engine.device_note}")
    return equip(engine)


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
        check_voice_file(args.voice)
        voice = Voice.load(args.voice)
        engine.check_voice(voice)
        log(f"voice     {voice.name} ({args.voice})")
        return voice
    if args.ref:
        return clone_from_file(engine, args.ref)
    return None


def check_voice_file(path: str) -> None:
    """UserError for a --voice that is not a voice file, with what to use instead: a recording
    is cloned with --ref, or baked into a voice once."""
    from app.core.open_files import RECORDING, kind_by_name
    from engine_native.gguf_header import is_gguf

    if not os.path.isfile(path) or is_gguf(path):
        return  # Voice.load names a missing or damaged voice file
    if kind_by_name(path) == RECORDING or _sounds_like_audio(path):
        raise UserError(f"{path} is a recording, not a voice file: use --ref {path} to clone its voice for "
                        f"this run, or make a voice once: chatterbox-studio bake {path} -m MODEL -o NAME.voice.gguf")
    raise UserError(f"{path} is not a voice file: --voice takes a .voice.gguf (made by `bake` or the app's "
                    "Voice Lab); --ref takes a recording")


def _sounds_like_audio(path: str) -> bool:
    """The container magics of the common audio formats (a recording under an odd name)."""
    try:
        with open(path, "rb") as f:
            head = f.read(12)
    except OSError:
        return False
    return (head[:4] in (b"RIFF", b"fLaC", b"OggS", b"FORM", b"caff") or head[:3] == b"ID3"
            or head[4:8] == b"ftyp" or head[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf1", b"\xff\xf9"))


def stream_options(args, engine) -> dict:
    opts = dict(engine.presets[args.preset])
    for k in SAMPLING_OPTIONS + ("first_chunk_tokens", "chunk_tokens") + MULTILINGUAL_OPTIONS:
        if getattr(args, k, None) is not None:
            opts[k] = getattr(args, k)
    return opts

def provenance(engine, voices):
    """The tags of the files a command writes (app.core.provenance): `voices` as
    app.core.provenance.voice_names takes them."""
    from app.core.provenance import Provenance, voice_names

    return Provenance.of(engine, voice_names(voices, engine.builtin_voice.name))


class Output:
    """Where chunks go: stdout PCM, the sound card, or memory (for a file at the end, tagged
    with `provenance`)."""

    def __init__(self, target: str | None, rate: int, provenance=None):
        self.target, self.rate, self.kept = target, rate, []
        self.provenance = provenance
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
            from app.core.take import to_s16le

            try:
                sys.stdout.buffer.write(to_s16le(samples))
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
                export_audio(audio, self.rate, self.target, self.provenance)
            except ExportError as e:
                raise UserError(str(e)) from None
            log(f"wrote     {self.target} ({audio.size / self.rate:.2f} s)")


def read_text(args) -> str:
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


def guarded(body) -> int:
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
