"""The CPU's matrix products in their modes (cpu/products.h matmul, cpu/attention.h; cpu/amx_gemm.h,
cpu/vnni_gemm.h).

`exact` is OpenBLAS sgemm (f32). `fast` is, where the CPU has AMX-BF16, the AMX tiles in bf16x3
(each f32 operand split into two bf16 parts, three tile products); without AMX, on AVX512-VNNI
or else AVX2, a Q4_0 weight's products (the activations rounded to int16 per 32 values) and
attention's two products in int16, the rest exact; elsewhere exact. The int16 products' AVX2
form gives the AVX-512 form's bits (CBS_VNNI=avx2 takes it on any host: the last tests). All go through a real graph on the CPU backend with
the engine's thread split, on random shapes whose sizes are not multiples of the tiles (16 rows,
32 values of k) and attention over several query blocks and heads split between threads.

Tolerances, against float64: exact rel <= 1e-6 (seen ~3e-7); fast on AMX rel <= 2e-5 (seen
4-6e-6: the split keeps ~16 bits of each operand); fast in int16: a Q4_0 weight's product rel
<= 5e-5 (seen 2.1e-5: rounding to max|x| / 32767 per 32 values), attention rel <= 1.5e-4 (seen
7e-5 on these peaked random heads: both products' operands rounded, within a norm bound).
Where neither runs, fast must equal exact bit for bit.
A quantised model's S3Gen (the only user of fast) within mel rel 1e-4 of the same model's exact
products (seen 1.2e-5 at 250 tokens on AMX, 2.9e-5 in int16 on Zen 4).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from engine_native import _core, debug
from tests.helpers.models import model_path

AMX = _core.amx_available()
VNNI = _core.int16_products_available() and not AMX  # int16 products for Q4_0 weights only


def _rel(a, b) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def _check(fast, exact, ref, what, int16=0.0):
    """`int16`: the bound where fast runs the product in int16 (VNNI in use); 0: it does not."""
    print(f"{what}: exact rel {_rel(exact, ref):.2e}, fast rel {_rel(fast, ref):.2e} (AMX: {AMX}, int16: "
          f"{_core.int16_products_isa() if VNNI else 'off'})")
    assert _rel(exact, ref) <= 1e-6
    if AMX:
        assert _rel(fast, ref) <= 2e-5
    elif VNNI and int16:
        assert 0 < _rel(fast, ref) <= int16
    else:
        assert np.array_equal(fast, exact)


@pytest.mark.parametrize("m,k,n,wtype", [(256, 512, 1000, "f32"), (80, 256, 37, "f32"), (1024, 256, 17, "q4_0"),
                                         (33, 49, 300, "f32"), (300, 992, 130, "f16"), (17, 96, 1, "f32"),
                                         (83, 96, 301, "q4_0"), (300, 992, 130, "q4_0"),
                                         (1280, 1280, 75, "f32"), (5120, 1280, 250, "f32")])  # S3Tokenizer's
def test_linear_product(m, k, n, wtype):
    rng = np.random.default_rng(m + k + n)
    w = (rng.standard_normal((m, k)) * 0.05).astype(np.float32)
    x = rng.standard_normal((n, k)).astype(np.float32)
    exact = _core.linear_product(w, x, wtype, "exact")
    fast = _core.linear_product(w, x, wtype, "fast")
    # The weights as stored (f16, q4_0 rounded), back as f32: their product with the identity.
    w_stored = _core.linear_product(w, np.eye(k, dtype=np.float32), wtype, "exact").T
    ref = x.astype(np.float64) @ w_stored.astype(np.float64).T
    assert fast.shape == exact.shape == (n, m)
    _check(fast, exact, ref, f"linear m={m} k={k} n={n} {wtype}", int16=5e-5 if wtype == "q4_0" and n >= 16 else 0.0)


def _q4_0_round_trip(w: np.ndarray) -> np.ndarray:
    """w through ggml's Q4_0 (quantize_row_q4_0_ref, then dequantize_row_q4_0) in numpy f32."""
    blocks = w.astype(np.float32).reshape(-1, 32)
    pick = np.argmax(np.abs(blocks), axis=1)
    d = blocks[np.arange(len(blocks)), pick] / np.float32(-8)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    q = np.minimum(15, np.trunc(blocks * inv[:, None] + np.float32(8.5)).astype(np.int32))
    return ((q - 8).astype(np.float32) * d.astype(np.float16).astype(np.float32)[:, None]).reshape(w.shape)


