"""Native S3Gen stages against the PyTorch reference (full-size random Turbo, F32).

Tolerance: s3gen_encode rel <= 1e-5 (mu fed to the CFM).
"""

from __future__ import annotations

import numpy as np
import pytest

import engine_native
from engine_native import debug
from tests.models import model_path
from tests.reference.cache import snapshot_dir
from tests.reference.runner import run_stage


@pytest.mark.parametrize("n_tokens", [25, 250])
def test_s3gen_encode_matches_reference(n_tokens):
    speech = np.random.default_rng(n_tokens).integers(0, 6561, n_tokens).astype(np.int32)
    got = debug.s3gen_encode(model_path("turbo"), speech)
    ref = run_stage("s3gen_encode", snapshot_dir("turbo"), speech_ids=speech)["mu"]
    assert got.shape == ref.shape == (80, 2 * (250 + n_tokens))
    rel = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    print(f"s3gen_encode {n_tokens} tokens: rel {rel:.2e} max_abs {np.abs(got - ref).max():.2e}")
    assert rel <= 1e-5


def test_s3gen_encode_with_a_given_prompt():
    rng = np.random.default_rng(3)
    voice = {"prompt_token": rng.integers(0, 6561, 40).astype(np.int32)}
    speech = rng.integers(0, 6561, 10).astype(np.int32)
    got = debug.s3gen_encode(model_path("turbo"), speech, voice)
    ref = run_stage("s3gen_encode", snapshot_dir("turbo"), speech_ids=speech, prompt_token=voice["prompt_token"])["mu"]
    assert float(np.linalg.norm(got - ref) / np.linalg.norm(ref)) <= 1e-5


def test_out_of_range_tokens_raise():
    with pytest.raises(engine_native.EngineError, match="speech token 6561"):
        debug.s3gen_encode(model_path("turbo"), np.array([1, 6561], np.int32))
