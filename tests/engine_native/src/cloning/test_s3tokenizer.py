"""S3TokenizerV2 speech tokens against the reference, on the full-size random-weight Turbo model (f32:
the exact products) and Nano Q4_0 (the fast products).

Tolerance: token agreement >= 98 % and equal lengths per recording. FSQ rounds 8 projections
to {-1, 0, 1}, so a float difference of ~1e-6 can flip a digit that lies on a rounding
boundary; the projection itself (the FSQ input, before tanh) must match to rel <= 1e-4, and
the test prints how many of its values lie within 1e-4 of a boundary to explain any flip.
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
# tanh(p) * 0.999 rounds across +-0.5 at p = +-atanh(0.5 / 0.999).
BOUNDARY = float(np.arctanh(0.5 / 0.9990000128746033))


@pytest.fixture(scope="module")
def speech16k(tmp_path_factory):
    """~16 s of espeak-ng speech (two spans with silence around), resampled to 16 kHz."""
    if not af.tools_available():
        pytest.skip("needs ffmpeg, ffprobe and espeak-ng")
    import soxr

    rec = af.build_recording(str(tmp_path_factory.mktemp("s3tok_audio")), layout=(0.5, 8.0, 1.0, 6.5, 0.5))
    return soxr.resample(rec.samples, rec.rate, SR).astype(np.float32)


def _recording(name: str, speech: np.ndarray, plen: int) -> tuple[np.ndarray, int | None]:
    """(16 kHz wav, max_len) for each case."""
    rng = np.random.default_rng(7)
    t = np.arange(6 * SR) / SR
    if name == "speech_10s":  # embed_ref's prompt_token: the first 10 s, no max_len
        return speech[: 10 * SR], None
    if name == "speech_cond_15s":  # prepare_conditionals: wav[:15 s], max_len = speech_cond_prompt_len
        return speech[: 15 * SR], plen
    if name == "speech_max_len_100":  # max_len cuts the mel (and so the attention context) to 4 s
        return speech[: 10 * SR], 100
    if name == "noise":
        return (0.1 * rng.standard_normal(5 * SR)).astype(np.float32), None
    if name == "chirp":
        return (0.4 * np.sin(2 * np.pi * (80 + 600 * t) * t) + 1e-3 * rng.standard_normal(t.size)).astype(np.float32), None
    if name == "long_32s":  # over 30 s: two windows, merged
        x = np.concatenate([speech, 0.5 * speech])[: 32 * SR]
        return (x + 1e-3 * rng.standard_normal(x.size)).astype(np.float32), None
    raise KeyError(name)


CASES = ["speech_10s", "speech_cond_15s", "speech_max_len_100", "noise", "chirp", "long_32s"]


def _check_against_reference(mp, variant: str, name: str, speech16k) -> None:
    plen = int(debug._component(mp, "ModelFile").get_int("chatterbox.t3.speech_cond_prompt_len"))
    wav, max_len = _recording(name, speech16k, plen)
    extra = {} if max_len is None else {"max_len": np.asarray(max_len)}
    ref = run_stage("s3tok_tokens", snapshot_dir(variant), wav=wav, **extra)
    got = debug.s3tok_tokens(mp, wav, max_len)

    assert got.dtype == np.int32
    assert got.shape == ref["tokens"].shape
    agree = float(np.mean(got == ref["tokens"]))
    msg = (f"s3tok {name} ({mp.name}): {wav.size / SR:.2f} s, max_len {max_len}, tokens {got.size}, "
           f"agreement {np.sum(got == ref['tokens'])}/{got.size} = {100 * agree:.2f} %")
    if "proj" in ref:
        proj, rp = debug.s3tok_projection(mp, wav, max_len), ref["proj"]
        rel = float(np.linalg.norm(proj - rp) / np.linalg.norm(rp))
        near = int(np.sum(np.abs(np.abs(rp) - BOUNDARY) < 1e-4))
        msg += f"; projection rel {rel:.2e} max_abs {np.abs(proj - rp).max():.2e}, {near}/{rp.size} values within 1e-4 of a boundary"
        assert rel <= 1e-4, msg
    print(msg)
    assert agree >= 0.98, msg
    assert got.min() >= 0 and got.max() < 6561


@pytest.mark.parametrize("name", CASES)
def test_s3tok_tokens_match_reference(name, speech16k):
    _check_against_reference(model_path("turbo"), "turbo", name, speech16k)


@pytest.mark.parametrize("name", ["speech_10s", "long_32s"])
def test_s3tok_of_a_quantised_model_matches_reference(name, speech16k):
    """A quantised model's tokenizer takes the CPU's fast products (AMX bf16x3 where the CPU
    has it): the same bounds as the exact products'."""
    _check_against_reference(model_path("nano", "q4_0"), "nano", name, speech16k)


def test_s3tok_rejects_bad_input():
    mp = model_path("turbo")
    with pytest.raises(engine_native.EngineError, match="empty"):
        debug.s3tok_tokens(mp, np.zeros(0, np.float32))
    with pytest.raises(engine_native.EngineError, match="too short"):
        debug.s3tok_tokens(mp, np.zeros(150, np.float32))
    with pytest.raises(engine_native.EngineError, match="NaN"):
        debug.s3tok_tokens(mp, np.full(8000, np.nan, np.float32))
    with pytest.raises(engine_native.EngineError, match="max_len"):
        debug.s3tok_tokens(mp, np.zeros(8000, np.float32), 0)
    tok = debug._component(mp, "S3Tokenizer")
    with pytest.raises(engine_native.EngineError, match="mono"):
        tok.tokens(np.zeros((2, 8000), np.float32))


def test_s3tok_shortest_audio_gives_one_token():
    """201 samples is the shortest input the reference's reflect-padded STFT accepts: one frame."""
    wav = (0.3 * np.random.default_rng(0).standard_normal(201)).astype(np.float32)
    got = debug.s3tok_tokens(model_path("turbo"), wav)
    ref = run_stage("s3tok_tokens", snapshot_dir("turbo"), wav=wav)["tokens"]
    assert got.shape == ref.shape == (1,)
    assert got[0] == ref[0]
