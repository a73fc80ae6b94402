"""T3's batched decoding step (T3Model::step_batch, gpt2): B sessions with their own KV caches,
prompts and lengths stepped in one graph give each session the logits and tokens of its solo
steps; sessions join and leave mid-way.

On the CPU (CI): Nano, Q4_0 and F32. With CBS_TEST_DEVICE (e.g. cuda:0) the same tests run on
that device with the model CBS_TEST_MODEL names (a full-size Turbo GGUF; the device machine's)
and its Q4_0 beside it where CBS_TEST_MODEL_Q4 names one.

Tolerance: the batched step runs the products over B columns, whose kernels may round
differently from a single column's (the CPU's fused one-column kernel, t3/decode_step.h; a
GPU's matrix-vector kernel), and attends over the whole cache (masked) instead of a padded
view: logits rel <= 1e-4 and max_abs <= 2e-3 against the solo steps (CPU seen: printed below),
greedy tokens identical.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from engine_native import _core
from tests.helpers.models import model_path

START_SPEECH = 6561
# A short voice prompt: the prompts, not the steps, are most of these tests' time.
PROMPT = np.random.default_rng(1).integers(0, 6561, 24).astype(np.int32)
REL_TOL, MAX_ABS_TOL = 1e-4, 2e-3


def _models():
    dev = os.environ.get("CBS_TEST_DEVICE")
    if dev:
        paths = [os.environ[k] for k in ("CBS_TEST_MODEL", "CBS_TEST_MODEL_Q4") if os.environ.get(k)]
        return [(dev, p) for p in paths]
    return [("cpu", "q4_0"), ("cpu", "f32")]


@pytest.fixture(scope="module", params=_models(), ids=lambda m: f"{m[0]}-{os.path.basename(m[1])}")
def t3(request):
    device, which = request.param
    path = which if os.path.sep in which else str(model_path("nano", which))
    model = _core.ModelFile(path, device=device, threads=2)
    return _core.T3(model)


def _rel(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref)), float(np.abs(got - ref).max())


def _sessions(n: int, seed: int = 3):
    """n sessions with different texts and speech lengths."""
    rng = np.random.default_rng(seed)
    texts = [rng.integers(0, 50276, 8 + 5 * i).tolist() for i in range(n)]
    speeches = [[START_SPEECH] + rng.integers(0, 6561, 10 + 5 * i).tolist() for i in range(n)]
    return texts, speeches


def _check(t3, texts, speeches, join_at=()):
    together = t3.step_logits_together(texts, speeches, list(join_at), prompt_tokens=PROMPT)
    worst = (0.0, 0.0)
    for b, (text, speech) in enumerate(zip(texts, speeches)):
        solo = t3.step_logits(text, speech, prompt_tokens=PROMPT)
        assert together[b].shape == solo.shape
        r, m = _rel(together[b], solo)
        worst = max(worst[0], r), max(worst[1], m)
        assert r <= REL_TOL and m <= MAX_ABS_TOL, (b, r, m)
        # The greedy choice at every step is the solo one.
        assert np.array_equal(together[b].argmax(axis=1), solo.argmax(axis=1)), b
    return worst


def test_sessions_stepped_together_give_their_solo_logits(t3):
    texts, speeches = _sessions(4)
    r, m = _check(t3, texts, speeches)
    print(f"4 sessions together vs solo: worst rel {r:.2e}, max_abs {m:.2e}")


def test_a_session_joins_and_one_leaves_midway(t3):
    """Three sessions: the third prompts at round 9, when the first two are stepping; the
    first (shortest) leaves at round 13; the batch's graph changes each time."""
    texts, speeches = _sessions(3, seed=7)
    r, m = _check(t3, texts, speeches, join_at=(0, 2, 9))
    print(f"join / leave mid-way vs solo: worst rel {r:.2e}, max_abs {m:.2e}")