def test_q4_0_weights_read_as_ggml_reads_them():
    """The products' conversion of a Q4_0 weight to f32 (cpu/q4_matmul.h q4_0_rows_to_f32, vectorised)
    gives ggml's dequantized values: the weights read back through an identity product."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((48, 160)) * 0.05).astype(np.float32)
    w[5, 32:64] = 0.0
    w_stored = _core.linear_product(w, np.eye(160, dtype=np.float32), "q4_0", "exact").T
    assert np.array_equal(w_stored, _q4_0_round_trip(w))


def test_q4_0_weights_reach_the_products_as_their_f32_values():
    """A Q4_0 weight, in ggml's layout or T3's packed one (a prompt's columns, past the packed
    kernel's reach: the AMX tiles, or sgemm where neither AMX nor the int8 tile runs), is
    multiplied as the f32 values it stands for: its blocks go to AMX's tiles straight from their
    codes (AmxPackedB::pack from q4_block_to_f32), bit for bit the product of those values stored
    as f32. (The int8 tile rounds the activations as ggml does: test_q4_matmul.py.)"""
    rng = np.random.default_rng(5)
    w = (rng.standard_normal((96, 256)) * 0.05).astype(np.float32)
    x = rng.standard_normal((300, 256)).astype(np.float32)
    mode = "fast" if AMX else "exact"  # without AMX a Q4_0 weight's fast product may be int16
    ggml_layout = _core.linear_product(w, x, "q4_0", mode)
    assert np.array_equal(ggml_layout, _core.linear_product(_q4_0_round_trip(w), x, "f32", mode))
    if not _core.system_info()["t3_prompt_products"].startswith("int8 tile"):
        assert np.array_equal(_core.linear_product(w, x, "q4_0_packed", "fast"), ggml_layout)


@pytest.mark.parametrize("h,tq,tk,d", [(8, 1000, 1000, 64), (3, 300, 77, 64), (2, 17, 500, 32)])
def test_attention_product(h, tq, tk, d):
    rng = np.random.default_rng(h + tq + tk)
    q = rng.standard_normal((h, tq, d)).astype(np.float32)
    k = rng.standard_normal((h, tk, d)).astype(np.float32)
    v = rng.standard_normal((h, tk, d)).astype(np.float32)
    s = np.einsum("htd,hsd->hts", q.astype(np.float64), k) / np.sqrt(d)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("hts,hsd->thd", p / p.sum(-1, keepdims=True), v)
    exact = _core.attention_product(q, k, v, "exact")
    fast = _core.attention_product(q, k, v, "fast")
    _check(fast, exact, ref, f"attention H={h} Tq={tq} Tk={tk} D={d}", int16=1.5e-4)
    # A GPU's form (two products around ggml's softmax), at f32 and at the device's default
    # precision: the same graph on the CPU, where ggml has one precision.
    gpu_f32 = _core.attention_product(q, k, v, "ggml")
    gpu_default = _core.attention_product(q, k, v, "device_default")
    np.testing.assert_array_equal(gpu_default, gpu_f32)
    assert np.linalg.norm(gpu_f32 - ref) / np.linalg.norm(ref) < 1e-5


@pytest.mark.parametrize("h,t,tk,d", [(8, 500, 500, 64), (3, 75, 325, 64), (2, 17, 17, 32), (1, 40, 61, 64)])
def test_rel_position_attention(h, t, tk, d):
    """The S3Gen encoder's relative-position attention (cpu/attention.h rel_position_attention):
    query i and key j score q_u.k_j + q_v.p_(T-1-i+j) over sqrt(D); with a cached prefix more keys
    than queries (Tk > T). Each block of queries multiplies only the p rows it takes."""
    rng = np.random.default_rng(h + t + tk + d)
    qu, qv = (rng.standard_normal((h, t, d)).astype(np.float32) for _ in range(2))
    k, v = (rng.standard_normal((h, tk, d)).astype(np.float32) for _ in range(2))
    p = rng.standard_normal((h, tk + t - 1, d)).astype(np.float32)
    ac = np.einsum("htd,hsd->hts", qu.astype(np.float64), k)
    bd_full = np.einsum("htd,hld->htl", qv.astype(np.float64), p)
    cols = (t - 1 - np.arange(t))[:, None] + np.arange(tk)[None, :]
    s = (ac + np.take_along_axis(bd_full, np.broadcast_to(cols, (h, t, tk)), axis=2)) / np.sqrt(d)
    w = np.exp(s - s.max(-1, keepdims=True))
    ref = np.einsum("hts,hsd->thd", w / w.sum(-1, keepdims=True), v)
    exact = _core.rel_attention_product(qu, qv, k, p, v, "exact")
    fast = _core.rel_attention_product(qu, qv, k, p, v, "fast")
    _check(fast, exact, ref, f"rel attention H={h} T={t} Tk={tk} D={d}")


def test_q4_0_products_with_zero_and_large_blocks():
    """Rows and 32-value blocks of zeros (scale 0: exact zeros, no NaN) and blocks of very
    different magnitudes (each rounded against its own max) in a Q4_0 weight's product."""
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((96, 128)) * 0.05).astype(np.float32)
    x = rng.standard_normal((40, 128)).astype(np.float32)
    x[3] = 0.0
    x[5, 32:64] = 0.0
    x[7, :32] *= 1e4
    x[9, 96:] *= 1e-4
    exact = _core.linear_product(w, x, "q4_0", "exact")
    fast = _core.linear_product(w, x, "q4_0", "fast")
    w_stored = _core.linear_product(w, np.eye(128, dtype=np.float32), "q4_0", "exact").T
    ref = x.astype(np.float64) @ w_stored.astype(np.float64).T
    assert np.isfinite(fast).all()
    assert not fast[3].any()
    _check(fast, exact, ref, "linear q4_0 with zero and large blocks", int16=5e-5)


