"""The cloning encoders' weights (S3Tokenizer, CAMPPlus, VoiceEncoder) are held only while
cloning: not loaded by synthesis, loaded by the first clone, freed by
`Engine.release_voice_encoders()` (and by the idle timer after CLONER_IDLE_SECONDS), loaded
again by the next clone with the same voice as the result. Nano Q4_0 (the encoders are
full size in every variant); espeak-ng speech as the recording."""

from __future__ import annotations

import time

import numpy as np
import pytest

from engine_native import Engine
from tests import audio_fixtures as af
from tests.models import model_path

TENSORS = ("speaker_emb", "cond_prompt_speech_tokens", "embedding", "prompt_token", "prompt_feat")


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    if not af.tools_available():
        pytest.skip("espeak-ng / ffmpeg not installed")
    speech = af.speech_stream(str(tmp_path_factory.mktemp("mem")))
    return speech[: 8 * af.ESPEAK_RATE].astype(np.float32), af.ESPEAK_RATE


def test_encoders_load_on_use_and_release(recording):
    engine = Engine(model_path("nano", "q4_0"), threads=2)
    synthesis_only = engine._file.buffer_bytes
    engine.synthesize("Hi.", seed=0, max_tokens=4)
    assert engine._file.buffer_bytes == synthesis_only          # synthesis never loads them
    first = engine.voice_from_audio(*recording)
    loaded = engine._file.buffer_bytes
    assert loaded > synthesis_only
    print(f"model buffers: {synthesis_only / 2**20:.0f} MB synthesis-only, {loaded / 2**20:.0f} MB cloning")
    assert engine.release_voice_encoders() == loaded - synthesis_only
    assert engine._file.buffer_bytes == synthesis_only
    assert engine.release_voice_encoders() == 0                 # nothing left to free
    again = engine.voice_from_audio(*recording)                 # loads them again
    for name in TENSORS:
        assert np.array_equal(getattr(first, name), getattr(again, name)), name


def test_encoders_held_elsewhere_are_not_freed(recording):
    engine = Engine(model_path("nano", "q4_0"), threads=2)
    with engine._lock:
        held = engine._voice_encoders()["s3tok"]                # a caller still holds one
    assert engine.release_voice_encoders() == 0                 # its weights must stay
    del held
    engine.voice_from_audio(*recording)
    assert engine.release_voice_encoders() > 0


def test_idle_timer_releases_them(recording):
    engine = Engine(model_path("nano", "q4_0"), threads=2)
    engine.CLONER_IDLE_SECONDS = 0.5
    base = engine._file.buffer_bytes
    engine.voice_from_audio(*recording)
    assert engine._file.buffer_bytes > base
    deadline = time.monotonic() + 30
    while engine._file.buffer_bytes > base and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engine._file.buffer_bytes == base
