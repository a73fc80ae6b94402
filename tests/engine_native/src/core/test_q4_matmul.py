"""T3's CPU kernels of our own. Q4_0 matrix products on the CPU through the engine's own kernel (cpu/q4_matmul.h,
AVX-512 VNNI or AVX2) and, from q4_kernel_max_columns columns on, AMX or sgemm on the converted weights (64 with
AMX) or, without AMX, the int8 tile (cpu/q8_gemm.h: from 48 on AVX-512 VNNI, 64 in its AVX2 form), against ggml's
Q4_0 kernel and against the exact product of the dequantised weights (float64), on random shapes that
include a row count not divisible by 8 (the kernel's row groups) or 16 (the tile's), and a block count that is
odd and not a multiple of 16 (the kernel's tails).

Tolerances: the kernel and the int8 tile against ggml's kernel rel <= 1e-5 (all round the
activations to Q8_0 the same way and sum the same integers; only the float sums' order
differs; seen ~1e-7); the sgemm path against the exact product rel <= 1e-5 (it keeps the
activations f32, where ggml rounds them to 8 bits: ggml's own error against the exact
product, ~5e-3, is printed beside).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import engine_native
from engine_native import _core
from tests.helpers.models import model_path

needs_kernel = pytest.mark.skipif(not engine_native.system_info().get("q4_kernel"),
                                  reason="this CPU has neither AVX-512 VNNI nor AVX2: T3 runs on ggml's kernels")


def _rel(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@needs_kernel
@pytest.mark.parametrize("n,k,m", [(1024, 1024, 1), (4099, 1056, 1), (70, 4096, 2), (515, 544, 7), (301, 1056, 20),
                                   (301, 1056, 70), (301, 1056, 300), (4099, 1056, 130)])
def test_q4_products(n, k, m):
    rng = np.random.default_rng(n + k + m)
    w = rng.standard_normal((n, k)).astype(np.float32) * 0.05
    x = rng.standard_normal((m, k)).astype(np.float32)
    ours, ggml, w_dq = _core.q4_matmul_pair(w, x, threads=2)
    exact = (x.astype(np.float64) @ w_dq.astype(np.float64).T)
    print(f"N={n} K={k} M={m}: ours vs ggml rel {_rel(ours, ggml):.2e}, vs exact {_rel(ours, exact):.2e}, "
          f"ggml vs exact {_rel(ggml, exact):.2e}")
    assert ours.shape == ggml.shape == (m, n)
    info = _core.system_info()
    if m < info["q4_kernel_max_columns"] or info["t3_prompt_products"].startswith("int8 tile"):  # ggml's integers
        assert _rel(ours, ggml) <= 1e-5
    else:  # sgemm or AMX
        assert _rel(ours, exact) <= 1e-5


_PROMPT_PRODUCTS = """
import json, numpy as np
from engine_native import _core
out = {"products": _core.system_info()["t3_prompt_products"], "rel": []}
for n, k, m in [(301, 1056, 300), (4099, 1056, 130)]:
    rng = np.random.default_rng(n + k + m)
    w = rng.standard_normal((n, k)).astype(np.float32) * 0.05
    x = rng.standard_normal((m, k)).astype(np.float32)
    ours, ggml, w_dq = _core.q4_matmul_pair(w, x, threads=2)
    exact = x.astype(np.float64) @ w_dq.astype(np.float64).T
    out["rel"].append(float(np.linalg.norm(ours - exact) / np.linalg.norm(exact)))
print(json.dumps(out))
"""


@needs_kernel
def test_q4_prompt_products_without_the_int8_tile():
    """Where the int8 tile takes a prompt's products, the path it replaced (CBS_Q8_TILE=0: sgemm
    on the converted weights, or AMX) in a process of its own, against the exact product as above:
    rel <= 1e-5. Elsewhere the tests above ran it already."""
    if not _core.system_info()["t3_prompt_products"].startswith("int8 tile"):
        pytest.skip("the int8 tile does not run here: the tests above cover the prompt's products")
    env = dict(os.environ, CBS_Q8_TILE="0")
    done = subprocess.run([sys.executable, "-c", _PROMPT_PRODUCTS], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"{out['products']} vs exact rel {', '.join(f'{r:.2e}' for r in out['rel'])}")
    assert not out["products"].startswith("int8 tile") and max(out["rel"]) <= 1e-5


_AVX2_KERNEL = """
import json, sys, numpy as np
from engine_native import _core
out = []
for n, k, m in [(1024, 1024, 1), (4099, 1056, 1), (515, 544, 7), (301, 1056, 300), (4099, 1056, 130)]:
    rng = np.random.default_rng(n + k + m)
    w = rng.standard_normal((n, k)).astype(np.float32) * 0.05
    x = rng.standard_normal((m, k)).astype(np.float32)
    ours, ggml, _ = _core.q4_matmul_pair(w, x, threads=2)
    out.append(float(np.linalg.norm(ours - ggml) / np.linalg.norm(ggml)))
