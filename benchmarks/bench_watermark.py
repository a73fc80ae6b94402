"""The Perth watermark's cost: marking 10 s of 24 kHz speech and checking 60 s, ours and the
official package's (tests/reference/stages_perth.py, perth_time) in the same run, on the same
thread count; with -m MODEL also the engine's time to synthesise about as much audio, and the
watermark's share of it (the target: marking at most 5 % of synthesis, detection of 60 s in
under 1 s, on two cores).

    PYTHONPATH=. .venv/bin/python benchmarks/bench_watermark.py [--threads 2] [--repeats 3]
        [--watermark-model perth.gguf] [-m chatterbox-turbo-q4_0.gguf] [--no-reference]

Prints one line per measurement (best of --repeats, seconds).
"""
from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from tests.helpers.speech_samples import real_speech

TEXT = ("The watermark is written into every sentence the engine speaks, so that anyone who "
        "receives the recording can later check where it came from. It costs very little.")


def best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def watermark_model(path: str | None) -> str:
    if path:
        return path
    try:
        from engine_native.watermark import find_model

        return str(find_model())
    except Exception:  # noqa: BLE001 - fall back to converting the reference venv's package
        from engine_native.convert.perth import convert_perth
        from tests.reference import refenv

        src = sorted((refenv.ref_venv() / "lib").glob("python3*/site-packages/perth/perth_net/pretrained/implicit"))
        out = Path(tempfile.mkdtemp(prefix="cbs-bench-perth-")) / "perth.gguf"
        convert_perth(src[0], out, log=None)
        return str(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--watermark-model", help="perth.gguf (default: find_model(), else converted from .venv-ref)")
    ap.add_argument("-m", "--model", help="a Chatterbox model: also time synthesising ~10 s with it")
    ap.add_argument("--no-reference", action="store_true", help="skip the official package's timings")
    a = ap.parse_args(argv)

    from engine_native.watermark import Watermarker

    wm = Watermarker(watermark_model(a.watermark_model), threads=a.threads)
    x10, x60 = real_speech(10.0, 24000), real_speech(60.0, 24000)
    wm.apply(x10[:24000], 24000)   # warm-up
    apply_s = best(lambda: wm.apply(x10, 24000), a.repeats)
    detect_s = best(lambda: wm.detect(x60, 24000), a.repeats)
    print(f"ours       apply 10 s: {apply_s:.3f} s   detect 60 s: {detect_s:.3f} s (target < 1 s)   "
          f"({a.threads} threads)")
    if not a.no_reference:
        from tests.reference import refenv
        from tests.reference.runner import run_stage

        r = run_stage("perth_time", refenv.REPO_ROOT, samples=x10, detect_samples=x60,
                      sample_rate=np.asarray(24000), threads=np.asarray(a.threads), repeats=np.asarray(a.repeats))
        print(f"reference  apply 10 s: {float(r['apply_s']):.3f} s   detect 60 s: {float(r['detect_s']):.3f} s   "
              f"(torch, {a.threads} threads)")
    if a.model:
        from engine_native import Engine

        # the synthesis the mark is measured against is the engine's own, unmarked; then the
        # same request marked, as the app runs it (the mark per sentence, in the engine)
        engine = Engine(a.model, threads=a.threads, watermark=False)
        engine.synthesize("Warm up.", seed=1, max_tokens=25)
        audio = []
        synth_s = best(lambda: audio.append(engine.synthesize(TEXT, seed=1, max_tokens=250)), a.repeats)
        seconds = len(audio[-1]) / engine.sample_rate
        per10 = synth_s * 10.0 / seconds
        engine.watermark = True
        marked_s = best(lambda: engine.synthesize(TEXT, seed=1, max_tokens=250), a.repeats)
        print(f"engine     synthesis ({engine.variant} {engine.info['quantization']}, unmarked): {synth_s:.3f} s for "
              f"{seconds:.1f} s of audio ({per10:.3f} s per 10 s); marking 10 s is {100 * apply_s / per10:.1f} % "
              f"of that (target <= 5 %)")
        print(f"engine     synthesis marked: {marked_s:.3f} s ({100 * (marked_s / synth_s - 1):+.1f} % over unmarked)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
