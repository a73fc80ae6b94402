"""Continuous batching of T3 (pipeline/t3_batch.py) through the server's worker: streams of one
engine, their T3 steps taken together while one thread runs their S3Gen / HiFT passes in turn,
give each the audio of its solo stream with the same seed; a stream that joins late and one
cancelled mid-way change nothing for the others.

Tolerance: batched T3 products may round differently from the single-column kernel (logits
within rel 1e-4, tests/engine_native/src/t3/test_t3_batch.py); the sampled tokens are then the
same, and S3Gen / HiFT run per stream as alone, so the audio must match within rel 1e-6
(measured: printed). Nano Q4_0 on the CPU (CBS_T3_BATCH=1 turns batching on there); with
CBS_TEST_DEVICE and CBS_TEST_MODEL_Q4 (the device machine's Turbo Q4_0) on that device.
Random weights never stop, so every stream runs to max_tokens.
"""

from __future__ import annotations

import os
import threading

import numpy as np
import pytest

from app.server.worker import EngineWorker, Job
from engine_native import Engine
from tests.helpers.models import model_path

TEXT = "Batched streams keep their own voices."
OPTS = dict(max_tokens=40, cfm_steps=1, prompt_seconds=1.0, first_chunk_tokens=4, chunk_tokens=8)


@pytest.fixture(scope="module")
def engine():
    if os.environ.get("CBS_TEST_DEVICE") and os.environ.get("CBS_TEST_MODEL_Q4"):
        return Engine(os.environ["CBS_TEST_MODEL_Q4"], device=os.environ["CBS_TEST_DEVICE"])
    return Engine(model_path("nano", "q4_0"), threads=2)


def _solo(engine, seed: int) -> np.ndarray:
    return np.concatenate([c.samples for c in engine.stream(TEXT, seed=seed, **OPTS)])


def _rel(got, ref) -> float:
    return float(np.linalg.norm(got.astype(np.float64) - ref) / np.linalg.norm(ref))


def test_batched_stream_audio_equals_solo(engine, monkeypatch):
    seeds = [3, 4, 5, 6]
    solo = {s: _solo(engine, s) for s in seeds}
    monkeypatch.setenv("CBS_T3_BATCH", "1")
    worker = EngineWorker(engine, queue_size=8, parallel=4)
    assert worker.batching and engine.stages.t3.batcher is not None
    audio = {s: [] for s in seeds}
    chunks_seen = {s: 0 for s in seeds}
    errors = []
    late_go = threading.Event()

    def job(seed: int) -> Job:
        def on_chunk(c):
            audio[seed].append(c.samples)
            chunks_seen[seed] += 1
            if seed == 3 and chunks_seen[seed] == 2:
                late_go.set()  # the late stream joins while the others are mid-way

        return Job(engine.stream(TEXT, seed=seed, **OPTS), on_chunk, lambda: None, errors.append, str(seed))

    jobs = {s: job(s) for s in seeds[:3]}
    cancelled = Job(engine.stream(TEXT, seed=99, **OPTS), lambda c: cancelled.cancel(), lambda: None,
                    lambda e: None, "cancelled")  # cancels itself at its first chunk
    for j in (*jobs.values(), cancelled):
        worker.submit(j)
    assert late_go.wait(120)
    jobs[6] = job(6)
    worker.submit(jobs[6])
    for j in (*jobs.values(), cancelled):
        assert j.done.wait(300)
    batcher = engine.stages.t3.batcher
    rounds, largest = batcher.rounds, batcher.largest
    worker.stop()
    assert engine.stages.t3.batcher is None  # the worker's stop turns batching off again
    assert not errors, errors
    assert largest >= 3, largest  # the streams really stepped together
    worst = 0.0
    for s in seeds:
        got = np.concatenate(audio[s])
        assert got.shape == solo[s].shape, s
        worst = max(worst, _rel(got, solo[s]))
    print(f"4 batched streams (one late, one more cancelled): {rounds} rounds, largest batch {largest}; "
          f"audio vs solo worst rel {worst:.2e}")
    assert worst <= 1e-6