def test_streams_next_together_give_their_solo_tokens(t3):
    """Token streams with their own seeds (default sampler) and one greedy, stepped together
    until each ends: each one's tokens are its solo stream's; a stream closed mid-way leaves
    and the others go on."""
    texts, _ = _sessions(4, seed=5)
    seeds = [11, 12, 13, 14]
    solo = [t3.generate(texts[i], 30, seeds[i], top_k=1 if i == 3 else None, prompt_tokens=PROMPT) for i in range(4)]
    streams = [t3.stream(texts[i], 30, seeds[i], top_k=1 if i == 3 else None, prompt_tokens=PROMPT)
               for i in range(4)]
    got = [[] for _ in streams]
    first = t3.next_together(streams, 5)
    for i in range(4):
        got[i] += first[i]
    streams[1].close()  # leaves: a closed stream gives nothing more
    while not all(s.done for s in streams):
        for i, toks in enumerate(t3.next_together(streams, 3)):
            got[i] += toks
    for i in (0, 2, 3):
        assert got[i] == solo[i], i
    assert got[1] == solo[1][:5]
    assert t3.next_together(streams, 2) == [[], [], [], []]


def test_next_together_refuses_bad_input(t3):
    texts, _ = _sessions(1)
    s = t3.stream(texts[0], 10, 1)
    with pytest.raises(Exception, match="appears twice"):
        t3.next_together([s, s], 1)
    with pytest.raises(TypeError):
        t3.next_together([object()], 1)
    s.close()


@pytest.fixture(scope="module")
def mtl():
    """The Multilingual (llama) T3, small, F32, on the CPU (or CBS_TEST_DEVICE with CBS_TEST_MTL_MODEL)."""
    dev = os.environ.get("CBS_TEST_DEVICE")
    if dev and not os.environ.get("CBS_TEST_MTL_MODEL"):
        pytest.skip("no Multilingual model named for the device (CBS_TEST_MTL_MODEL)")
    path = os.environ.get("CBS_TEST_MTL_MODEL") or str(model_path("mtl", "f32", size="small"))
    model = _core.ModelFile(path, device=dev or "cpu", threads=2)
    t3 = _core.T3(model)
    vocab = {k: model.get_int(f"chatterbox.t3.{k}") for k in ("text_vocab", "speech_vocab", "start_speech_token")}
    return t3, vocab


def test_multilingual_sessions_stepped_together(mtl):
    """The llama T3's batched step: one-row sessions' logits against their solo steps (a join and a
    leave mid-way), and guided streams (two rows each, the alignment analyzer on) stepped together
    give their solo tokens."""
    t3, vocab = mtl
    rng = np.random.default_rng(9)
    texts = [rng.integers(0, vocab["text_vocab"], 6 + 4 * i).tolist() for i in range(3)]
    speeches = [[vocab["start_speech_token"]] + rng.integers(0, vocab["start_speech_token"], 8 + 4 * i).tolist()
                for i in range(3)]
    prompt = rng.integers(0, vocab["start_speech_token"], 20).astype(np.int32)
    together = t3.step_logits_together(texts, speeches, [0, 3, 1], prompt_tokens=prompt)
    worst = (0.0, 0.0)
    for b in range(3):
        solo = t3.step_logits(texts[b], speeches[b], prompt_tokens=prompt)
        r, m = _rel(together[b], solo)
        worst = max(worst[0], r), max(worst[1], m)
        assert r <= REL_TOL and m <= MAX_ABS_TOL, (b, r, m)
        assert np.array_equal(together[b].argmax(axis=1), solo.argmax(axis=1)), b
    print(f"Multilingual sessions together vs solo: worst rel {worst[0]:.2e}, max_abs {worst[1]:.2e}")

    seeds = [21, 22, 23]
    solo_tokens = [t3.generate(texts[i], 25, seeds[i], prompt_tokens=prompt, cfg_weight=0.5) for i in range(3)]
    streams = [t3.stream(texts[i], 25, seeds[i], prompt_tokens=prompt, cfg_weight=0.5) for i in range(3)]
    got = [[] for _ in streams]
    while not all(s.done for s in streams):
        for i, toks in enumerate(t3.next_together(streams, 4)):
            got[i] += toks
    assert got == solo_tokens
