"""Native Multilingual T3 (Llama, chatterbox.t3.arch = llama) against the PyTorch reference, F32.

The reduced snapshot (`--size small`: 14 layers, FFN 1536, the real width, heads, vocabularies
and conditioning) by default, for CI; `CBS_MTL_SIZE=full` runs the same cases at the real
size (30 layers, FFN 4096).

Tolerances (MULTILINGUAL.md section 12):
- conditioning (speaker, perceiver, emotion) and the first forward's input embeddings: rel <= 1e-5;
- teacher-forced cond and uncond logits through `T3.inference`'s path: rel <= 1e-4; the
  alignment heads' attention over the text: max_abs <= 1e-5; the AlignmentStreamAnalyzer's
  decisions on them identical;
- the analyzer alone on synthetic attention covering each branch: identical logits and state;
- greedy generation (argmax after the processors): identical tokens up to the stop,
  forced stops included.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import engine_native
from engine_native import debug
from tests.helpers.models import model_path
from tests.reference.cache import snapshot_dir
from tests.reference.runner import run_stage

SIZE = os.environ.get("CBS_MTL_SIZE", "small")
SOT, EOT, START, STOP = 255, 0, 6561, 6562

_rng = np.random.default_rng(16)
TEXT_A = np.r_[SOT, _rng.integers(3, 2454, 10), EOT].astype(np.int32)          # S = 12
TEXT_B = np.r_[SOT, _rng.integers(3, 2454, 5), EOT].astype(np.int32)           # S = 7
# A text whose greedy path repeats a token at both sizes (small and full) with the
# settings of "greedy_repeat" below, so that the analyzer forces the stop.
TEXT_C = np.asarray([SOT, 212, 442, 583, 447, 1966, 2133, 1429, 99, 233, 817, EOT], np.int32)
VOICE = {"speaker_emb": (v := _rng.standard_normal(256).astype(np.float32)) / np.linalg.norm(v),
         "cond_prompt_speech_tokens": _rng.integers(0, 6561, 37).astype(np.int32)}
# Speech ids T3 may emit (>= 6563 included) with one token said twice: the analyzer forces
# the stop token at the step after the repeat.
FORCED_A = np.asarray([17, 4000, 7000, 6561, 250, 3, 3, 5000], np.int32)
FORCED_B = _rng.integers(0, 8194, 5).astype(np.int32)

# (stage, inputs) run by the reference in one process; the key names the case.
CASES = {
    "embeds_builtin": ("mtl_t3_embeds", dict(text_ids=TEXT_A)),
    "embeds_voice": ("mtl_t3_embeds", dict(text_ids=TEXT_B, exaggeration=0.9, cfg_weight=0.0,
                                           speaker_emb=VOICE["speaker_emb"],
                                           prompt_tokens=VOICE["cond_prompt_speech_tokens"])),
    "replay_builtin": ("mtl_t3_replay", dict(text_ids=TEXT_A, forced=FORCED_A)),
    "replay_voice": ("mtl_t3_replay", dict(text_ids=TEXT_B, forced=FORCED_B, exaggeration=0.3, cfg_weight=0.0,
                                           speaker_emb=VOICE["speaker_emb"],
                                           prompt_tokens=VOICE["cond_prompt_speech_tokens"])),
    "greedy": ("mtl_t3_generate", dict(text_ids=TEXT_A, n=30)),
    # A repetition penalty below 1 favours tokens already said: the greedy path says one
    # twice in a row within a few steps and the analyzer forces the stop.
    "greedy_repeat": ("mtl_t3_generate", dict(text_ids=TEXT_C, n=30, repetition_penalty=0.5, exaggeration=2.0)),
}


def _synthetic_alignment():
    """Attention sequences that drive each branch of the analyzer: the position walking
    through the text then a long tail on its last tokens (S = 9); a walk then a jump back
    to earlier text (alignment repetition, S = 14); random attention with discontinuities
    and a repeated token (S = 10)."""
    rng = np.random.default_rng(5)
    cases = []
    for S, n, kind in ((9, 24, "tail"), (14, 30, "back"), (10, 12, "random")):
        heads = np.full((n, 3, 2, S), np.nan, np.float32)
        rows = np.ones(n, np.int64)
        rows[0] = 2
        for k in range(n):
            for r in range(rows[k]):
                a = rng.uniform(0.0, 0.05, (3, S)).astype(np.float32)
                if kind == "tail":
                    a[:, min(k, S - 1)] += 0.6
                elif kind == "back":
                    a[:, min(k, S - 1) if k < 15 else 2] += 0.7
                else:
                    a = rng.uniform(0.0, 0.3, (3, S)).astype(np.float32)
                heads[k, :, r] = a
        last = rng.integers(0, 6561, n).astype(np.int32)
        last[0] = START
        if kind == "random":
            last[7] = last[6]
        logits = rng.standard_normal((n, 8194)).astype(np.float32) * 3
        cases.append(dict(n_text=S, heads=heads, rows=rows, logits=logits, last_tokens=last))
    return cases


ALIGN_CASES = _synthetic_alignment()


def _sampler_case():
    """Guidance + processors on random rows: the reference's defaults, then each processor
    pushed (top-p below 1, min-p high, negative and zero guidance, temperature 1)."""
    rng = np.random.default_rng(8)
    params = np.asarray([(0.5, 0.8, 2.0, 0.05, 1.0), (0.0, 1.0, 1.0, 0.0, 0.9), (1.5, 0.5, 1.3, 0.2, 0.8),
                         (-0.5, 1.2, 2.0, 0.0, 1.0)], np.float64)
    n = len(params)
    cond = (rng.standard_normal((n, 8194)) * 2).astype(np.float32)
    uncond = (cond + rng.standard_normal((n, 8194)) * 0.5).astype(np.float32)
    hist = [np.r_[START, rng.integers(0, 8194, k), 17, 17].astype(np.int64) for k in (0, 5, 40, 200)]
    for i in (0, 3):
        cond[i, 17] = np.abs(cond[i]).max()            # a seen token on top: the penalty must act
    offsets = np.cumsum([0] + [len(h) for h in hist])
    return dict(cond=cond, uncond=uncond, history=np.concatenate(hist), offsets=offsets, params=params)


SAMPLER_CASE = _sampler_case()


def _rel(got, ref):
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref)), float(np.abs(got - ref).max())


def _voice(inputs):
    if "speaker_emb" not in inputs:
        return None
    return {"speaker_emb": inputs["speaker_emb"], "cond_prompt_speech_tokens": inputs["prompt_tokens"]}


@pytest.fixture(scope="module")
def model():
    return model_path("mtl", size=SIZE)


@pytest.fixture(scope="module")
def ref():
    """Every reference output of this module, from one oracle process."""
    stages = ([stage for stage, _ in CASES.values()] + ["mtl_t3_alignment_steps"] * len(ALIGN_CASES)
              + ["mtl_t3_sampler"])
    args = [inputs for _, inputs in CASES.values()] + ALIGN_CASES + [SAMPLER_CASE]
    flat = {f"{i}.{k}": np.asarray(v) for i, inputs in enumerate(args) for k, v in inputs.items()}
    out = run_stage("mtl_t3_many", snapshot_dir("mtl", size=SIZE), stages=np.array(stages), **flat)
    per_case = [{k.split(".", 1)[1]: v for k, v in out.items() if k.split(".", 1)[0] == str(i)}
                for i in range(len(stages))]
    return dict(zip(CASES, per_case)), per_case[len(CASES):-1], per_case[-1]


def _args(inputs):
    return {k: float(inputs[k]) for k in ("exaggeration", "cfg_weight") if k in inputs}


@pytest.mark.parametrize("case", ["embeds_builtin", "embeds_voice"])
def test_conditioning_and_input_embeddings(model, ref, case):
    inputs, r = CASES[case][1], ref[0][case]
    cond = debug.t3_mtl_cond(model, _voice(inputs), exaggeration=inputs.get("exaggeration"))
    emb = debug.t3_mtl_inputs(model, inputs["text_ids"], _voice(inputs), **_args(inputs))
    assert cond.shape == r["cond"].shape == (34, 1024)
    assert emb.shape == r["inputs"].shape == (2, 34 + len(inputs["text_ids"]) + 2, 1024)
    rel_c, abs_c = _rel(cond, r["cond"])
    rel_i, abs_i = _rel(emb, r["inputs"])
    print(f"{SIZE} {case}: conditioning rel {rel_c:.2e} max_abs {abs_c:.2e}; inputs rel {rel_i:.2e} max_abs {abs_i:.2e}")
    assert rel_c <= 1e-5 and rel_i <= 1e-5


def test_rope_frequencies(model, ref):
    """theta 500000 with llama3 scaling (factor 8, low/high 1/4, original 8192), as the
    reference's config builds them."""
    got, want = debug.t3_mtl_rope(model), ref[0]["embeds_builtin"]["inv_freq"]
    rel, max_abs = _rel(got, want)
    print(f"{SIZE} rope inv_freq: rel {rel:.2e}, {int((got != want).sum())} of {len(want)} differ")
    assert got.shape == want.shape == (32,) and rel <= 1e-6


