"""`chatterbox-studio selftest`: prove an installed or frozen app works, then exit.

Two checks, either or both in one run:

  selftest MODEL.gguf -o OUT.wav   load the model, speak a short text into OUT.wav,
                                   read it back, print timings
  selftest --window                open the main window (QT_QPA_PLATFORM=offscreen works
                                   without a display), wait until it is shown, close it

Exit 0 when every requested check passed; 1 with a `selftest: FAILED: ...` line otherwise.
The packaged app's smoke test (packaging/smoke_test.sh) runs exactly these checks.
Nothing here is imported until the subcommand runs, so the CLI stays light and Qt-free.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

DEFAULT_TEXT = "Hello from Chatterbox Studio. This is the self test."


class SelftestError(Exception):
    """A check failed; the message says which and why."""


def add_parser(sub) -> None:
    """Register the `selftest` subcommand on the CLI's subparsers."""
    p = sub.add_parser("selftest", help="check this installation: synthesize with MODEL into a WAV, "
                       "and/or open the main window, then exit (0 = all good)")
    p.add_argument("model", nargs="?", help="a model .gguf to synthesize with")
    p.add_argument("-o", "--output", help="the .wav to write (default: selftest.wav in the working folder)")
    p.add_argument("--text", default=DEFAULT_TEXT, help="what to say")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-tokens", type=int, default=25, help="speech token budget (25 per second; default 25)")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (default: all)")
    p.add_argument("--window", action="store_true", help="open the main window, wait until it is shown, close it")
    p.add_argument("--window-timeout", type=float, default=20.0, metavar="SEC",
                   help="how long the window may take to appear (default 20)")
    p.add_argument("--screenshot", metavar="PNG", help="with --window: save what the window shows")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not args.model and not args.window:
        print("selftest: nothing to check: give a MODEL.gguf and/or --window", file=sys.stderr)
        return 2
    t_start = time.perf_counter()
    _say(f"chatterbox-studio selftest ({'frozen app' if getattr(sys, 'frozen', False) else 'python'} "
         f"{sys.version.split()[0]}, {sys.executable})")
    try:
        _report_ffmpeg()
        if args.model:
            _synthesis_check(args)
        if args.window:
            from app.qt.selftest_window import window_check  # Qt only for this check

            window_check(args, SelftestError, _say)
    except SelftestError as e:
        print(f"selftest: FAILED: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001  a self-test reports anything that breaks, with where
        import traceback

        traceback.print_exc()
        print(f"selftest: FAILED: unexpected {type(e).__name__}: {e}", file=sys.stderr)
        return 1
    _say(f"selftest: OK in {time.perf_counter() - t_start:.1f} s")
    return 0


def _say(line: str) -> None:
    print(line, flush=True)


def _report_ffmpeg() -> None:
    """ffmpeg is optional (WAV/FLAC/OGG decode without it), so its absence is reported, not failed."""
    import shutil

    from voice_lab.decode import ffmpeg_available

    if ffmpeg_available():
        _say(f"ffmpeg            {shutil.which('ffmpeg')}")
    else:
        _say("ffmpeg            not found: recordings other than WAV/FLAC/OGG cannot be opened. "
             "Install it (Debian/Ubuntu: sudo apt install ffmpeg; macOS: brew install ffmpeg; "
             "Windows: put ffmpeg.exe and ffprobe.exe beside the app) and start the app again.")


# --- synthesis -----------------------------------------------------------------


def _synthesis_check(args: argparse.Namespace) -> None:
    import numpy as np
    import soundfile as sf

    t0 = time.perf_counter()
    import engine_native

    _say(f"engine            ggml {engine_native.ggml_version()}, imported in {_ms(t0)}")
    if not os.path.isfile(args.model):
        raise SelftestError(f"model {args.model}: no such file")
    out = os.path.abspath(args.output or "selftest.wav")

    t0 = time.perf_counter()
    synth, sample_rate, what = _load(args.model, args.threads)
    _say(f"model             {args.model} ({what}), loaded in {_ms(t0)}")

    t0 = time.perf_counter()
    samples, detail = synth(args.text, args.seed, args.max_tokens)
    synth_s = time.perf_counter() - t0
    samples = np.asarray(samples, dtype=np.float32).reshape(-1)
    if samples.size == 0:
        raise SelftestError("the engine returned no audio")
    if not np.isfinite(samples).all():
        raise SelftestError("the engine returned non-finite samples")
    audio_s = samples.size / sample_rate
    _say(f"synthesis         {audio_s:.2f} s of audio in {synth_s:.1f} s "
         f"(real-time factor {synth_s / audio_s:.2f}){detail}")

    t0 = time.perf_counter()
    # 16-bit PCM: the WAV flavour every player opens.
    sf.write(out, np.clip(samples, -1.0, 1.0), sample_rate, subtype="PCM_16")
    back, rate = sf.read(out, dtype="float32")
    if rate != sample_rate or back.size != samples.size:
        raise SelftestError(f"{out} reads back as {back.size} samples at {rate} Hz, "
                            f"expected {samples.size} at {sample_rate} Hz")
    _say(f"wrote             {out} ({rate} Hz, {back.size} samples, {os.path.getsize(out)} bytes) in {_ms(t0)}")


def _load(model: str, threads: int):
    """(synthesize(text, seed, max_tokens) -> (samples, detail), sample_rate, description).
    Loading errors surface as SelftestError with the engine's own message."""
    import engine_native

    try:
        engine = engine_native.Engine(model, threads=threads or None, device=os.environ.get("CBS_DEVICE", "auto"))
    except engine_native.EngineError as e:
        raise SelftestError(f"cannot load {model}: {e}") from None
    info = engine.info

    def synth(text, seed, max_tokens):
        return engine.synthesize(text, seed=seed, max_tokens=max_tokens), ""

    return synth, engine.sample_rate, f"{info.get('variant')} {info.get('quantization')}, Engine"


def _ms(t0: float) -> str:
    return f"{(time.perf_counter() - t0) * 1e3:.0f} ms"
