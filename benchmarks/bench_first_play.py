"""The app's first Play: a fresh engine, the voice readied as the app readies it when a model
loads or a voice is chosen (`Engine.prepare_stream`), then a stream of the bench's text: ms of
the readying and to the stream's first chunk, with T3's conditioning prefix readied too (the
default) and without it (`t3=False`, as before it was). A process per run (a fresh engine each),
the two alternating.

    PYTHONPATH=. python benchmarks/bench_first_play.py MODEL.gguf [--preset quality] [--rounds 2] [--language en]
"""

from __future__ import annotations

import argparse
import subprocess
import sys

CHILD = r"""
import sys, time
from engine_native import Engine
from engine_native.bench import BENCH_TEXT
model, preset, language, t3 = sys.argv[1], sys.argv[2], sys.argv[3] or None, sys.argv[4] == "1"
e = Engine(model, threads=int(sys.argv[5]))
p = e.presets[preset]
t = time.perf_counter(); list(e.prepare_stream(**p, t3=t3)); ready = time.perf_counter() - t
t = time.perf_counter(); it = e.stream(BENCH_TEXT, seed=0, language=language, **p); next(it); first = time.perf_counter() - t
it.close()
print(f"{ready * 1e3:.0f} {first * 1e3:.0f}")
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--preset", default="quality", choices=("quality", "low-latency"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--language", default="", help="a Multilingual model's language (default: detected)")
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    for r in range(args.rounds):
        for t3, label in (("0", "S3Gen's prefix only"), ("1", "with T3's prefix")):
            res = subprocess.run([sys.executable, "-c", CHILD, args.model, args.preset, args.language, t3,
                                  str(args.threads)], capture_output=True, text=True)
            if res.returncode != 0:
                raise SystemExit(res.stderr[-2000:])
            ready, first = res.stdout.split()
            print(f"round {r}, {args.preset}, {label:<20}: readied in {ready} ms, first audio {first} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
