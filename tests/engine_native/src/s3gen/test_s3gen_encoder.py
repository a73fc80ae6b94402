"""Native S3Gen stages against the PyTorch reference (full-size random Turbo, F32).

Tolerance: s3gen_encode rel <= 1e-5 (mu fed to the CFM).
"""

from __future__ import annotations

import numpy as np
import pytest

import engine_native
from engine_native import debug
from tests.helpers.models import model_path
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


@pytest.mark.parametrize("n_tokens", [1, 75])
def test_cached_prompt_prefix_encoding_matches_reference_under_its_mask(n_tokens):
    """A stream's cached encoder prefix (make_prefix over the prompt, then encode_after_prefix
    over the speech alone) against the reference encoder as the prefix defines it: the
    prompt's tokens encoded as if alone (stage s3gen_encode_prompt_causal). Tolerance rel
    1e-5, as s3gen_encode's; the definition's own effect on mu (against the unmasked
    reference) is printed."""
    speech = np.random.default_rng(n_tokens).integers(0, 6561, n_tokens).astype(np.int32)
    ref = run_stage("s3gen_encode_prompt_causal", snapshot_dir("turbo"), speech_ids=speech)["mu"]
    full = run_stage("s3gen_encode", snapshot_dir("turbo"), speech_ids=speech)["mu"]
    enc = debug._component(model_path("turbo"), "S3GenEncoder")
    prompt = debug._component(model_path("turbo"), "ModelFile").tensor_f32("voice.prompt_token").astype(np.int32)
    prefix = enc.make_prefix(prompt.reshape(-1))
    assert prefix.tokens == prompt.size and prefix.mu.shape == (80, 2 * prompt.size)
    got = np.concatenate([prefix.mu, enc.encode_after_prefix(prefix, speech)], axis=1)
    assert got.shape == ref.shape
    rel = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    print(f"cached encoder prefix, {n_tokens} tokens: rel {rel:.2e} max_abs {np.abs(got - ref).max():.2e}; "
          f"the definition's own effect rel {np.linalg.norm(ref - full) / np.linalg.norm(full):.4f}")
    assert rel <= 1e-5


def test_cached_prompt_prefix_refuses_bad_input():
    enc = debug._component(model_path("turbo"), "S3GenEncoder")
    with pytest.raises(engine_native.EngineError, match="at least"):
        enc.make_prefix(np.arange(3, dtype=np.int32))
    prefix = enc.make_prefix(np.arange(8, dtype=np.int32))
    with pytest.raises(engine_native.EngineError, match="outside"):
        enc.encode_after_prefix(prefix, np.asarray([6561], np.int32))
    with pytest.raises(engine_native.EngineError, match="at least one"):
        enc.encode_after_prefix(prefix, np.zeros(0, np.int32))


def test_out_of_range_tokens_raise():
    with pytest.raises(engine_native.EngineError, match="speech token 6561"):
        debug.s3gen_encode(model_path("turbo"), np.array([1, 6561], np.int32))