@pytest.mark.parametrize("case", ["replay_builtin", "replay_voice"])
def test_teacher_forced_logits_and_alignment(model, ref, case):
    inputs, r = CASES[case][1], ref[0][case]
    got = debug.t3_mtl_replay(model, inputs["text_ids"], inputs["forced"], _voice(inputs), **_args(inputs))
    n = len(inputs["forced"])
    assert got["logits"].shape == r["logits"].shape == (2, n + 1, 8194)
    for row, name in ((0, "cond"), (1, "uncond")):
        rel, max_abs = _rel(got["logits"][row], r["logits"][row])
        print(f"{SIZE} {case} {name} logits: rel {rel:.2e} max_abs {max_abs:.2e}")
        assert rel <= 1e-4
    assert got["attn"].shape == r["attn"].shape == (3, n + 2, len(inputs["text_ids"]))
    rel, max_abs = _rel(got["attn"], r["attn"])
    print(f"{SIZE} {case} alignment heads: rel {rel:.2e} max_abs {max_abs:.2e}")
    assert max_abs <= 1e-5
    for key in ("forced", "suppressed", "text_position", "complete"):
        assert list(got[key]) == list(r[key]), key
    if case == "replay_builtin":
        assert got["forced"][7] and not got["forced"][:7].any()   # the step after the repeated 3


