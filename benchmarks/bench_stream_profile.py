"""Where a whole stream's wall time goes: T3, S3Gen and HiFT per chunk, beside the batch synthesis.

For each preset, synthesizes the bench text (n speech tokens, fixed: random weights never stop)
as a batch and as a whole stream consumed as fast as it comes, and prints each chunk's
timings as the engine reports them (t3 ms: sampling the chunk's tokens; s3gen ms: encoder +
CFM over the pass's window; hift ms) and the wall time between chunks, then the sums. With
`--threads-split`, also one T3 step and one S3Gen pass at 1 and at 2 threads (is there
room to overlap T3 and S3Gen on two cores?). Runs alternate, so a loaded machine affects
them alike; figures on a shared machine are loaded figures.

    PYTHONPATH=. python benchmarks/bench_stream_profile.py MODEL.gguf [--tokens 250] [--threads 2] [--decoder D.gguf]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from engine_native.bench import BENCH_TEXT, StageWatch
from engine_native.engine import Engine, StageTimes
from engine_native.pipeline import stages as stages_module


MODES = {  # how a stream runs T3 beside S3Gen (T3 keeps the engine's threads)
    "serial": (False, 0),        # T3 and S3Gen take turns on all the threads
    "overlap": (True, -1),       # S3Gen beside T3 with one thread fewer
    "overlap-full": (True, 0),   # S3Gen beside T3 with all the threads too
}


def set_mode(engine, mode):
    engine.stages.t3.beside_s3gen, fewer = MODES[mode]
    stages_module.S3GEN_BESIDE_T3_FEWER_THREADS = -fewer


def profile_stream(engine, preset, n, seed):
    rows, t_prev = [], time.perf_counter()
    t_start = t_prev
    first_s = None
    for c in engine.stream(BENCH_TEXT, seed=seed, max_tokens=n, **preset):
        now = time.perf_counter()
        first_s = first_s if first_s is not None else now - t_start
        t = c.timings
        rows.append((t["speech_tokens"], t["t3_ms"], t["s3gen_ms"], t["hift_ms"], (now - t_prev) * 1e3, c.samples))
        t_prev = now
    return rows, time.perf_counter() - t_start, first_s


def batch(engine, preset, n, seed):
    opts = {k: v for k, v in preset.items() if k not in ("first_chunk_tokens", "chunk_tokens")}
    watch = StageWatch({"t3_prompt", "t3_steps", "s3gen", "hift"})
    t0 = time.perf_counter()
    with engine.profile(watch):
        n_samples = engine.synthesize(BENCH_TEXT, seed=seed, max_tokens=n, **opts).size
    wall = time.perf_counter() - t0
    t = watch.ms
    return wall, t["t3_prompt"] + t["t3_steps"], t["s3gen"], t["hift"], n_samples


def threads_split(model, n, seed, decoder=None):
    """T3 ms/token and one whole S3Gen pass at 1 and 2 threads (separate engines, alternated)."""
    engines = {k: Engine(model, threads=k, decoder=decoder) for k in (1, 2)}
    for _ in range(2):
        for k, e in engines.items():
            watch = StageWatch({"t3_steps"})
            with e.profile(watch):
                tokens = e.speech_tokens(BENCH_TEXT, seed=seed, max_tokens=60)[0]
            t3 = watch.ms["t3_steps"] / max(len(tokens), 1)
            flow, times = e.stages.flow, StageTimes()
            flow.mel(flow.speech_input(tokens, True), e.builtin_voice, seed, final=True, times=times)
            s3 = times.s3gen_ms
            print(f"threads {k}: T3 {t3:6.1f} ms/token   S3Gen pass (prompt + {len(tokens)} tokens) {s3:7.0f} ms", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--tokens", type=int, default=250)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--presets", nargs="+", default=["low-latency", "quality"])
    ap.add_argument("--threads-split", action="store_true")
    ap.add_argument("--decoder", help="another model file whose S3Gen and HiFT decode (Engine's decoder)")
    ap.add_argument("--modes", nargs="+", default=["overlap"], choices=sorted(MODES),
                    help="stream modes, run one after another per preset (compare within one run)")
    a = ap.parse_args(argv)
    if a.threads_split:
        threads_split(a.model, a.tokens, a.seed, a.decoder)
        return 0
    engine = Engine(a.model, threads=a.threads, decoder=a.decoder)
    print(f"{engine.variant} {engine.info['quantization']}, {a.threads} threads, {a.tokens} tokens")
    for name in a.presets:
        preset = engine.presets[name]
        b_wall, b_t3, b_s3, b_hift, b_n = batch(engine, preset, a.tokens, a.seed)
        print(f"\n{name}: batch {b_wall:.2f} s (T3 {b_t3 / 1e3:.2f}, S3Gen {b_s3 / 1e3:.2f}, HiFT {b_hift / 1e3:.2f}), "
              f"audio {b_n / engine.sample_rate:.2f} s")
        audio = {}
        for mode in a.modes:
            set_mode(engine, mode)
            rows, wall, first = profile_stream(engine, preset, a.tokens, a.seed)
            audio[mode] = np.concatenate([r[5] for r in rows])
            print(f"[{mode}]\n{'chunk':>5} {'tokens':>6} {'t3 ms':>7} {'s3gen ms':>8} {'hift ms':>7} {'wall ms':>7} {'audio s':>7}")
            for i, (tok, t3, s3, hf, w, wav) in enumerate(rows):
                print(f"{i:>5} {tok:>6} {t3:>7.0f} {s3:>8.0f} {hf:>7.0f} {w:>7.0f} {wav.size / engine.sample_rate:>7.2f}")
            sums = np.sum([[r[1], r[2], r[3]] for r in rows], axis=0) / 1e3
            same = all(np.array_equal(audio[mode], v) for v in audio.values())
            print(f"stream [{mode}] {wall:.2f} s = {wall / b_wall:.2f}x batch (waiting for T3 {sums[0]:.2f}, S3Gen {sums[1]:.2f}, "
                  f"HiFT {sums[2]:.2f}); first audio {first:.2f} s; {len(rows)} chunks; audio same as the other modes: {same}",
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
