"""A long streamed sentence: each chunk's S3Gen pass covers a bounded window (the voice
prompt, scheduler.STREAM_CONTEXT_TOKENS of left context, the new tokens), and takes the voice prompt
as a cached prefix (its keys and values computed once, s3gen_flow.STREAM_CACHED_PROMPT), so its
cost does not grow with the sentence beyond its chunk; the joined stream still equals the
batch synthesis in length and within rel 0.05 (measured: 0.0165 here; full-size Turbo
figures by sentence length in docs/CPU.md, benchmarks/bench_stream_context.py).
Nano Q4_0 (S3Gen is full size); random weights never stop, so lengths are exact."""

from __future__ import annotations

import numpy as np
import pytest

from engine_native import Engine, _core
from engine_native.pipeline import s3gen_flow, scheduler
from tests.helpers.models import model_path

TEXT = "A long sentence that goes on and on for the streaming window test."
N = 130  # speech tokens: chunks of 10, 25, 35, 60 (each at least the tokens so far), the later ones windowed


@pytest.fixture(scope="module")
def engine():
    return Engine(model_path("nano", "q4_0"), threads=2)


def test_long_stream_passes_are_windowed_and_match_batch(engine):
    opts = dict(seed=4, max_tokens=N, cfm_steps=1)
    batch = engine.synthesize(TEXT, **opts)
    passes = []
    mel = engine.stages.flow.mel

    def watched(speech, voice, seed, *, start=0, **kw):  # records each pass's window (a wrapper of the
        passes.append((len(speech), start))            # stage's public method on the instance)
        return mel(speech, voice, seed, start=start, **kw)

    engine.stages.flow.mel = watched
    try:
        chunks = list(engine.stream(TEXT, first_chunk_tokens=10, chunk_tokens=25, **opts))
    finally:
        del engine.stages.flow.mel
    streamed = np.concatenate([c.samples for c in chunks])
    ctx = scheduler.STREAM_CONTEXT_TOKENS
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


def test_t3_worker_samples_beside_s3gen_and_leaves_the_audio_unchanged(engine, monkeypatch):
    """After a sentence's first chunk, a worker thread samples its next tokens (T3 on its own
    CPU backend) while the passes run: the same chunks, sample for sample, as T3 and S3Gen
    taking turns; Stop with the worker running ends it and frees the engine."""
    opts = dict(seed=5, max_tokens=60, cfm_steps=1, first_chunk_tokens=10, chunk_tokens=10)
    t3 = engine.stages.t3
    assert t3.model.own_backend                  # a CPU model: T3 has its own backend
    monkeypatch.setattr(t3, "beside_s3gen", True)  # off by default (CBS_STREAM_OVERLAP=1); restored after
    started = t3.workers_started
    overlapped = [c.samples for c in engine.stream(TEXT, **opts)]
    assert t3.workers_started == started + 1
    t3.beside_s3gen = False
    try:
        serial = [c.samples for c in engine.stream(TEXT, **opts)]
    finally:
        t3.beside_s3gen = True
    assert t3.workers_started == started + 1
    assert len(overlapped) == len(serial) > 2
    if _core.amx_available() or _core.int16_products_available():
        assert all(np.array_equal(a, b) for a, b in zip(overlapped, serial))
    else:
        # S3Gen beside the worker has one thread fewer, and without AMX or int16 its products are
        # OpenBLAS's sgemm split by thread, whose sums depend on an output's place in a call
        # (tests/engine_native/src/core/test_ggml_ops.py): the same tokens and chunk sizes, samples within rounding
        # (seen rel 1.2e-7 on an AVX2 Zen 3 host).
        assert all(a.size == b.size for a, b in zip(overlapped, serial))
        a, b = np.concatenate(overlapped), np.concatenate(serial)
        rel = float(np.linalg.norm(a - b) / np.linalg.norm(b))
        print(f"overlapped vs serial: rel {rel:.1e}")
        assert rel <= 1e-5

    it = engine.stream(TEXT, **{**opts, "max_tokens": 200})
    next(it)                                   # the worker is sampling now
    assert t3.workers_running == 1
    it.cancel()
    assert list(it) == []
    with engine.stages.exclusive():            # the engine is free (T3 and S3Gen)
        pass
    it.close()                                 # joins the worker
    assert t3.workers_running == 0
    assert engine.synthesize("Hi.", seed=0, max_tokens=4).size > 0


def test_prepared_voice_has_t3s_prefix_ready(engine):
    """prepare_stream also computes T3's conditioning prefix for the voice into the pool of KV
    caches (a first stream then computes only its text), unless t3=False (re-voicing has no
    T3); a stream on the prepared prefix speaks as one that made the prefix itself."""
    t3 = engine.stages.t3
    t3.release_idle_caches()
    assert list(engine.prepare_stream(cfm_steps=1, t3=False)) == [] and t3.idle_caches == 0
    opts = dict(seed=3, max_tokens=30, cfm_steps=1, first_chunk_tokens=10, chunk_tokens=10)
    made_by_stream = np.concatenate([c.samples for c in engine.stream(TEXT, **opts)])  # the pool was empty
    t3.release_idle_caches()
    stopped = engine.prepare_stream(cfm_steps=1)
    stopped.cancel()
    assert list(stopped) == [] and t3.idle_caches == 0  # cancelled before it ran: nothing made
    assert list(engine.prepare_stream(cfm_steps=1)) == [] and t3.idle_caches == 1
    prepared = np.concatenate([c.samples for c in engine.stream(TEXT, **opts)])
    assert np.array_equal(prepared, made_by_stream)


def test_prepared_voice_prompt_serves_the_streams(engine):
    """prepare_stream makes the voice's cached stream prefix (the encoder's and the CFM's) for a
    preset's settings and yields nothing; a stream with those settings then uses that prefix
    instead of making one, and its audio is the same as with a prefix made by the stream
    itself. A stream cancelled before it starts makes none."""
    engine.release_stream_prefixes()
    stopped = engine.prepare_stream(cfm_steps=1)
    stopped.cancel()
    flow = engine.stages.flow
    assert list(stopped) == [] and flow.cached_prefixes == {}
    opts = dict(seed=6, max_tokens=40, cfm_steps=1, first_chunk_tokens=10, chunk_tokens=10)
    made_by_stream = np.concatenate([c.samples for c in engine.stream(TEXT, **opts)])
    engine.release_stream_prefixes()
    assert list(engine.prepare_stream(cfm_steps=1)) == []
    (key, prefix), = flow.cached_prefixes.items()
    enc, cfm = prefix
    assert enc.tokens == engine.builtin_voice.prompt_token.size and cfm.frames == engine.builtin_voice.prompt_feat.shape[0]
    prepared = np.concatenate([c.samples for c in engine.stream(TEXT, **opts)])
    assert flow.cached_prefixes[key] is prefix   # used, not made again
    assert np.array_equal(prepared, made_by_stream)
    assert list(engine.prepare_stream(cfm_steps=2)) == [] and len(flow.cached_prefixes) == s3gen_flow.STREAM_PREFIXES
    assert engine.release_stream_prefixes() > 0 and flow.cached_prefixes == {}
