"""`chatterbox-studio detect FILE...`: does a recording carry the Perth watermark that the
engine (and the official chatterbox-tts) put on what they make? (app.core.watermark_check)

One line a file: `PATH: marked (confidence 1.00)` or `PATH: not marked (confidence 0.00)`,
the confidence being the mean of the detector's rounded bits as the official `perth` CLI
prints it; a file that cannot be read gets one line saying why. The exit code is 0 when every
file was read, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys


def _cmd_detect(args: argparse.Namespace) -> int:
    from app.core.watermark_check import CheckError, check_recording, watermarker
    from engine_native import EngineError

    try:
        wm = watermarker(args.watermark_model)
    except EngineError as e:
        print(f"chatterbox-studio: error: {e}", file=sys.stderr)
        return 1
    failed = 0
    for path in args.files:
        try:
            print(f"{path}: {check_recording(path, wm).text}", flush=True)
        except CheckError as e:
            failed += 1
            message = str(e)
            print(message if message.startswith(path) else f"{path}: {message}", flush=True)
    return 1 if failed else 0


def add_parser(sub) -> None:
    p = sub.add_parser("detect", help="check recordings for the Perth watermark the engine puts on its audio")
    p.add_argument("files", nargs="+", metavar="FILE", help="any audio (or video) file ffmpeg can read")
    p.add_argument("--watermark-model", metavar="perth.gguf",
                   help="the watermark model (default: $CBS_WATERMARK_MODEL, else the app's data folder)")
    p.set_defaults(func=_cmd_detect)