print(json.dumps([_core.system_info()["t3_prompt_products"], out]))
"""


@needs_kernel
def test_q4_products_avx2_kernel():
    """The AVX2 forms of the kernel and of the int8 tile (CBS_Q4_KERNEL=avx2, CBS_Q8_TILE=avx2,
    read once per process: a process of its own) against ggml's kernel, as above: rel <= 1e-5.
    On an AVX2-only CPU they are what the tests above ran already; on an AVX-512 one this is what
    covers them (with AMX the tile does not run: the prompt's products are AMX's)."""
    env = dict(os.environ, CBS_Q4_KERNEL="avx2", CBS_Q8_TILE="avx2")
    done = subprocess.run([sys.executable, "-c", _AVX2_KERNEL], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    products, rels = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"AVX2 kernel and {products} vs ggml rel {', '.join(f'{r:.2e}' for r in rels)}")
    limit = 3 if products == "AMX" else len(rels)  # AMX keeps the activations f32 (checked above)
    assert products in ("AMX", "int8 tile, AVX2") and max(rels[:limit]) <= 1e-5


@needs_kernel
def test_bad_shapes_raise():
    with pytest.raises(engine_native.EngineError, match="multiple of 32"):
        _core.q4_matmul_pair(np.zeros((4, 33), np.float32), np.zeros((1, 33), np.float32))


@pytest.mark.parametrize("heads,n,valid,d", [(16, 512, 300, 64), (16, 256, 1, 64), (3, 100, 77, 48)])
def test_decode_attention(heads, n, valid, d):
    """T3's one-query attention over an f16 cache (t3/decode_attention.h; any CPU) against the
    exact softmax attention (float64) over the same f16-rounded keys and values: rel <= 1e-6
    (seen ~1e-7); ggml's flash attention, which sums the values in f16, printed beside."""
    rng = np.random.default_rng(heads * n + valid)
    q = rng.standard_normal((heads, d)).astype(np.float32)
    k = rng.standard_normal((heads, n, d)).astype(np.float32)
    v = rng.standard_normal((heads, n, d)).astype(np.float32)
    ours, flash = _core.t3_decode_attention_pair(q, k, v, valid, threads=2)
    k16, v16 = k.astype(np.float16).astype(np.float64)[:, :valid], v.astype(np.float16).astype(np.float64)[:, :valid]
    s = np.einsum("hd,hnd->hn", q.astype(np.float64), k16) / np.sqrt(d)
    p = np.exp(s - s.max(axis=1, keepdims=True))
    exact = np.einsum("hn,hnd->hd", p / p.sum(axis=1, keepdims=True), v16)
    print(f"H={heads} n={n} valid={valid} D={d}: ours rel {_rel(ours, exact):.2e}, ggml flash {_rel(flash, exact):.2e}")
    assert _rel(ours, exact) <= 1e-6


@pytest.mark.parametrize("heads,n_q,first,d", [(16, 30, 400, 64), (3, 63, 0, 48), (2, 1, 9, 64)])
def test_decode_attention_short_prompt(heads, n_q, first, d):
    """The same kernel for a short prompt's queries (below ggml's tiled flash attention: a Turbo
    sentence's), each with its own causal mask row: rel <= 1e-6 of float64 over the f16 cache."""
    rng = np.random.default_rng(heads * n_q + first)
    n = first + n_q + 5
    q = rng.standard_normal((heads, n_q, d)).astype(np.float32)
    k = rng.standard_normal((heads, n, d)).astype(np.float32)
    v = rng.standard_normal((heads, n, d)).astype(np.float32)
    ours = _core.t3_prompt_attention(q, k, v, first)
    k16, v16 = k.astype(np.float16).astype(np.float64), v.astype(np.float16).astype(np.float64)
    s = np.einsum("hqd,hnd->hqn", q.astype(np.float64), k16) / np.sqrt(d)
    s[:, np.arange(n)[None, :] > first + np.arange(n_q)[:, None]] = -np.inf
    p = np.exp(s - s.max(axis=2, keepdims=True))
    exact = np.einsum("hqn,hnd->qhd", p / p.sum(axis=2, keepdims=True), v16)
    print(f"H={heads} n_q={n_q} first={first} D={d}: rel {_rel(ours, exact):.2e}")
    assert ours.shape == (n_q, heads, d)
    assert _rel(ours, exact) <= 1e-6


