"""The engine marks what it speaks (engine_native/pipeline/watermark_stream.py): on by default,
`synthesize` (each sentence marked whole, as apply_watermark marks one generate() call) and
`stream` (each sentence marked piece by piece) both read as marked by the detector, every Chunk
says so, and the switch (`Engine(watermark=False)`, `engine.watermark`) turns it off; without
the watermark model an engine that marks refuses to load, naming the command that makes it.

On the random Nano Q4_0 model (its audio is not speech, yet the mark is found on it as on
speech: tests/engine_native/test_watermark.py holds the parity on real speech). Each sentence
runs to max_tokens (random weights never draw the stop token): 30 tokens, 1.3 s of audio.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine_native import Engine
from engine_native.errors import ModelError, ParameterError
from engine_native.watermark import MAKE_MODEL_COMMAND, MODEL_ENV, default_watermarker
from tests.helpers.models import model_path

TEXT = "Hello there, this is the first sentence. And this one is the second."
OPTS = {"seed": 3, "max_tokens": 30, "cfm_steps": 1, "prompt_seconds": 2.0}
# The streamed sentence against the same unmarked stream marked whole: its seams differ a
# little (engine_native.watermark.StreamMarker; measured 3e-5 to 5e-4).
STREAM_REL_TOL = 2e-3


@pytest.fixture(scope="module")
def engine():
    return Engine(model_path("nano", "q4_0"), threads=2)


def detect(samples, rate=24000):
    return default_watermarker().detect(samples, rate)


def _sentences(chunks) -> list[np.ndarray]:
    return [np.concatenate([c.samples for c in chunks if c.sentence_index == i]) for i in range(chunks[-1].n_sentences)]


def test_on_by_default_synthesize_and_stream_are_marked(engine):
    assert engine.watermark is True
    events = []
    with engine.profile(lambda e: events.append(e) if e.stage == "watermark" else None):
        whole = engine.synthesize(TEXT, **OPTS)
    assert detect(whole).marked
    assert {e.phase for e in events} == {"start", "end"} and all(e.outcome == "finished" for e in events
                                                                 if e.phase == "end")
    chunks = list(engine.stream(TEXT, first_chunk_tokens=6, chunk_tokens=8, **OPTS))
    assert len(chunks) > 2 and all(c.watermarked for c in chunks)
    assert all(c.stages.watermark_ms > 0 for c in chunks)
    streamed = _sentences(chunks)
    assert all(detect(s).marked for s in streamed)
    # as long as the unmarked stream, sentence by sentence; marked as the whole sentence would be
    engine.watermark = False
    try:
        plain = list(engine.stream(TEXT, first_chunk_tokens=6, chunk_tokens=8, **OPTS))
    finally:
        engine.watermark = True
    assert not any(c.watermarked for c in plain)
    for got, unmarked in zip(streamed, _sentences(plain)):
        want = default_watermarker().apply(unmarked, 24000, keep_length=True)
        rel = float(np.linalg.norm(got - want) / np.linalg.norm(want))
        print(f"streamed sentence ({len(got) / 24000:.2f} s) against the same unmarked stream marked whole: "
              f"rel {rel:.2e}")
        assert got.shape == unmarked.shape and rel <= STREAM_REL_TOL
        assert not detect(unmarked).marked


def test_the_switch(engine):
    engine.watermark = False
    try:
        plain = engine.synthesize(TEXT, **OPTS)
        stream = engine.stream(TEXT, **OPTS)
    finally:
        engine.watermark = True
    assert not detect(plain).marked
    # a stream keeps the setting it was asked with, whatever the switch says when it runs
    assert not any(c.watermarked for c in stream)
    # the same take marked: each of its (equally long) sentences marked whole, exactly as
    # apply_watermark marks one generate() call's output
    marked = engine.synthesize(TEXT, **OPTS)
    half = plain.size // 2
    assert marked.shape == plain.shape
    for a, b in ((0, half), (half, plain.size)):
        assert np.array_equal(marked[a:b], default_watermarker().apply(plain[a:b], 24000, keep_length=True))
    with pytest.raises(ParameterError, match="True or False"):
        engine.watermark = "no"


def test_without_the_watermark_model(monkeypatch, tmp_path):
    monkeypatch.delenv(MODEL_ENV)
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))   # an empty data folder
    with pytest.raises(ModelError, match=MAKE_MODEL_COMMAND):
        Engine(model_path("nano", "q4_0"))
    eng = Engine(model_path("nano", "q4_0"), watermark=False)
    assert not eng.watermark
    with pytest.raises(ModelError, match=MAKE_MODEL_COMMAND):
        eng.watermark = True
    assert not eng.watermark
