"""CAMPPlus (S3Gen's x-vector, the voice's `embedding`) against the reference.

Tolerance: cosine >= 0.99999 and rel <= 1e-5 (the port is exact up to float32
rounding; measured rel ~3e-7, 4e-6 for the chirp, whose near-empty fbank bins already
differ by 6e-5 rel through the reference's float32 FFT, see test_audio_features). Nano is not tested separately: its snapshot shares
Turbo's S3Gen bytes (tests/reference/build.py derives the S3Gen seed from the base
seed only), so its campplus.* tensors are identical.
"""

from __future__ import annotations

import numpy as np
import pytest

import engine_native
from engine_native import debug
from tests.helpers import audio_fixtures as af
from tests.helpers.models import model_path
from tests.reference.cache import snapshot_dir
from tests.reference.runner import run_stage

SR = 16000
MIN_SAMPLES = 720


def _to_16k(x: np.ndarray, rate: int) -> np.ndarray:
    import soxr

    return soxr.resample(x, rate, SR).astype(np.float32)


@pytest.fixture(scope="module")
def speech16k(tmp_path_factory) -> np.ndarray:
    """About 10 s of espeak-ng speech with pauses and a -60 dBFS noise floor, at 16 kHz."""
    if not af.tools_available():
        pytest.skip("espeak-ng / ffmpeg not installed")
    rec = af.build_recording(str(tmp_path_factory.mktemp("campplus")), layout=(0.5, 5.0, 0.8, 3.5, 0.3))
    return _to_16k(rec.samples, rec.rate)


def _signal(name: str, speech: np.ndarray) -> np.ndarray:
    rng = np.random.default_rng(7)
    if name == "speech_10s":
        return speech
    if name == "speech_1s":  # fewer TDNN frames than one 100-frame CAM segment
        return speech[SR // 2: SR // 2 + SR]
    if name == "white_noise":
        return (0.1 * rng.standard_normal(4 * SR)).astype(np.float32)
    if name == "chirp":
        t = np.arange(3 * SR) / SR
        return (0.5 * np.sin(2 * np.pi * (80 + 1300 * t) * t) + 1e-3 * rng.standard_normal(t.size)).astype(np.float32)
    raise KeyError(name)


def _compare(got: np.ndarray, ref: np.ndarray) -> tuple[float, float, float]:
    cos = float(got @ ref / (np.linalg.norm(got) * np.linalg.norm(ref)))
    rel = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    return cos, rel, float(np.abs(got - ref).max())


@pytest.mark.parametrize("name", ["speech_10s", "speech_1s", "white_noise", "chirp"])
def test_campplus_embed_matches_reference(name, speech16k):
    wav = _signal(name, speech16k)
    got = debug.campplus_embed(model_path("turbo", "f32"), wav)
    ref = run_stage("campplus_embed", snapshot_dir("turbo"), wav=wav)["embed"]
    assert got.shape == ref.shape == (192,)
    cos, rel, max_abs = _compare(got, ref)
    print(f"campplus_embed {name} ({wav.size / SR:.2f} s): cosine {cos:.8f} rel {rel:.2e} max_abs {max_abs:.2e}")
    assert cos >= 0.99999
    assert rel <= 1e-5


def test_campplus_shortest_input_matches_reference(speech16k):
    """The shortest accepted input: 3 fbank frames (400 + 2 x 160 samples), which the
    TDNN (kernel 5, stride 2, padding 2) turns into the 2 frames the unbiased std needs."""
    n = MIN_SAMPLES
    assert debug._component(model_path("turbo", "f32"), "CampPlus").min_samples == n
    wav = speech16k[SR: SR + n]
    got = debug.campplus_embed(model_path("turbo", "f32"), wav)
    ref = run_stage("campplus_embed", snapshot_dir("turbo"), wav=wav)["embed"]
    cos, rel, max_abs = _compare(got, ref)
    print(f"campplus_embed shortest ({n} samples): cosine {cos:.8f} rel {rel:.2e} max_abs {max_abs:.2e}")
    assert np.isfinite(ref).all() and cos >= 0.99999


def test_campplus_rejects_bad_audio():
    path = model_path("turbo", "f32")
    for wav in (np.zeros(0, np.float32), np.zeros(MIN_SAMPLES - 1, np.float32)):
        with pytest.raises(engine_native.EngineError, match="too short for the speaker embedding"):
            debug.campplus_embed(path, wav)
    with pytest.raises(engine_native.EngineError, match="NaN"):
        debug.campplus_embed(path, np.full(SR, np.nan, np.float32))
