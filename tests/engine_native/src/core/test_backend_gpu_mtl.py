"""The Multilingual model on a GPU (CUDA, Vulkan) against the same engine on the CPU.

As test_backend_gpu.py for Turbo: the CPU engine is proven against the PyTorch reference
stage by stage (test_t3_llama, test_s3gen_cfm_mtl, test_engine_mtl), so a device stage that
matches the CPU stage on the same weights and inputs matches the reference within the sum of
both tolerances. The seams are the Multilingual ones: the Llama T3 with its two guidance rows
and its alignment heads (an explicit softmax beside the flash attention), guided greedy
tokens (the alignment analyzer fed from the device), the standard CFM's guided step batched
(one batch of two) and not, a stream's cached CFM prefix, and the engine's synthesis.

Needs a GPU device (CBS_TEST_DEVICE names one), skipped elsewhere (CI). The model:
CBS_TEST_MTL_MODEL (the device machine converts a full-size random snapshot), else the cached
small random-weight MTL F32 of the CPU tests.

Tolerances are the measured figures with room (every figure is printed): the device's flash
attention rounds K, V and the attention product through F16 and its products sum in another
order, so F32 stages agree to about 1e-6..1e-4, not bit for bit.
"""

from __future__ import annotations


import numpy as np
import pytest

from engine_native import _core
# The GPU device (skips without one) and the (cpu, device) Engine pair over this module's model_file.
from tests.engine_native.src.core.test_backend_gpu import (_rel, check_stream_agrees_with_batch,  # noqa: F401
                                                        check_synthesis_matches_the_cpu, device, engines,
                                                        model_from_env)

gpu = pytest.mark.gpu
SOT, EOT = 255, 0


@pytest.fixture(scope="module")
def model_file():
    return model_from_env("CBS_TEST_MTL_MODEL", "mtl", size="small")


@pytest.fixture(scope="module")
def pair(device, model_file):
    """(cpu ModelFile, device ModelFile) of the same Multilingual file."""
    cpu = _core.ModelFile(model_file, device="cpu")
    assert _core.T3(cpu).arch == "llama", f"{model_file} is not a Multilingual model"
    return cpu, _core.ModelFile(model_file, device=device)


def _text(mf, n=24, seed=0):
    rng = np.random.default_rng(seed)
    return [SOT, *rng.integers(3, mf.get_int("chatterbox.t3.text_vocab"), n).tolist(), EOT]


@gpu
def test_mtl_t3_conditioning_logits_and_alignment_heads_match_the_cpu(pair):
    cpu, dev = pair
    a, b = _core.T3(cpu), _core.T3(dev)
    rel, mx = _rel(b.mtl_conditioning(), a.mtl_conditioning())
    print(f"\nMTL T3 conditioning: rel {rel:.2e}, max_abs {mx:.2e}")
    assert rel < 1e-3  # the Perceiver's attention through the device's flash attention (F16 K, V)
    text = _text(cpu)
    start = cpu.get_int("chatterbox.t3.start_speech_token")
    speech = [start, *np.random.default_rng(1).integers(0, 6561, 40).tolist()]
    (la, ha), (lb, hb) = a.logits(text, speech, alignment=True), b.logits(text, speech, alignment=True)
    assert la.shape == lb.shape and la.shape[0] == 2
    for row, name in enumerate(("cond", "uncond")):
        rel, mx = _rel(lb[row], la[row])
        print(f"MTL T3 logits {name} {la[row].shape}: rel {rel:.2e}, max_abs {mx:.2e}")
        assert rel < 2e-3  # Turbo's bound (test_backend_gpu.py); measured 1.1e-3 on CUDA, greedy tokens identical
    rel, mx = _rel(hb, ha)
    print(f"MTL T3 alignment heads {ha.shape}: rel {rel:.2e}, max_abs {mx:.2e}")
    assert mx < 1e-4


@gpu
def test_mtl_t3_guided_greedy_tokens_match_the_cpu(pair):
    """T3.inference's loop on the device: two guidance rows, the processors, the alignment
    analyzer fed from the device's heads; greedy tokens identical to the CPU's."""
    cpu, dev = pair
    text = _text(cpu, seed=2)
    n = 100
    ga = _core.T3(cpu).generate(text, n, 0, top_k=1)
    gb = _core.T3(dev).generate(text, n, 0, top_k=1)
    same = next((i for i, (x, y) in enumerate(zip(ga, gb)) if x != y), min(len(ga), len(gb)))
    print(f"\nMTL T3 guided greedy: {same} of {len(ga)} tokens identical (device {len(gb)})")
    assert list(gb) == list(ga)


