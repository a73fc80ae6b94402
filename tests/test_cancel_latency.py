"""Stop in every stage of a generation, on the full-size random Turbo (Q4_0): the T3 prompt,
the S3Gen encoder, each CFM step, HiFT. `Stream.cancel()` aborts the graph computation in
flight (ggml's CPU abort callback, checked between graph nodes), so the engine is free
within a node of the cancel, the stage raises Cancelled inside (not an error outside: the
stream just ends), and the model is usable afterwards with unchanged results.

The latency from cancel() to the engine's lock being free is printed for the bench; the
only timed assertion is a generous bound (a loaded 2-core machine), far below the stages'
lengths. Measured figures: `chatterbox-studio bench` (cancel latency per stage).
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from engine_native import Engine
from engine_native.errors import Cancelled
from tests.models import model_path

LONG_TEXT = ("This is a long sentence for the cancellation test, and it keeps going with many more words so "
             "that the text prompt of the speech model takes a while to compute, then it goes on a little "
             "further, with commas, clauses and more words again, until it is really quite long indeed.")
TOKENS = 100  # one chunk of 100 speech tokens: 4 s of audio, long S3Gen and HiFT passes


class _Watch:
    """Reports when a wrapped function starts and whether it finished or was cancelled."""

    def __init__(self):
        self.started, self.outcome = threading.Event(), []

    def wrap(self, fn):
        def run(*a, **k):
            self.started.set()
            try:
                out = fn(*a, **k)
            except Cancelled:
                self.outcome.append("cancelled")
                raise
            self.outcome.append("finished")
            return out
        return run


class _Proxy:
    """A native component whose `method` is watched (pybind objects take no new attributes)."""

    def __init__(self, target, method: str, watch: _Watch):
        self._target, self._method, self._watch = target, method, watch

    def __getattr__(self, name):
        attr = getattr(self._target, name)
        return self._watch.wrap(attr) if name == self._method else attr


@pytest.fixture(scope="module")
def engine():
    return Engine(model_path("turbo", "q4_0"), threads=2)


@pytest.fixture(scope="module")
def reference_audio(engine):
    return engine.synthesize("Hi there.", seed=3, max_tokens=8)


def _cancel_during(engine, watched: _Watch, delay: float) -> dict:
    """Streams LONG_TEXT as one chunk, cancels `delay` s after the watched method starts."""
    it = engine.stream(LONG_TEXT, seed=1, max_tokens=TOKENS, first_chunk_tokens=TOKENS, chunk_tokens=TOKENS)
    got, errors = [], []

    def consume():
        try:
            got.extend(it)
        except Exception as e:  # noqa: BLE001 - any error is the test's failure
            errors.append(e)

    t = threading.Thread(target=consume)
    t.start()
    assert watched.started.wait(600)
    time.sleep(delay)
    t0 = time.perf_counter()
    it.cancel()
    with engine._lock:  # the engine is free: the next caller gets in
        freed_ms = (time.perf_counter() - t0) * 1e3
    t.join(timeout=120)
    assert not t.is_alive()
    return {"freed_ms": freed_ms, "got": got, "errors": errors}


def _check(engine, reference_audio, stage, r, watched, outcome="cancelled"):
    print(f"cancel during {stage}: engine free after {r['freed_ms']:.0f} ms")
    assert r["errors"] == []                 # Cancelled never escapes the stream
    assert r["got"] == []                    # no chunk of the cancelled sentence
    assert watched.outcome[-1] == outcome    # the stage was cut short, not waited for
    assert r["freed_ms"] < 1500              # generous: a loaded machine; the bench prints the figure
    # The model is usable and unchanged.
    assert np.array_equal(engine.synthesize("Hi there.", seed=3, max_tokens=8), reference_audio)


def test_cancel_during_the_t3_prompt(engine, reference_audio):
    # A fresh KV cache: the prompt computes the voice's conditioning prefix and the long text.
    engine._idle_caches.clear()
    w = _Watch()
    engine._t3_session = w.wrap(engine._t3_session)
    try:
        r = _cancel_during(engine, w, 0.05)
    finally:
        del engine._t3_session
    _check(engine, reference_audio, "the T3 prompt", r, w)


@pytest.mark.parametrize("attr, method", [("_encoder", "encode"), ("_hift", "decode")])
def test_cancel_during_the_s3gen_encoder_and_hift(engine, reference_audio, attr, method):
    component, w = getattr(engine, attr), _Watch()
    setattr(engine, attr, _Proxy(component, method, w))
    try:
        r = _cancel_during(engine, w, 0.05)
    finally:
        setattr(engine, attr, component)
    _check(engine, reference_audio, f"{attr[1:]}.{method}", r, w)


def test_cancel_during_each_cfm_step(engine, reference_audio):
    cfm = engine._cfm
    n_steps = engine.defaults["cfm_steps"]
    t_pass = _timed_pass(engine, cfm)  # to place a cancel in the middle of each step
    try:
        for step in range(n_steps):
            w = _Watch()
            engine._cfm = _Proxy(cfm, "sample", w)
            r = _cancel_during(engine, w, t_pass * (step + 0.5) / n_steps)
            _check(engine, reference_audio, f"CFM step {step + 1} of {n_steps} (pass {t_pass:.2f} s)", r, w)
    finally:
        engine._cfm = cfm


def _timed_pass(engine, cfm) -> float:
    """Seconds of one CFM pass over the built-in prompt + TOKENS speech tokens."""
    voice = engine.builtin_voice
    frames = voice.prompt_feat.shape[0] + TOKENS * engine._token_mel_ratio
    mu = np.zeros((voice.prompt_feat.shape[1], frames), np.float32)
    x0 = np.random.default_rng(0).standard_normal(mu.shape, dtype=np.float32)
    t0 = time.perf_counter()
    cfm.sample(mu, voice.prompt_feat, voice.embedding, x0)
    return time.perf_counter() - t0