def test_bad_mode_raises():
    from engine_native import ParameterError

    with pytest.raises(ParameterError, match="exact"):
        _core.linear_product(np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32), "f32", "turbo")


_MEL = """
import json, sys, numpy as np
from engine_native import debug
speech = np.random.default_rng(5).integers(0, 6561, 250).astype(np.int32)
x0 = np.random.default_rng(5).standard_normal((80, int(sys.argv[2])), dtype=np.float32)
np.save(sys.argv[3], debug.s3gen_mel(sys.argv[1], speech, None, x0))
"""


@pytest.mark.parametrize("form", ["native", "avx2"])
def test_quantised_s3gen_fast_vs_exact(tmp_path, form):
    """The same Q4_0 model's S3Gen mel with its fast products (native: AMX tiles, else int16;
    avx2: the int16 products' AVX2 form, CBS_AMX=0 CBS_VNNI=avx2) and with CBS_AMX=0 CBS_VNNI=0
    (OpenBLAS), each in a process of its own (the engine reads both once)."""
    if form == "native" and not (AMX or VNNI):
        pytest.skip("neither AMX-BF16 nor the int16 products here: a quantised model's S3Gen runs the exact products")
    if form == "avx2" and not _has("avx2", "fma"):
        pytest.skip("no AVX2 and FMA on this CPU")
    path = model_path("turbo", "q4_0")
    n_prompt = int(debug._component(model_path("turbo"), "ModelFile").tensor_f32("voice.prompt_token").size)
    frames = str(2 * (n_prompt + 250))
    fast = {"CBS_AMX": "1", "CBS_VNNI": "1"} if form == "native" else {"CBS_AMX": "0", "CBS_VNNI": "avx2"}
    mels = {}
    # unfused: the CFM's q, k and v as three products (CBS_CFM_QKV=0), where fast takes one
    # over the joined weight, and each layer norm as ggml's three operations (CBS_LAYER_NORM=0),
    # where fast takes one node (cpu/layer_norm.h): the same sums, so the same bits.
    # im2col: the CFM's causal convolutions through im2col (CBS_CFM_CONV=0), where fast reads
    # their input frames in place against time-ordered weights (AMX tiles; else sgemm a tap at a
    # time): sums in another order. With AMX that moves the mel by ~1e-6; the int16 products
    # round every activation to 16 bits, so there the last bits of a convolution's sums move
    # later roundings too: fast against exact's scale.
    for name, switches in (("fast", fast), ("unfused", dict(fast, CBS_CFM_QKV="0", CBS_LAYER_NORM="0")),
                           ("im2col", dict(fast, CBS_CFM_CONV="0")), ("exact", {"CBS_AMX": "0", "CBS_VNNI": "0"})):
        out = tmp_path / f"mel-{name}.npy"
        res = subprocess.run([sys.executable, "-c", _MEL, str(path), frames, str(out)], env=dict(os.environ, **switches),
                             capture_output=True, text=True, cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        mels[name] = np.load(out)
    rel = _rel(mels["fast"], mels["exact"])
    kind = "int16 AVX2" if form == "avx2" else "AMX" if AMX else f"int16 {_core.int16_products_isa()}"
    print(f"Q4_0 S3Gen mel, 250 tokens, {kind} vs OpenBLAS: rel {rel:.2e} max_abs "
          f"{np.abs(mels['fast'] - mels['exact']).max():.2e} ({json.dumps(mels['fast'].shape)})")
    assert 0 < rel <= 1e-4
    assert np.array_equal(mels["fast"], mels["unfused"])
    print(f"convolutions without im2col: mel rel {_rel(mels['fast'], mels['im2col']):.2e} from im2col's")
    assert _rel(mels["fast"], mels["im2col"]) <= (2e-5 if AMX and form == "native" else 1e-4)


def test_fast_products_do_not_depend_on_the_threads():
    """Pieces of the products go to whichever thread is free, but each output is summed by one
    piece in one order: the same bits for any thread count. Where an f16 weight's fast product
    is OpenBLAS's sgemm (no AMX), each thread's sgemm takes a share of the weight's rows, and
    OpenBLAS's sums depend on an output's place within the call (measured with its Haswell
    kernels on an AVX2 Zen 3 host: the first and last 8 columns of any piece differ from the
    whole product's by ~1 ulp), so there the thread counts agree within rel 1e-6 instead."""
    rng = np.random.default_rng(11)
    w = (rng.standard_normal((200, 160)) * 0.05).astype(np.float32)
    x = rng.standard_normal((90, 160)).astype(np.float32)
    q, k, v = (rng.standard_normal((5, 70, 64)).astype(np.float32) for _ in range(3))
    lin = [_core.linear_product(w, x, "f16", "fast", threads=t) for t in (1, 2, 3)]
    att = [_core.attention_product(q, k, v, "fast", threads=t) for t in (1, 2, 3)]
    if AMX:
        assert all(np.array_equal(lin[0], o) for o in lin[1:])
        # nor on the weight's other rows (the CFM joins q, k and v into one weight)
        parts = [_core.linear_product(w[r:r + 50], x, "f16", "fast") for r in range(0, 200, 50)]
        assert np.array_equal(np.concatenate(parts, axis=-1), lin[0])
    else:
        rels = [float(np.linalg.norm(o - lin[0]) / np.linalg.norm(lin[0])) for o in lin[1:]]
        print(f"f16 weight through sgemm, 2 and 3 threads vs 1: rel {rels[0]:.1e}, {rels[1]:.1e}")
        assert max(rels) <= 1e-6
    assert all(np.array_equal(att[0], o) for o in att[1:])


_INT16 = """
import sys, numpy as np
from engine_native import _core
assert not _core.amx_available(), "CBS_AMX=0 not honoured"
out = {"isa": np.array(_core.int16_products_isa())}
for i, (m, k, n) in enumerate([(1024, 256, 17), (83, 96, 301), (300, 992, 130), (40, 128, 40)]):
    rng = np.random.default_rng(m + k + n)
    w = (rng.standard_normal((m, k)) * 0.05).astype(np.float32)
    x = rng.standard_normal((n, k)).astype(np.float32)
    x[3] = 0.0
    x[5, :32] *= 1e4
    out[f"lin{i}"] = _core.linear_product(w, x, "q4_0", "fast")
    out[f"lin{i}_w"] = _core.linear_product(w, np.eye(k, dtype=np.float32), "q4_0", "exact").T
    out[f"lin{i}_x"] = x
for i, (h, tq, tk, d) in enumerate([(3, 300, 77, 64), (2, 17, 500, 32)]):
    rng = np.random.default_rng(h + tq + tk)
    q, k, v = (rng.standard_normal((h, t, d)).astype(np.float32) for t in (tq, tk, tk))
    out[f"att{i}"] = _core.attention_product(q, k, v, "fast")
    out[f"att{i}_ref"] = _core.attention_product(q, k, v, "exact")
np.savez(sys.argv[1], **out)
"""


def _int16_products(tmp_path, vnni: str) -> dict:
    """Fast products in a process with CBS_AMX=0 and CBS_VNNI=`vnni` (read once per process)."""
    out = tmp_path / f"int16-{vnni or 'default'}.npz"
    env = dict(os.environ, CBS_AMX="0", CBS_VNNI=vnni)
    res = subprocess.run([sys.executable, "-c", _INT16, str(out)], env=env, capture_output=True, text=True,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    return dict(np.load(out))


def _has(*flags: str) -> bool:
    try:
        words = next(ln for ln in open("/proc/cpuinfo") if ln.startswith("flags")).split()
    except (OSError, StopIteration):
        return False
    return all(f in words for f in flags)


_FORMS = {"avx2": ("AVX2", ("avx2", "fma")), "avxvnni": ("AVX-VNNI", ("avx2", "fma", "avx_vnni"))}


@pytest.mark.parametrize("form", sorted(_FORMS))
def test_int16_products_avx2_forms(tmp_path, form):
    """The int16 products' AVX2 forms (what a CPU without AVX-512 runs for a quantised model's
    S3Gen: vpmaddwd + vpaddd, or AVX-VNNI's vpdpwssd), taken on this host whatever else it has:
    within the int16 bounds of float64, zero rows exact."""
    name, flags = _FORMS[form]
    if not _has(*flags):
        pytest.skip(f"no {' '.join(flags)} on this CPU")
    got = _int16_products(tmp_path, form)
    assert str(got["isa"]) == name
    for i in range(4):
        ref = got[f"lin{i}_x"].astype(np.float64) @ got[f"lin{i}_w"].astype(np.float64).T
        fast = got[f"lin{i}"]
        print(f"{name} int16 linear {i}: rel {_rel(fast, ref):.2e}")
        assert np.isfinite(fast).all() and not fast[3].any()
        assert _rel(fast, ref) <= 5e-5
    for i in range(2):
        rel = _rel(got[f"att{i}"], got[f"att{i}_ref"])
        print(f"{name} int16 attention {i}: rel {rel:.2e} against exact")
        assert 0 < rel <= 1.5e-4


@pytest.mark.skipif(not _has("avx512f", "avx512bw", "avx512vl", "avx512_vnni"), reason="no AVX512-VNNI to compare with")
def test_int16_products_avx2_forms_give_the_avx512_bits(tmp_path):
    """The same int32 sums (vpmaddwd + vpaddd and vpdpwssd wrap alike) and the same f32 steps in
    the same order (the block norm's sum too): every form agrees bit for bit."""
    avx512 = _int16_products(tmp_path, "")
    assert str(avx512["isa"]) == "AVX-512 VNNI"
    for form, (name, flags) in _FORMS.items():
        if not _has(*flags):
            continue
        got = _int16_products(tmp_path, form)
        assert str(got["isa"]) == name
        for key in [f"lin{i}" for i in range(4)] + ["att0", "att1"]:
            assert np.array_equal(got[key], avx512[key]), (form, key)
