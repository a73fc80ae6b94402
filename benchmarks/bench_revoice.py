"""Re-voicing speed and memory: Engine.revoice vs the reference's ChatterboxVC.generate on the
same weights, first streamed audio, peak memory of a long source, and the joins between segments.

    .venv/bin/python benchmarks/bench_revoice.py [--variant turbo] [--quant f32] [--threads 2]
        [--seconds 10] [--stream-seconds 60] [--long-seconds 600] [--join-seconds 45]
        [--first-join-seconds 20] [--repeat 2]      (0 seconds: that part is skipped)

The source is real speech: codec2's 11 s reading, then pyannote's 30 s conversation, repeated
to the length asked (tests/helpers/real_speech.py). Prints, asserting nothing:
- the model, its quantisation and the kernels its S3Gen products take: an F32 model's run in
  exact f32 (the parity mode), a quantised model's in the CPU's `fast` products (cpu/products.h);
  the S3Tokenizer's and HiFT's weights are F32 in every model (the tokenizer's products follow S3Gen's);
- conversion of a `--seconds` source: ours (best of `--repeat`, warm, unmarked) and
  ChatterboxVC.generate (the reference venv, torch.set_num_threads(threads), its watermark left
  out), each with its stages (tokenize, S3Gen encoder, CFM, HiFT; ours: the run's Chunk.stages
  and `Engine.profile`), the model's built-in voice, Turbo's meanflow S3Gen by default;
- first streamed audio of a `--stream-seconds` source (Engine.revoice_stream, default chunking,
  marked as the app's streams are): from the call to the first chunk, its stages, on the voice's
  first stream (its cached stream prefix made then) and with the voice readied first
  (Engine.prepare_stream, as the app readies the chosen voice);
- peak RSS of a process that streams a `--long-seconds` source through (a child process, so
  the figure is the conversion's alone; 0 skips it);
- the joins, as log-mel distance (mean |difference| of the 80-band log mel, 24 kHz) to one pass
  over the whole source, within 0.2 s of each cut and elsewhere, with the distance of two seeds'
  one-pass conversions as the scale of "different": a source over revoice.SEGMENT_SECONDS
  converted in its segments (`--join-seconds`), and a stream's early first cut
  (revoice.FIRST_SEGMENT_SECONDS) on a `--first-join-seconds` source, its two segments each
  converted whole (the cut alone) and the stream itself (the cut and the stream's windows).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parents[1]))  # tests.* (the oracle), after site-packages

import numpy as np  # noqa: E402

from app.cli.bench import _kernels_line  # noqa: E402
from engine_native import Engine, debug  # noqa: E402
from engine_native.bench import StageWatch  # noqa: E402
from engine_native.pipeline import revoice  # noqa: E402
from engine_native.pipeline.concurrency import CancelToken  # noqa: E402
from engine_native.pipeline.scheduler import ChunkPlan  # noqa: E402
from tests.helpers import real_speech  # noqa: E402
from tests.helpers.models import model_path  # noqa: E402
from tests.reference.cache import snapshot_dir  # noqa: E402
from tests.reference.runner import run_stage  # noqa: E402

RATE = 16000
# Our stages as the reference's are timed (s3gen: the encoder and the CFM with their glue).
OUR_STAGES = ("tokenize", "encoder", "cfm", "hift", "watermark")

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


def stages_line(ms: dict, total_ms: float, names=OUR_STAGES) -> str:
    """'tokenize 0.41 s (8 %), ...' and what the named stages leave of total_ms."""
    parts = [f"{k} {ms.get(k, 0.0) / 1e3:.2f} s ({100 * ms.get(k, 0.0) / total_ms:.0f} %)" for k in names
             if ms.get(k, 0.0) > 0]
    rest = total_ms - sum(ms.get(k, 0.0) for k in names)
    return ", ".join(parts + [f"other {rest / 1e3:.2f} s ({100 * rest / total_ms:.0f} %)"])


def join_distance(model, label: str, cuts: list[int], converted: np.ndarray, whole: np.ndarray,
                  other: np.ndarray, sample_rate: int) -> None:
    """Prints the log-mel distance of `converted` to the one-pass `whole` within 0.2 s of each
    cut (16 kHz source samples) and elsewhere, and of two seeds' one-pass conversions."""
    a, b, c = log_mel(model, converted), log_mel(model, whole), log_mel(model, other)
    n = min(len(a), len(b), len(c))
    d = np.mean(np.abs(a[:n] - b[:n]), axis=1)
    fps = n / (converted.size / sample_rate)
    near = np.zeros(n, bool)
    for cut in cuts:
        f = int(cut / RATE * fps)
        near[max(0, f - int(0.2 * fps)):f + int(0.2 * fps)] = True
    print(f"join, {label} ({len(cuts)} cut(s) at {', '.join(f'{x / RATE:.2f}' for x in cuts)} s): log-mel distance "
          f"to one pass {d[near].mean():.3f} within 0.2 s of a cut, {d[~near].mean():.3f} elsewhere; two seeds of "
          f"one pass {np.mean(np.abs(b[:n] - c[:n])):.3f}")


