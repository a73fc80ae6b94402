"""A fixed, seeded speed workload for `chatterbox-studio bench`.

10 s of speech: T3 samples 250 tokens with the model's default sampling (random-weight
models never stop by themselves, so the count is fixed), S3Gen renders them with the
built-in voice, and a low-latency stream measures the time to first audio. Timings come
from the engine's own components, stage by stage, in one process.
"""

from __future__ import annotations

import resource
import time

import numpy as np

from engine_native.engine import PRESETS, Engine

BENCH_TEXT = ("The quick brown fox jumps over the lazy dog, and then it runs far away into the quiet "
              "green forest before the sun goes down.")


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1e3


def run_bench(model_path, *, threads: int | None = None, n_tokens: int = 250, seed: int = 0) -> dict:
    t0 = time.perf_counter()
    engine = Engine(model_path, threads=threads)
    r = {"load_ms": _ms(t0), "variant": engine.variant, "quantization": engine.info["quantization"],
         "threads": threads or engine.info["threads"]}
    voice = engine.builtin_voice
    _, p = engine._options(seed, {"max_tokens": n_tokens})
    ids = engine._text_ids(BENCH_TEXT)
    r["text_ids"] = np.asarray(ids, np.int32)

    t0 = time.perf_counter()
    engine._t3_stream(ids, seed, p, voice)                # first prompt: also computes the voice's prefix
    r["t3_first_prompt_ms"] = _ms(t0)
    t0 = time.perf_counter()
    stream = engine._t3_stream(ids, seed, p, voice)       # the voice's prefix is cached now
    r["t3_prompt_ms"] = _ms(t0)
    t0 = time.perf_counter()
    tokens = stream.next(n_tokens)
    t3_steps_ms = _ms(t0)
    r["t3_tokens"] = len(tokens)
    r["t3_ms_per_token"] = t3_steps_ms / max(len(tokens), 1)
    r["t3_ms"] = r["t3_prompt_ms"] + t3_steps_ms

    speech = engine._speech_tokens(tokens, final=True)
    r["speech_ids"] = np.asarray([t for t in tokens if t < engine._speech_codes], np.int32)
    t0 = time.perf_counter()
    mu = engine._encoder.encode(np.concatenate([voice.prompt_token, np.asarray(speech, np.int32)]).tolist())
    r["encoder_ms"] = _ms(t0)
    rng = np.random.Generator(np.random.PCG64(seed))
    x0 = np.ascontiguousarray(rng.standard_normal((mu.shape[1], mu.shape[0]), dtype=np.float32).T)
    t0 = time.perf_counter()
    mel = engine._cfm.sample(mu, voice.prompt_feat, voice.embedding, x0, n_steps=p["cfm_steps"])
    r["cfm_ms"] = _ms(t0)
    t0 = time.perf_counter()
    wav = engine._hift.inference(mel, seed)
    r["hift_ms"] = _ms(t0)
    r["audio_s"] = wav.size / engine.sample_rate
    r["generation_ms"] = r["t3_ms"] + r["encoder_ms"] + r["cfm_ms"] + r["hift_ms"]
    r["rtf"] = r["generation_ms"] / 1e3 / r["audio_s"]

    for name, preset in (("ttfa_low_latency_ms", PRESETS["low-latency"]), ("ttfa_default_ms", PRESETS["quality"])):
        t0 = time.perf_counter()
        it = engine.stream(BENCH_TEXT, seed=seed, **preset)
        next(it)
        r[name] = _ms(t0)
        it.close()
    r["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    return r