def test_alignment_analyzer_branches(model, ref):
    seen = set()
    for inputs, r in zip(ALIGN_CASES, ref[1], strict=True):
        heads = [h[:, :rows] for h, rows in zip(inputs["heads"], inputs["rows"])]
        got = debug.alignment_steps(model, inputs["n_text"], heads, inputs["logits"], inputs["last_tokens"])
        for key in ("forced", "suppressed", "text_position", "complete"):
            assert list(got[key]) == list(r[key]), (inputs["n_text"], key)
        assert np.array_equal(got["logits"], r["logits"])
        seen |= {k for k in ("forced", "suppressed", "complete") if got[k].any()}
        seen |= {"unsuppressed"} if (~got["suppressed"] & ~got["forced"]).any() else set()
    assert seen == {"forced", "suppressed", "complete", "unsuppressed"}


def test_sampler_order_and_guidance(ref):
    c, want = SAMPLER_CASE, ref[2]["probs"]
    for i, (cfg, temperature, rep, min_p, top_p) in enumerate(c["params"]):
        hist = c["history"][c["offsets"][i]:c["offsets"][i + 1]]
        got = debug.sampler_process_mtl(c["cond"][i], c["uncond"][i], hist, cfg_weight=cfg, temperature=temperature,
                                        top_p=top_p, repetition_penalty=rep, min_p=min_p)
        e = np.exp(got.astype(np.float64) - got.max())
        probs = e / e.sum()
        rel, max_abs = _rel(probs, want[i])
        survivors = int(np.isfinite(got).sum())
        print(f"sampler {tuple(c['params'][i])}: {survivors} tokens kept, probs rel {rel:.2e} max_abs {max_abs:.2e}")
        assert np.array_equal(np.isfinite(got), want[i] > 0)
        assert rel <= 1e-5


@pytest.mark.parametrize("case", ["greedy", "greedy_repeat"])
def test_greedy_generation(model, ref, case):
    inputs, r = CASES[case][1], ref[0][case]
    sampling = {k: float(inputs[k]) for k in ("repetition_penalty", "exaggeration") if k in inputs}
    got = debug.t3_generate(model, inputs["text_ids"], n=int(inputs["n"]), **sampling)
    want = r["tokens"]
    same = int(np.argmax(got[:len(want)] != want)) if len(got) != len(want) or (got != want).any() else len(want)
    print(f"{SIZE} {case}: {len(want)} reference tokens, first {same} identical; forced stops at {np.nonzero(r['forced'])[0]}")
    assert got.tolist() == want.tolist()
    if case == "greedy_repeat":
        assert want[-1] == STOP and r["forced"][-1]


def test_stream_matches_generate(model):
    """The token stream (next() in pieces) gives generate()'s tokens."""
    from engine_native import _core
    t3 = debug._component(model, "T3")
    kw = dict(top_k=1, repetition_penalty=0.3)
    whole = t3.generate(TEXT_B.tolist(), 12, 0, **kw)
    s = t3.stream(TEXT_B.tolist(), 12, 0, **kw)
    parts = s.next(2) + s.next(3) + s.next(20)
    assert parts == whole and s.done
    assert isinstance(s, _core.SpeechTokenStream)


