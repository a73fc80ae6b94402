"""A long streamed sentence: each chunk's S3Gen pass covers a bounded window (the voice
prompt, _STREAM_CONTEXT_TOKENS of left context, the new tokens), so its cost does not grow
with the sentence beyond its chunk; the joined stream still equals the batch synthesis in length and within
rel 0.05 (measured on full-size Turbo, 250 tokens: rel 0.011 with the whole prefix, 0.014
with 50 tokens of context, low-latency preset; benchmarks/bench_stream_context.py).
Nano Q4_0 (S3Gen is full size); random weights never stop, so lengths are exact."""

from __future__ import annotations

import numpy as np
import pytest

from engine_native import Engine
from engine_native import engine as engine_module
from tests.models import model_path

TEXT = "A long sentence that goes on and on for the streaming window test."
N = 130  # speech tokens: chunks of 10, 25, 25, 30, 40 (growing), the later ones windowed


@pytest.fixture(scope="module")
def engine():
    return Engine(model_path("nano", "q4_0"), threads=2)


def test_long_stream_passes_are_windowed_and_match_batch(engine):
    opts = dict(seed=4, max_tokens=N, cfm_steps=1)
    batch = engine.synthesize(TEXT, **opts)
    passes = []
    mel = engine._mel

    def watched(speech, voice, seed, final, p, start=0):
        passes.append((len(speech), start))
        return mel(speech, voice, seed, final, p, start)

    engine._mel = watched
    try:
        chunks = list(engine.stream(TEXT, first_chunk_tokens=10, chunk_tokens=25, **opts))
    finally:
        del engine._mel
    streamed = np.concatenate([c.samples for c in chunks])
    ctx = engine_module._STREAM_CONTEXT_TOKENS
    # A pass starts at most the context plus the frames not yet final (HiFT's 12 frames of
    # context, 4 held back, 6 of lookahead dropped: 11 tokens) before the previous pass's end.
    print(f"passes (speech tokens, window start): {passes}")
    for (prev, _), (n, start) in zip([(0, 0)] + passes, passes):
        assert start >= prev - ctx - 11
    assert passes[-1][1] > 0                              # the late passes are windowed
    assert streamed.size == batch.size
    rel = np.linalg.norm(streamed - batch) / np.linalg.norm(batch)
    print(f"stream vs batch, {N} tokens: rel {rel:.4f}")
    assert rel < 0.05