def _cfm_inputs(cpu, n_speech=80, seed=3):
    prompt = cpu.tensor_f32("voice.prompt_token").astype(np.int32).reshape(-1)
    speech = np.random.default_rng(seed).integers(0, 6561, n_speech).astype(np.int32)
    mu = _core.S3GenEncoder(cpu).encode(np.concatenate([prompt, speech]))
    feat = cpu.tensor_f32("voice.prompt_feat").reshape(-1, mu.shape[0])
    emb = cpu.tensor_f32("voice.embedding").reshape(-1)
    return prompt, speech, mu, feat, emb


@gpu
def test_mtl_guided_cfm_matches_the_cpu_batched_and_not(pair):
    cpu, dev = pair
    prompt, speech, mu, feat, emb = _cfm_inputs(cpu)
    mu_dev = _core.S3GenEncoder(dev).encode(np.concatenate([prompt, speech]))
    rel, mx = _rel(mu_dev, mu)
    print(f"\nS3Gen encoder mu {mu.shape}: rel {rel:.2e}, max_abs {mx:.2e}")
    assert rel < 1e-4
    rng = np.random.default_rng(4)
    x = rng.standard_normal(mu.shape, dtype=np.float32)
    c_cpu, c_dev = _core.S3GenCfm(cpu), _core.S3GenCfm(dev)
    for va, vb, name in zip(c_cpu.velocities(mu, feat, emb, x, 0.3, 0.0), c_dev.velocities(mu, feat, emb, x, 0.3, 0.0),
                            ("cond", "uncond")):
        rel, mx = _rel(vb, va)
        print(f"CFM velocity {name} at t 0.3: rel {rel:.2e}, max_abs {mx:.2e}")
        assert rel < 1e-4
    x0 = rng.standard_normal(mu.shape, dtype=np.float32)
    want = c_cpu.sample(mu, feat, emb, x0)
    for batched in (True, False):
        c_dev.guidance_batched = batched
        got = c_dev.sample(mu, feat, emb, x0)
        rel, mx = _rel(got, want)
        print(f"CFM mel {want.shape} ({c_cpu.n_timesteps} guided steps, batched {batched}): rel {rel:.2e}, max_abs {mx:.2e}")
        assert rel < 1e-4


@gpu
def test_mtl_cfm_stream_prefix_matches_the_cpu(pair):
    """A stream's cached prefix (both guidance rows' keys and values per step) made and used
    on the device against the CPU's."""
    cpu, dev = pair
    prompt, speech, mu, feat, emb = _cfm_inputs(cpu, n_speech=50, seed=5)
    P = feat.shape[0]
    rng = np.random.default_rng(6)
    x0 = rng.standard_normal(mu.shape, dtype=np.float32)
    outs = []
    for mf in (cpu, dev):
        cfm = _core.S3GenCfm(mf)
        prefix = cfm.make_prefix(np.ascontiguousarray(mu[:, :P]), feat, emb, np.ascontiguousarray(x0[:, :P]))
        outs.append(cfm.sample_after_prefix(prefix, np.ascontiguousarray(mu[:, P:]), np.ascontiguousarray(x0[:, P:])))
    rel, mx = _rel(outs[1], outs[0])
    print(f"\nCFM after a cached prefix {outs[0].shape}: rel {rel:.2e}, max_abs {mx:.2e}")
    assert rel < 1e-4


# --- the public API on the device -------------------------------------------------------------------


@gpu
def test_mtl_synthesis_on_the_device_matches_the_cpu(engines, device):
    check_synthesis_matches_the_cpu(engines, device, "MTL ", language="en")


@gpu
def test_mtl_stream_agrees_with_batch_on_the_device(engines):
    check_stream_agrees_with_batch(engines, "MTL ", language="en")


@pytest.fixture(scope="module")
def decoder_file():
    """A Turbo model, whose S3Gen and HiFT decode the Multilingual tokens (test_engine_decoder.py)."""
    return model_from_env("CBS_TEST_MODEL", "turbo")


@gpu
def test_mtl_with_a_decoder_on_the_device_matches_the_cpu(device, model_file, decoder_file):
    """`Engine(mtl, decoder=turbo)` loads the decoder's S3Gen and HiFT on the model's device:
    its synthesis and stream there against the same pair on the CPU."""
    from engine_native import Engine

    cpu = Engine(model_file, device="cpu", decoder=decoder_file)
    dev = Engine(model_file, device=device, decoder=decoder_file)
    pair = cpu, dev
    assert dev.info["decoder"] == decoder_file and dev.stages.decoder.file.device == device
    check_synthesis_matches_the_cpu(pair, device, "MTL + Turbo decoder ", language="en")
    check_stream_agrees_with_batch(pair, "MTL + Turbo decoder ", language="en")
