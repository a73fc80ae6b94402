"""Native audio features against the reference (voice cloning's front end).

Tolerance: mel_24k rel <= 1e-5 (the prompt_feat a voice carries).
"""

from __future__ import annotations

import numpy as np
import pytest

import engine_native
from engine_native import debug
from tests.helpers.models import model_path
from tests.reference.cache import snapshot_dir
from tests.reference.runner import run_stage


def _signals():
    rng = np.random.default_rng(0)
    t = np.arange(24000 * 3) / 24000
    voiced = 0.3 * np.sin(2 * np.pi * 140 * t) * (1 + 0.5 * np.sin(2 * np.pi * 3 * t)) + 0.01 * rng.standard_normal(t.size)
    chirp = 0.5 * np.sin(2 * np.pi * (100 + 1500 * t) * t)
    loud = np.clip(rng.standard_normal(24000 * 2) * 0.8, -1, 1)
    return {"voiced": voiced, "chirp": chirp + 1e-3 * rng.standard_normal(t.size), "loud_noise": loud,
            "pure_chirp": chirp}


# A noiseless synthetic sweep has >100 dB between its tone and its empty bins; there the
# reference's own float32 FFT rounding (not ours: double) sets the difference, ~3e-5.
TOLERANCE = {"pure_chirp": 5e-5}


@pytest.mark.parametrize("name", ["voiced", "chirp", "loud_noise", "pure_chirp"])
def test_mel_24k_matches_reference(name):
    wav = _signals()[name].astype(np.float32)
    got = debug.mel_24k(model_path("turbo"), wav)
    ref = run_stage("mel_24k", snapshot_dir("turbo"), wav=wav)["mel"]
    assert got.shape == ref.shape
    rel = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    print(f"mel_24k {name}: frames {got.shape[0]} rel {rel:.2e} max_abs {np.abs(got - ref).max():.2e}")
    assert rel <= TOLERANCE.get(name, 1e-5)


def test_mel_24k_rejects_bad_audio():
    with pytest.raises(engine_native.EngineError, match="too short"):
        debug.mel_24k(model_path("turbo"), np.zeros(100, np.float32))
    with pytest.raises(engine_native.EngineError, match="NaN"):
        debug.mel_24k(model_path("turbo"), np.full(24000, np.nan, np.float32))


def _speechlike_16k(seed: int, seconds: float = 2.0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(int(16000 * seconds)) / 16000
    f0 = 120 + 30 * np.sin(2 * np.pi * 0.7 * t)
    x = sum(0.2 / h * np.sin(2 * np.pi * h * np.cumsum(f0) / 16000) for h in range(1, 12))
    return (x * (0.6 + 0.4 * np.sin(2 * np.pi * 2 * t)) + 3e-3 * rng.standard_normal(t.size)).astype(np.float32)


@pytest.mark.parametrize("seed,gain", [(0, 1.0), (1, 0.05), (2, 3.0)])
def test_fbank80_matches_reference(seed, gain):
    wav = np.clip(_speechlike_16k(seed) * gain, -1, 1).astype(np.float32)
    got = debug.fbank80(model_path("turbo"), wav)
    ref = run_stage("fbank80", snapshot_dir("turbo"), wav=wav)["fbank"]
    assert got.shape == ref.shape
    rel = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    print(f"fbank80 seed={seed} gain={gain}: frames {got.shape[0]} rel {rel:.2e} max_abs {np.abs(got - ref).max():.2e}")
    assert rel <= 1e-5


def test_fbank80_rejects_short_audio():
    with pytest.raises(engine_native.EngineError, match="too short"):
        debug.fbank80(model_path("turbo"), np.zeros(100, np.float32))


@pytest.mark.parametrize("seed,seconds,lead_silence", [(0, 3.0, 0.0), (1, 6.5, 0.8), (2, 10.0, 0.3)])
def test_ve_embed_matches_reference(seed, seconds, lead_silence):
    """Speaker embedding, incl. librosa's silence trim and the partial-window averaging."""
    wav = _speechlike_16k(seed, seconds)
    wav = np.concatenate([np.zeros(int(16000 * lead_silence), np.float32), wav, np.zeros(4000, np.float32)])
    got = debug.ve_embed(model_path("turbo"), wav)
    ref = run_stage("ve_embed", snapshot_dir("turbo"), wav=wav)["embed"]
    cos = float(got @ ref / (np.linalg.norm(got) * np.linalg.norm(ref)))
    print(f"ve_embed {seconds}s: cosine {cos:.8f} max_abs {np.abs(got - ref).max():.2e}")
    assert got.shape == ref.shape == (256,)
    assert cos >= 0.99999


@pytest.mark.parametrize("seed,gain", [(0, 1.0), (3, 0.02), (4, 2.0)])
def test_s3tok_logmel_matches_reference(seed, gain):
    wav = np.clip(_speechlike_16k(seed, 3.0) * gain, -1, 1).astype(np.float32)
    got = debug.s3tok_logmel(model_path("turbo"), wav)
    ref = run_stage("s3tok_logmel", snapshot_dir("turbo"), wav=wav)["logmel"]
    assert got.shape == ref.shape
    rel = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    print(f"s3tok_logmel seed={seed} gain={gain}: frames {got.shape[1]} rel {rel:.2e} max_abs {np.abs(got - ref).max():.2e}")
    assert rel <= 1e-5


def test_ve_embed_same_for_any_thread_count_and_input_type():
    """The partial windows run as batches split over threads: the split must not change a bit.
    Audio may come as float32, float64 or a list; 2-D audio is refused."""
    from engine_native import _core

    wav = np.concatenate([_speechlike_16k(5, 7.0), np.zeros(3000, np.float32)])
    ve = _core.VoiceEncoder(debug._component(model_path("turbo"), "ModelFile"))
    one = np.asarray(ve.embed(wav, threads=1))
    assert one.shape == (256,) and np.isclose(np.linalg.norm(one), 1.0)
    for threads in (2, 3, 64):
        assert np.array_equal(np.asarray(ve.embed(wav, threads=threads)), one), threads
    assert np.array_equal(np.asarray(ve.embed(wav.astype(np.float64), threads=2)), one)
    assert np.array_equal(np.asarray(ve.embed(wav.tolist(), threads=2)), one)
    with pytest.raises(engine_native.EngineError, match="1-D"):
        ve.embed(np.stack([wav, wav]))
