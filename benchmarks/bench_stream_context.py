"""Streaming's left context: per-chunk cost and streamed-vs-batch difference by context size.

For sentences of a few lengths (speech tokens sampled once by T3, then fixed), renders the
batch audio once and the stream (the engine's own stages' chunk pass, engine.stages.flow.mel
and a vocoder stream, with the
default chunking: a first chunk of 10 tokens, then 25) once per left context, and prints
per-chunk S3Gen + HiFT time (first, last, max), the whole stream's S3Gen + HiFT time, and
how the streamed audio differs from the batch: rel (L2) on the samples and the mean
absolute log-mel difference (S3Gen's own 80-band log-mel, natural log) over the sentence.
Contexts are measured alternately per sentence, so a loaded machine affects them alike.

    PYTHONPATH=. python benchmarks/bench_stream_context.py MODEL.gguf [--lengths 40 100 250]
        [--configs -1:0 50:0 25:0 50:1 50:1:6] [--preset quality] [--prompt cached full]

A config is CONTEXT:GROW[:PROMPT_S]: PROMPT_S > 0 gives the stream's passes only the last
PROMPT_S seconds of the voice's S3Gen prompt (the batch keeps the preset's). --prompt: the
passes against the voice prompt's cached prefix (the engine's way, s3gen_flow.STREAM_CACHED_PROMPT;
prepared before timing, as the app does when a voice is chosen) and/or over the whole prompt
again each pass (the reference's full-context S3Gen); each config runs once per choice.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from engine_native.engine import PRESETS, Engine, StageTimes
from engine_native.pipeline import s3gen_flow
from engine_native.pipeline.vocoder_stream import HIFT_CONTEXT

TEXT = "The quick brown fox jumps over the lazy dog, and then it runs far away into the green forest."


def stream_audio(engine, tokens, voice, seed, p, context, grow=0.0, first=10, every=25):
    """The stream's audio and per-chunk ms; `grow` > 0: a chunk after the first takes
    max(every, grow x the tokens so far) tokens (growing chunks, fewer passes). A pass starts
    `context` tokens (-1: all) before the vocoder's own context, as the engine's scheduler does."""
    flow, ratio = engine.stages.flow, engine.stages.config.token_mel_ratio
    vocoder, out, chunk_ms = engine.stages.vocoder.stream(seed), [], []
    n, started = 0, False
    while True:
        n = min(len(tokens), n + (max(every, int(grow * n)) if n else first))
        final = n == len(tokens)
        start = 0 if context < 0 else max(0, (vocoder.emitted - HIFT_CONTEXT) // ratio - context)
        times = StageTimes()
        mel = flow.mel(flow.speech_input(tokens[:n], final), voice, seed, final=final, cfm_steps=p["cfm_steps"],
                       prompt_seconds=p["prompt_seconds"], start=start, cached_prompt=flow.prefix_usable(p["cfm_steps"]),
                       times=times)
        wav = vocoder.push(mel, final, ratio * start, times)
        chunk_ms.append(times.s3gen_ms + times.hift_ms)
        if wav.size and not started:
            wav, started = engine.stages.vocoder.fade_in(wav), True
        out.append(wav)
        if final:
            return np.concatenate(out), chunk_ms


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--lengths", type=int, nargs="+", default=[40, 100, 250])
    ap.add_argument("--configs", nargs="+", default=["-1:0", "50:0", "25:0", "50:1"],
                    help="CONTEXT:GROW pairs (context -1: the whole prefix; grow 0: fixed chunks)")
    ap.add_argument("--preset", default="quality", choices=sorted(PRESETS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--prompt", nargs="+", default=["cached", "full"], choices=["cached", "full"])
    a = ap.parse_args(argv)
    engine = Engine(a.model, threads=a.threads)
    voice, seed = engine.builtin_voice, 7
    preset = dict(PRESETS[a.preset])
    preset.pop("first_chunk_tokens", None), preset.pop("chunk_tokens", None)
    with engine.stages.lock:
        mel24 = engine.stages.cloner.encoders()["mel"]
    print(f"{engine.variant} {engine.info['quantization']}, {a.threads} threads, preset {a.preset}")
    print(f"{'tokens':>6} {'prompt':>6} {'context':>7} {'grow':>4} {'chunks':>6} {'first ms':>8} {'last ms':>8} {'max ms':>8} "
          f"{'total s':>8} {'batch s':>8} {'rel':>7} {'logmel':>7}")
    for L in a.lengths:
        p = {**engine.defaults, **preset}
        tokens = engine.speech_tokens(TEXT, seed=seed, max_tokens=L, **preset)[0]
        flow = engine.stages.flow
        t0 = time.perf_counter()
        mel = flow.mel(flow.speech_input(tokens, True), voice, seed, final=True, cfm_steps=p["cfm_steps"],
                       prompt_seconds=p["prompt_seconds"])
        batch = engine.stages.vocoder.stream(seed).push(mel, True)
        batch = engine.stages.vocoder.fade_in(batch)
        batch_s = time.perf_counter() - t0
        ref_mel = np.asarray(mel24.compute(batch))
        for cfg, prompt in ((c, m) for c in a.configs for m in a.prompt):
            ctx, grow, *prompt_s = cfg.split(":")
            ctx, grow = int(ctx), float(grow)
            ps = {**p, "prompt_seconds": float(prompt_s[0])} if prompt_s else p
            s3gen_flow.STREAM_CACHED_PROMPT = prompt == "cached"
            list(engine.prepare_stream(voice, cfm_steps=ps["cfm_steps"], prompt_seconds=ps["prompt_seconds"]))
            wav, chunk_ms = stream_audio(engine, tokens, voice, seed, ps, ctx, grow)
            n = min(wav.size, batch.size)
            rel = np.linalg.norm(wav[:n] - batch[:n]) / max(np.linalg.norm(batch[:n]), 1e-12)
            m = np.asarray(mel24.compute(wav))
            k = min(len(m), len(ref_mel))
            logmel = float(np.mean(np.abs(m[:k] - ref_mel[:k])))
            print(f"{len(tokens):>6} {prompt:>6} {ctx if ctx >= 0 else 'all':>7} {grow:>4.1f}{':' + prompt_s[0] + ' s' if prompt_s else ''} {len(chunk_ms):>6} {chunk_ms[0]:>8.0f} "
                  f"{chunk_ms[-1]:>8.0f} {max(chunk_ms):>8.0f} {sum(chunk_ms) / 1e3:>8.2f} {batch_s:>8.2f} "
                  f"{rel:>7.4f} {logmel:>7.4f}" + ("" if wav.size == batch.size else f"  (length {wav.size} vs {batch.size})"),
                  flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