def test_decode_attention_rows():
    """The same attention over two rows at once (a guided Multilingual step: each row over its
    own cache half, one op for both): each row bit for bit the row alone, and within rel 1e-6 of
    float64 as above."""
    rng = np.random.default_rng(5)
    heads, n, valid, d = 16, 256, 130, 64
    q = rng.standard_normal((2, heads, d)).astype(np.float32)
    k = rng.standard_normal((2, heads, n, d)).astype(np.float32)
    v = rng.standard_normal((2, heads, n, d)).astype(np.float32)
    both, flash_both = _core.t3_decode_attention_pair(q, k, v, valid, threads=2)
    assert both.shape == (2, heads, d)
    for r in range(2):
        alone, flash_alone = _core.t3_decode_attention_pair(q[r], k[r], v[r], valid, threads=2)
        assert np.array_equal(both[r], alone)
        assert np.array_equal(flash_both[r], flash_alone)
        k16, v16 = (x.astype(np.float16).astype(np.float64)[r, :, :valid] for x in (k, v))
        s = np.einsum("hd,hnd->hn", q[r].astype(np.float64), k16) / np.sqrt(d)
        p = np.exp(s - s.max(axis=1, keepdims=True))
        exact = np.einsum("hn,hnd->hd", p / p.sum(axis=1, keepdims=True), v16)
        assert _rel(both[r], exact) <= 1e-6


@needs_kernel
def test_fused_decoding_step_mtl(monkeypatch):
    """The Multilingual T3's Q4_0 decoding step with guidance (two rows), fused (t3/decode_step.h:
    RMSNorm into the products, residual adds after them, RoPE as one node, the cache writes
    inside t3/decode_attention) against the same step as separate ggml operations
    (CBS_T3_FUSED=0, read per graph built): teacher-forced logits of both rows over 30 steps
    bit-identical (the fused arithmetic is the separate operations' in the same order)."""
    path = str(model_path("mtl", "q4_0", size="small"))
    rng = np.random.default_rng(12)
    text = rng.integers(3, 600, 17).tolist()
    speech = [6561] + rng.integers(0, 6561, 29).tolist()
    model = _core.ModelFile(path, threads=2)
    runs = {}
    for fused in ("1", "0"):
        monkeypatch.setenv("CBS_T3_FUSED", fused)
        runs[fused] = _core.T3(model).step_logits(text, speech, cfg_weight=0.5)
    assert runs["1"].shape == (30, 2 * 8194)
    assert np.array_equal(runs["1"], runs["0"])


@needs_kernel
@pytest.mark.parametrize("variant", ["turbo", "nano"])
def test_fused_decoding_step(variant, monkeypatch):
    """A Q4_0 model's decoding step with its layer norms, biases, residual adds and cache writes
    folded into the products and the attention (t3/decode_step.h) against the same step as
    separate ggml operations (CBS_T3_FUSED=0, read per graph built): teacher-forced logits over
    40 steps after the built-in voice's prompt. The fused arithmetic is the separate operations'
    in the same order, so the logits must be bit-identical (any difference fails), with 1 and 2
    threads; greedy tokens identical over 60 steps."""
    path = str(model_path(variant, "q4_0"))
    rng = np.random.default_rng(11)
    text = rng.integers(0, 50276, 19).tolist()
    speech = [6561] + rng.integers(0, 6561, 39).tolist()

    def run(model, fused: str):
        monkeypatch.setenv("CBS_T3_FUSED", fused)
        t3 = _core.T3(model)
        return t3.step_logits(text, speech), np.asarray(t3.generate(text, 60, 0, top_k=1))

    for threads in (1, 2):
        model = _core.ModelFile(path, threads=threads)
        (fused, fused_tokens), (separate, separate_tokens) = run(model, "1"), run(model, "0")
        print(f"{variant} {threads} thread(s): fused vs separate rel {_rel(fused, separate):.2e}, "
              f"max_abs {np.abs(fused - separate).max():.2e}")
        assert fused.shape == (40, 6563)
        assert np.array_equal(fused, separate)
        assert np.array_equal(fused_tokens, separate_tokens)