def test_cache_reuse_keys_the_prefix_on_exaggeration(model):
    """A cache keeps its conditioning prefix for the next stream only when voice and
    exaggeration are the same; guidance on or off shares it (both rows hold it)."""
    from engine_native import _core
    t3 = debug._component(model, "T3")
    cache = _core.T3Cache(t3)
    runs = [dict(exaggeration=0.5, cfg_weight=0.0), dict(exaggeration=0.5, cfg_weight=0.5),
            dict(exaggeration=50.0, cfg_weight=0.5), dict(exaggeration=50.0, cfg_weight=0.5)]
    fresh = [t3.generate(TEXT_A.tolist(), 6, 0, top_k=1, **kw) for kw in runs]
    assert fresh[1] != fresh[2]     # the exaggeration changes these tokens: a stale prefix would show
    for kw, want in zip(runs, fresh):
        s = t3.stream(TEXT_A.tolist(), 6, 0, top_k=1, cache=cache, **kw)
        got = s.next(6)
        s.close()
        assert got == want, kw


def test_guided_prompts_reuse_the_unconditional_text_bit_for_bit():
    """The unconditional row's text is position embeddings only, so after the same prefix its
    keys and values are the same for any text as long: a guided prompt on a cache that holds
    them (a quantised model on the CPU) computes that row from there on, beside row 0 with the
    two-row prompt's kernels. Its logits equal a fresh cache's bit for bit, for a shorter text,
    a longer one (the rest of its text computed) and one whose prompt takes other products
    (then both rows run), and a sampled stream on the cache says what a fresh one says."""
    from engine_native import _core
    t3 = debug._component(model_path("mtl", "q4_0", size=SIZE), "T3")
    rng = np.random.default_rng(3)
    texts = [np.r_[SOT, rng.integers(3, 2454, n - 2), EOT].tolist() for n in (90, 60, 75, 12, 90)]
    cache, speech = _core.T3Cache(t3), [START, 17, 400]
    for text in texts:
        got = t3.logits(text, speech, cfg_weight=0.5, cache=cache)
        want = t3.logits(text, speech, cfg_weight=0.5)
        assert got.shape == (2, 3, 8194) and np.array_equal(got, want), len(text)
    s = t3.stream(texts[1], 12, 5, cache=cache, cfg_weight=0.5)
    tokens = s.next(12)
    s.close()
    assert tokens == t3.generate(texts[1], 12, 5, cfg_weight=0.5)


def test_bad_inputs_raise_engine_errors(model):
    with pytest.raises(engine_native.EngineError, match="text token id 9999"):
        debug.t3_logits(model, [SOT, 9999, EOT], [START])
    with pytest.raises(engine_native.EngineError, match="speech token id"):
        debug.t3_logits(model, TEXT_B, [START, 9000])
    with pytest.raises(engine_native.EngineError, match="speaker embedding"):
        debug.t3_mtl_cond(model, {"speaker_emb": np.zeros(3, np.float32), "cond_prompt_speech_tokens": [1, 2]})
    with pytest.raises(engine_native.EngineError, match="at least one text token"):
        debug.t3_logits(model, [], [START])
    with pytest.raises(engine_native.EngineError, match="takes at most 2050"):
        debug.t3_logits(model, np.zeros(2051, np.int32), [START])
    with pytest.raises(engine_native.EngineError, match="exaggeration"):
        debug.t3_mtl_cond(model, None, exaggeration=float("nan"))
    with pytest.raises(engine_native.EngineError, match="cfg_weight"):
        debug.t3_generate(model, TEXT_B, n=2, cfg_weight=float("inf"))


@pytest.mark.parametrize("quant", ["f32", "q4_0"])
def test_step_with_joined_weights_gives_the_separate_products(monkeypatch, quant):
    """A step's q, k, v and gate, up products as one weight each (ModelFile.joins: they lie
    side by side) give the separate products' logits bit for bit on the CPU: each row's sum is
    its own, and RoPE over q's and k's heads together is the same arithmetic per value."""
    from engine_native import _core
    if quant == "q4_0" and not _core.system_info()["q4_kernel"]:
        pytest.skip("T3's Q4_0 weights go to ggml's repack buffer on this CPU: nothing joins there")
    path = str(model_path("mtl", size=SIZE, quant=quant))
    blk = "t3.blk.1."
    speech = [START, 17, 4000, 250, 3, 3, 5000]

    def logits():
        mf = _core.ModelFile(path, "cpu", 2)
        joined = (mf.joins([blk + f"self_attn.{p}_proj.weight" for p in "qkv"]),
                  mf.joins([blk + "mlp.gate_proj.weight", blk + "mlp.up_proj.weight"]))
        return joined, _core.T3(mf).step_logits(TEXT_A.tolist(), speech, **VOICE_ARGS)

    joined, together = logits()
    monkeypatch.setenv("CBS_JOIN_WEIGHTS", "0")
    apart_flags, apart = logits()
    assert joined == (True, True) and apart_flags == (False, False)
    assert together.shape == apart.shape and np.array_equal(together, apart)


VOICE_ARGS = {"speaker_emb": VOICE["speaker_emb"], "prompt_tokens": VOICE["cond_prompt_speech_tokens"]}