def convert(engine: Engine, src: np.ndarray, repeat: int) -> tuple[float, dict, np.ndarray]:
    """Ours: the best of `repeat` conversions (s), that run's stages (ms) and its output."""
    best, best_ms, out = float("inf"), {}, None
    for _ in range(repeat):
        watch = StageWatch(OUR_STAGES)
        t0 = time.perf_counter()
        with engine.profile(watch):
            out = engine.revoice(src, RATE, seed=0)
        s = time.perf_counter() - t0
        if s < best:
            best, best_ms = s, dict(watch.ms)
    return best, best_ms, out


def first_audio(engine: Engine, src: np.ndarray, readied: bool) -> str:
    if readied:
        list(engine.prepare_stream())
    else:
        engine.release_stream_prefixes()
    t0 = time.perf_counter()
    stream = engine.revoice_stream(src, RATE, seed=0)
    first = next(iter(stream))
    ms = (time.perf_counter() - t0) * 1e3
    stream.close()
    spent = {k: first.timings[f"{k}_ms"] for k in OUR_STAGES}
    return f"{ms / 1e3:.2f} s ({first.samples.size / engine.sample_rate:.2f} s of audio; {stages_line(spent, ms)})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variant", default="turbo", choices=("turbo", "mtl"))
    ap.add_argument("--size", default="full", help="the test model's size (mtl: small or full)")
    ap.add_argument("--quant", default="f32", help="the model's quantisation: f32 (the parity mode) or q4_0 "
                                                   "(the model users run), f16, q5_0, q8_0")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--stream-seconds", type=float, default=60.0, help="0 skips the first-audio measure")
    ap.add_argument("--long-seconds", type=float, default=600.0)
    ap.add_argument("--join-seconds", type=float, default=45.0)
    ap.add_argument("--first-join-seconds", type=float, default=20.0)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    model = model_path(args.variant, quant=args.quant, size=args.size)
    snap = snapshot_dir(args.variant, size=args.size)
    engine = Engine(model, threads=args.threads)
    products = "exact f32" if engine.info["quantization"].lower() == "f32" else "the CPU's fast products"
    print(f"model {model.name} ({engine.variant}, {engine.info['quantization']}: S3Gen's products in {products}; "
          f"{engine.info['hparams']['cfm_steps']} CFM steps), threads {args.threads}")
    print(_kernels_line())

    src = speech(args.seconds)
    engine.watermark = False  # as the reference's generate is timed
    engine.revoice(src[: 2 * RATE], RATE, seed=0)  # warm: the cloning encoders loaded
    ours, ours_ms, out = convert(engine, src, args.repeat)
    ref = run_stage("vc_bench", snap, wav=src, sr=np.asarray(RATE), variant=np.array(args.variant),
                    threads=np.asarray(args.threads), repeat=np.asarray(args.repeat))
    ref_s = float(ref["ms"]) / 1e3
    ref_ms = {k[:-3]: float(v) for k, v in ref.items() if k.endswith("_ms")}
    print(f"convert {args.seconds:g} s: ours {ours:.2f} s (RTF {ours / args.seconds:.2f}), ChatterboxVC.generate "
          f"{ref_s:.2f} s (RTF {ref_s / args.seconds:.2f}): {ref_s / ours:.2f}x; "
          f"out {out.size / engine.sample_rate:.2f} s")
    print(f"  ours: {stages_line(ours_ms, ours * 1e3)}")
    print(f"  ChatterboxVC.generate: {stages_line(ref_ms, ref_s * 1e3, OUR_STAGES[:-1])}")

    if args.stream_seconds > 0:
        engine.watermark = True  # streams as the app's are: marked
        long_src = speech(args.stream_seconds)
        cuts = revoice.segments(long_src, engine.stages.config, first_short=True)
        print(f"first streamed audio of a {args.stream_seconds:g} s source (segments ending at "
              f"{', '.join(f'{b / RATE:.2f}' for _, b in cuts)} s):")
        print(f"  the voice's first stream: {first_audio(engine, long_src, readied=False)}")
        print(f"  the voice readied: {first_audio(engine, long_src, readied=True)}")
        engine.watermark = False

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

    if args.first_join_seconds > sum(revoice.FIRST_SEGMENT_SECONDS):
        src = speech(min(args.first_join_seconds, revoice.SEGMENT_SECONDS))  # one pass is the whole path
        cuts = revoice.segments(src, engine.stages.config, first_short=True)
        whole = engine.revoice(src, RATE, seed=0)
        other = engine.revoice(src, RATE, seed=1)
        wav16, voice, seed, p = engine._revoice_request(src, RATE, None, 0, None, None)
        cut_whole = np.concatenate([c.samples for c in revoice.chunks(engine.stages, wav16, voice, seed, p, ChunkPlan(),
                                                                      CancelToken(), cuts=cuts)])
        streamed = np.concatenate([c.samples for c in engine.revoice_stream(src, RATE, seed=0)])
        inner = [b for _, b in cuts][:-1]
        join_distance(model, f"a stream's first cut, its segments whole, {src.size / RATE:g} s", inner, cut_whole,
                      whole, other, engine.sample_rate)
        join_distance(model, f"the stream itself, {src.size / RATE:g} s", inner, streamed, whole, other,
                      engine.sample_rate)

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
        join_distance(model, f"segments of a whole conversion, {args.join_seconds:g} s", cuts, segmented, whole, other,
                      engine.sample_rate)
    return 0


if __name__ == "__main__":
    sys.exit(main())
