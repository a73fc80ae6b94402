"""Native T3 (GPT-2, Turbo and Nano) against the PyTorch reference, full size, F32.

Tolerances: teacher-forced speech logits rel <= 1e-4 (seen: ~5e-7); greedy decoding
must give the reference's first 100 tokens exactly.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine_native import debug
from tests.helpers.models import model_path
from tests.reference.cache import snapshot_dir
from tests.reference.runner import run_stage

START_SPEECH = 6561


def _inputs(seed: int, n_text: int, n_speech: int):
    rng = np.random.default_rng(seed)
    text = rng.integers(0, 50276, n_text).astype(np.int32)
    speech = np.r_[START_SPEECH, rng.integers(0, 6561, n_speech - 1)].astype(np.int32)
    return text, speech


def _rel(got, ref):
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref)), float(np.abs(got - ref).max())


@pytest.mark.parametrize("variant", ["turbo", "nano"])
@pytest.mark.parametrize("seed,n_text,n_speech", [(1, 5, 1), (2, 23, 9), (3, 61, 40)])
def test_t3_logits_match_reference(variant, seed, n_text, n_speech):
    text, speech = _inputs(seed, n_text, n_speech)
    got = debug.t3_logits(model_path(variant), text, speech)
    ref = run_stage("t3_logits", snapshot_dir(variant), text_ids=text, speech_ids=speech)["logits"]
    assert got.shape == ref.shape == (n_speech, 6563)
    rel, max_abs = _rel(got, ref)
    print(f"{variant} t3_logits text={n_text} speech={n_speech}: rel {rel:.2e} max_abs {max_abs:.2e}")
    assert rel <= 1e-4


def test_t3_logits_with_a_given_voice():
    rng = np.random.default_rng(7)
    voice = {"speaker_emb": rng.standard_normal(256).astype(np.float32),
             "cond_prompt_speech_tokens": rng.integers(0, 6561, 150).astype(np.int32)}
    text, speech = _inputs(4, 11, 3)
    got = debug.t3_logits(model_path("nano"), text, speech, voice)
    ref = run_stage("t3_logits", snapshot_dir("nano"), text_ids=text, speech_ids=speech,
                    speaker_emb=voice["speaker_emb"], prompt_tokens=voice["cond_prompt_speech_tokens"])["logits"]
    rel, _ = _rel(got, ref)
    assert rel <= 1e-4


@pytest.mark.parametrize("variant", ["turbo", "nano"])
def test_t3_greedy_generation_matches_reference(variant):
    text, _ = _inputs(5, 17, 1)
    got = debug.t3_generate(model_path(variant), text, n=100)
    ref = run_stage("t3_generate", snapshot_dir(variant), text_ids=text, n=np.asarray(100))["tokens"]
    assert len(got) == len(ref) == 100
    same = int(np.argmax(got != ref)) if (got != ref).any() else 100
    print(f"{variant} greedy: first {same} of 100 tokens identical")
    assert same == 100


def test_bad_token_ids_raise_engine_error():
    import engine_native

    with pytest.raises(engine_native.EngineError, match="text token id 99999"):
        debug.t3_logits(model_path("nano"), [1, 99999], [START_SPEECH])
    with pytest.raises(engine_native.EngineError, match="speech token id"):
        debug.t3_logits(model_path("nano"), [1, 2], [START_SPEECH, 7000])
    with pytest.raises(engine_native.EngineError, match="speaker embedding"):
        debug.t3_logits(model_path("nano"), [1], [START_SPEECH],
                        {"speaker_emb": np.zeros(3, np.float32), "cond_prompt_speech_tokens": np.zeros(4, np.int32)})
