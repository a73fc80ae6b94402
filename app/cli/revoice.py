"""`chatterbox-studio revoice SOURCE -m MODEL (--voice V.voice.gguf | --ref REC) -o OUT`: a
recording spoken again in another voice (Engine.revoice_stream, ChatterboxVC's path).

The source is decoded by the hardened decoder (voice_lab.decode, as `bake` and `--ref` decode
a recording). The audio goes where `say`'s goes (app.cli.common.Output: WAV/FLAC/OGG/MP3 by
extension, `-o -` raw s16le PCM streamed chunk by chunk, none: the sound card). Progress on
stderr for a file; Ctrl-C stops and keeps what is converted so far (a file gets it, named in
the log), exit status 130.
"""

from __future__ import annotations

import sys
import time

from app.cli.common import (
    Output,
    UserError,
    add_engine_arguments,
    add_option_argument,
    check_output_target,
    guarded,
    load_engine,
    log,
    resolve_voice,
)


def decode_source(path: str):
    """(samples, rate) of any recording ffmpeg reads; UserError naming what is wrong with it."""
    from app.core.revoice import SourceUnreadable
    from app.core.revoice import decode_source as decode

    try:
        return decode(path)
    except SourceUnreadable as e:
        raise UserError(str(e)) from None


class SourceProgress:
    """Seconds of the source converted, on stderr: a line redrawn on a terminal, else a line
    every LINE_EVERY_SECONDS of the source and one at the end."""

    LINE_EVERY_SECONDS = 10.0

    def __init__(self, total_s: float, mode: str, stream=None):
        self.stream = stream or sys.stderr
        tty = getattr(self.stream, "isatty", lambda: False)()
        self.mode = ("bar" if tty else "lines") if mode == "auto" else mode
        self.total_s, self.t0, self.shown_s = total_s, time.perf_counter(), 0.0

    def show(self, done_s: float, *, final: bool = False) -> None:
        from app.core.long_render import format_eta

        if self.mode == "none" or (self.mode == "lines" and not final
                                   and done_s < self.shown_s + self.LINE_EVERY_SECONDS):
            return
        self.shown_s = done_s
        fraction = min(1.0, done_s / self.total_s) if self.total_s else 1.0
        wall = time.perf_counter() - self.t0
        eta = "done" if final else f"ETA {format_eta(wall / fraction * (1 - fraction) if fraction else None)}"
        text = f"{done_s:7.1f}/{self.total_s:.1f} s of the source  {100 * fraction:5.1f}%  {eta}"
        if self.mode == "bar":
            self.stream.write(f"\r{text}\x1b[K" + ("\n" if final else ""))
        else:
            self.stream.write(f"progress  {text}\n")
        self.stream.flush()


def cmd_revoice(args) -> int:
    def body() -> int:
        check_output_target(args.output)
        samples, rate = decode_source(args.source)
        engine = load_engine(args)
        voice = resolve_voice(engine, args)
        opts = {k: getattr(args, k) for k in ("seed", "cfm_steps", "prompt_seconds", "first_chunk_tokens",
                                              "chunk_tokens") if getattr(args, k) is not None}
        stream = engine.revoice_stream(samples, rate, voice, **opts)
        file_out = args.output not in (None, "-")
        out = Output(args.output, engine.sample_rate)
        total_s = samples.shape[0] / rate
        progress = SourceProgress(total_s, args.progress if file_out else "none")
        t0, first_audio, done, stopped = time.perf_counter(), None, 0, False
        try:
            for chunk in stream:
                first_audio = first_audio or time.perf_counter() - t0
                out.write(chunk.samples)
                done += chunk.samples.size
                progress.show(done / engine.sample_rate, final=chunk.is_last)
        except KeyboardInterrupt:
            stopped = True
            if progress.mode == "bar":
                progress.stream.write("\n")
        finally:
            stream.close()
        audio_s, wall = done / engine.sample_rate, time.perf_counter() - t0
        if stopped:
            log(f"stopped   after {audio_s:.2f} of {total_s:.2f} s; "
                + (f"keeping what is done in {args.output}" if file_out else "nothing more is written"))
        out.finish()
        log(f"revoiced  {audio_s:.2f} s of audio in {wall:.2f} s (first audio after {first_audio or wall:.2f} s, "
            f"RTF {wall / max(audio_s, 1e-9):.2f})")
        return 130 if stopped else 0

    return guarded(body)


def add_parser(sub) -> None:
    p = sub.add_parser("revoice", help="speak a recording again in another voice (the same words and timing)")
    p.add_argument("source", help="the recording to re-voice (any format ffmpeg reads)")
    p.add_argument("-o", "--output", help="OUT.wav|.flac|.ogg|.mp3, or - for raw s16le 24 kHz mono PCM on stdout; "
                   "default: play it")
    add_engine_arguments(p, sampling=False)
    g = p.add_argument_group("voice")
    g.add_argument("--voice", metavar="V.voice.gguf", help="the target voice (default: the model's own)")
    g.add_argument("--ref", metavar="AUDIO", help="clone the target voice from this recording first")
    add_option_argument(g, "seed", default=None, help="same seed, same audio (default: random)")
    for name in ("cfm_steps", "prompt_seconds", "first_chunk_tokens", "chunk_tokens"):
        add_option_argument(g, name)
    p.add_argument("--progress", choices=("auto", "bar", "lines", "none"), default="auto",
                   help="progress on stderr for a file output: a redrawn line on a terminal, else a line "
                        "every 10 s of the source (auto)")
    p.set_defaults(func=cmd_revoice)
