"""Memory of a session: peak RSS synthesising with the built-in voice, then cloning a 10 s
recording (espeak-ng speech, tests/helpers/audio_fixtures.py), then after the cloning encoders are
released (Engine.release_voice_encoders, what the idle timer does), and a second clone
(the encoders load again). Each figure from /proc/self/status (VmRSS, VmHWM) of one process.

    PYTHONPATH=. python benchmarks/bench_memory.py MODEL.gguf [--tokens 150]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import numpy as np

from engine_native import Engine


def _status_mb(key: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=150)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args(argv)
    from tests.helpers.audio_fixtures import ESPEAK_RATE, speech_stream

    e = Engine(a.model, threads=a.threads)
    row = lambda name: print(f"  {name:<34} RSS {_status_mb('VmRSS'):7.0f} MB   peak {_status_mb('VmHWM'):7.0f} MB",
                             flush=True)
    print(f"{e.variant} {e.info['quantization']}, {a.threads} threads, {a.tokens} speech tokens")
    row("loaded")
    e.synthesize("The quick brown fox jumps over the lazy dog.", seed=0, max_tokens=a.tokens)
    row("synthesised (built-in voice)")
    with tempfile.TemporaryDirectory() as td:
        rec = speech_stream(td)[: 10 * ESPEAK_RATE].astype(np.float32)
    t0 = time.perf_counter()
    e.voice_from_audio(rec, ESPEAK_RATE)
    print(f"  clone of a 10 s recording: {time.perf_counter() - t0:.2f} s")
    row("cloned")
    freed = e.release_voice_encoders()
    row(f"encoders released ({freed / 2**20:.0f} MB)")
    t0 = time.perf_counter()
    e.voice_from_audio(rec, ESPEAK_RATE)
    print(f"  second clone (encoders load again): {time.perf_counter() - t0:.2f} s")
    row("cloned again")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
