"""Re-voicing speed and memory: Engine.revoice vs the reference's ChatterboxVC.generate on the
same weights, first streamed audio, peak memory of a long source, and the join between segments.

    .venv/bin/python benchmarks/bench_revoice.py [--variant turbo] [--threads 2] [--seconds 10]
        [--stream-seconds 60] [--long-seconds 600] [--repeat 2]

The source is real speech: codec2's 11 s reading, then pyannote's 30 s conversation, repeated
to the length asked (tests/helpers/real_speech.py). Prints, asserting nothing:
- conversion of a `--seconds` source: ours (best of `--repeat`, warm) and ChatterboxVC.generate
  (the reference venv, torch.set_num_threads(threads), its watermark left out), the model's
  built-in voice, Turbo's meanflow S3Gen by default;
- first streamed audio of a `--stream-seconds` source (Engine.revoice_stream, default chunking):
  from the call to the first chunk, tokenizing its first segment included;
- peak RSS of a process that streams a `--long-seconds` source through (a child process, so
  the figure is the conversion's alone; 0 skips it);
- the join: a source over revoice.SEGMENT_SECONDS converted in segments against one pass, the
  log-mel distance (mean |difference| of the 80-band log mel, 24 kHz) within 0.2 s of each cut
  and elsewhere, and the distance of two seeds' whole conversions as the scale of "different".
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests.* (the oracle), after site-packages

import numpy as np  # noqa: E402

from engine_native import Engine, debug  # noqa: E402
from engine_native.pipeline import revoice  # noqa: E402
from tests.helpers import real_speech  # noqa: E402
from tests.helpers.models import model_path  # noqa: E402
from tests.reference.cache import snapshot_dir  # noqa: E402
from tests.reference.runner import run_stage  # noqa: E402

RATE = 16000

_LONG = """
import resource, sys, numpy as np
from engine_native import Engine
x = np.load(sys.argv[2])
e = Engine(sys.argv[1], threads=int(sys.argv[3]))
n = sum(c.samples.size for c in e.revoice_stream(x, 16000, seed=1))
print(n, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""


def speech(seconds: float) -> np.ndarray:
    a, _ = real_speech.read(real_speech.pyannote_sample()[0], rate=RATE)
    b, _ = real_speech.read(real_speech.codec2("raw/speech_orig_16k.wav"), rate=RATE)
    one = np.concatenate([b, a])
    n = int(seconds * RATE)
    return np.ascontiguousarray(np.tile(one, n // one.size + 1)[:n], np.float32)


def log_mel(model, wav: np.ndarray) -> np.ndarray:
    return debug.mel_24k(model, wav)  # [frames, 80], S3Gen's log mel (its prompt_feat)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", default="turbo", choices=("turbo", "mtl"))
    ap.add_argument("--size", default="full", help="the test model's size (mtl: small or full)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--stream-seconds", type=float, default=60.0)
    ap.add_argument("--long-seconds", type=float, default=600.0)
    ap.add_argument("--join-seconds", type=float, default=45.0)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    model = model_path(args.variant, size=args.size)
    snap = snapshot_dir(args.variant, size=args.size)
    engine = Engine(model, threads=args.threads)
    print(f"model {model.name} ({engine.variant}, {engine.info['hparams']['cfm_steps']} CFM steps), "
          f"threads {args.threads}")

    src = speech(args.seconds)
    engine.revoice(src[: 2 * RATE], RATE, seed=0)  # warm
    ours = float("inf")
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        out = engine.revoice(src, RATE, seed=0)
        ours = min(ours, time.perf_counter() - t0)
    ref = run_stage("vc_bench", snap, wav=src, sr=np.asarray(RATE), variant=np.array(args.variant),
                    threads=np.asarray(args.threads), repeat=np.asarray(args.repeat))
    ref_s = float(ref["ms"]) / 1e3
    print(f"convert {args.seconds:g} s: ours {ours:.2f} s (RTF {ours / args.seconds:.2f}), ChatterboxVC.generate "
          f"{ref_s:.2f} s (RTF {ref_s / args.seconds:.2f}): {ref_s / ours:.2f}x; out {out.size / engine.sample_rate:.2f} s")

    long_src = speech(args.stream_seconds)
    t0 = time.perf_counter()
    stream = engine.revoice_stream(long_src, RATE, seed=0)
    first = next(iter(stream))
    first_s = time.perf_counter() - t0
    stream.close()
    print(f"first streamed audio of a {args.stream_seconds:g} s source: {first_s:.2f} s "
          f"({first.samples.size / engine.sample_rate:.2f} s of audio in it)")

    if args.long_seconds > 0:
        import tempfile

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "long.npy"
            np.save(path, speech(args.long_seconds))
            t0 = time.perf_counter()
            r = subprocess.run([sys.executable, "-c", _LONG, str(model), str(path), str(args.threads)],
                               capture_output=True, text=True, check=True)
            n, rss = map(int, r.stdout.split())
        print(f"stream a {args.long_seconds:g} s source through: peak RSS {rss / 2**20:.0f} MiB, "
              f"{time.perf_counter() - t0:.1f} s, {n / engine.sample_rate:.1f} s of audio")

    if args.join_seconds > revoice.SEGMENT_SECONDS:
        src = speech(args.join_seconds)
        cuts = [b for _, b in revoice.segments(src, engine.stages.config)][:-1]
        segmented = engine.revoice(src, RATE, seed=0)
        saved, revoice.SEGMENT_SECONDS = revoice.SEGMENT_SECONDS, int(args.join_seconds) + 1
        try:
            whole = engine.revoice(src, RATE, seed=0)
            other = engine.revoice(src, RATE, seed=1)
        finally:
            revoice.SEGMENT_SECONDS = saved
        a, b, c = log_mel(model, segmented), log_mel(model, whole), log_mel(model, other)
        n = min(len(a), len(b), len(c))
        d = np.mean(np.abs(a[:n] - b[:n]), axis=1)
        fps = n / (segmented.size / engine.sample_rate)
        near = np.zeros(n, bool)
        for cut in cuts:
            f = int(cut / RATE * fps)
            near[max(0, f - int(0.2 * fps)):f + int(0.2 * fps)] = True
        print(f"join ({len(cuts)} cut(s) at {', '.join(f'{x / RATE:.2f}' for x in cuts)} s): log-mel distance to one "
              f"pass {d[near].mean():.3f} within 0.2 s of a cut, {d[~near].mean():.3f} elsewhere; two seeds of one "
              f"pass {np.mean(np.abs(b[:n] - c[:n])):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
