"""The bench's hardware bounds (engine_native/bounds.py): the work they count against the
reference model and the GGUF's own hyperparameters, and the host rates' measurement.

- The CFM's multiply-adds a pass against the reference estimator's: torch's FlopCounterMode
  for its convolutions and linear layers plus its Attention modules' two products counted at
  each call, over two lengths (rel <= 1e-3: torch also counts the per-pass time embedding,
  which the bound leaves out).
- T3's bytes a step against the parameter count its GGUF's hyperparameters give (GPT-2's
  blocks, final norm and speech head), in F32 and Q4_0.
"""

from __future__ import annotations

import numpy as np
import pytest

from engine_native import EngineError, _core, bounds
from engine_native.gguf_header import read_header
from tests.helpers.models import model_path
from tests.reference.cache import snapshot_dir
from tests.reference.runner import run_stage


@pytest.mark.parametrize("frames", [120, 700])
def test_cfm_multiply_adds_match_the_reference_estimators(frames):
    ref = run_stage("cfm_flops", snapshot_dir("turbo"), frames=np.asarray(frames))
    assert int(ref["attention_calls"]) > 0
    ref_macs = (int(ref["flops"]) + int(ref["attention_flops"])) / 2
    for quant in ("f32", "q4_0"):  # the count comes from shapes, whatever the weights' type
        ours = bounds.cfm_macs_per_pass(read_header(model_path("turbo", quant=quant)), frames)
        print(f"CFM {frames} frames ({quant}): {ours / 1e9:.3f} G multiply-adds, reference {ref_macs / 1e9:.3f} G")
        assert abs(ours / ref_macs - 1) <= 1e-3


def _hparam(kv: dict, suffix: str) -> int:
    (value,) = [v for k, v in kv.items() if k.endswith(suffix)]
    return int(value)


def test_t3_step_bytes_are_its_blocks_norm_and_head():
    header = read_header(model_path("turbo"))
    kv = header.kv
    layers, d = _hparam(kv, "t3.n_layer"), _hparam(kv, "t3.n_embd")
    head = [t for t in header.tensors if t.name == "t3.speech_head.weight"][0]
    vocab = int(head.shape[1])
    # a GPT-2 block: c_attn 3d^2 + 3d, c_proj d^2 + d, c_fc 4d^2 + 4d, mlp c_proj 4d^2 + d, two norms 4d
    params = layers * (12 * d * d + 13 * d) + 2 * d + d * vocab + vocab
    f32 = bounds.t3_step_bytes(header)
    assert f32 == 4 * params
    q4_header = read_header(model_path("turbo", quant="q4_0"))
    q4 = bounds.t3_step_bytes(q4_header)
    # Q4_0 packs 32 weights in 18 bytes; biases and norms stay f32
    assert 0.14 < q4 / f32 < 0.16
    # the KV cache: keys and values of every layer, f16 beside quantised weights, f32 beside f32
    assert bounds.t3_kv_bytes_per_position(header, 1) == layers * 2 * d * 4
    assert bounds.t3_kv_bytes_per_position(q4_header, 2) == layers * 2 * d * 2 * 2


def test_t3_prompt_positions_follow_the_conditioning():
    turbo = bounds.t3_prompt_positions(read_header(model_path("turbo")), voice_prompt_tokens=150, text_tokens=20)
    assert turbo == 1 + 150 + 20 + 1
    # the Multilingual perceiver gives its queries whatever the voice prompt's length
    mtl = read_header(model_path("mtl", size="small"))
    assert bounds.t3_prompt_positions(mtl, 150, 20) == bounds.t3_prompt_positions(mtl, 40, 20)


def test_host_rates_are_measured_and_checked():
    rates = bounds.host_rates(1, rounds=1)
    assert rates["read_gbps"] > 0 and rates["fma_lanes"] in (8, 16)
    assert rates["fma_gmacs"] > 0 or rates["fma_lanes"] == 16 and "AVX512" not in _core.system_info()["cpu_features"]
    with pytest.raises(EngineError, match="threads"):
        _core.host_read_gbps(0, 64, 1)
    with pytest.raises(EngineError, match="lanes"):
        _core.host_f32_fma_gmacs(1, 4, 1)
