"""Native HiFT vocoder (S3Gen Turbo, F32) against the PyTorch reference.

Seams: `hift_f0` (f0_predictor) and `hift_decode` (HiFTGenerator.decode from the mel and
the excitation). The excitation comes from the reference's own f0 -> f0_upsamp ->
m_source path (stage `hift_source`, torch seeded) so decode sees a realistic source.
Mel lengths 12, 50 and 500 frames = 6, 25 and 250 speech tokens: the resblock convs of a short
signal run directly (rgemm), a long one's through the DFT; 50 frames takes both.

Tolerances: f0 rel <= 1e-5, decode rel <= 1e-4 (a quantised model's too: its HiFT is f32, its
products the fast ones on AMX).
"""

from __future__ import annotations

import numpy as np
import pytest

from engine_native import debug
from tests.helpers.models import model_path
from tests.helpers.signals import _mel
from tests.reference.cache import snapshot_dir
from tests.reference.runner import run_stage


def _rel(got, ref):
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref)), float(np.abs(got - ref).max())


@pytest.fixture(scope="module")
def reference():
    """mel, reference f0, source and waveform per T (one reference process per stage and T)."""
    snap = snapshot_dir("turbo")
    out = {}
    for T, seed in [(12, 3), (50, 1), (500, 2)]:
        mel = _mel(T, seed)
        src = run_stage("hift_source", snap, mel=mel, seed=np.asarray(0))
        wav = run_stage("hift_decode", snap, mel=mel, source=src["source"])["wav"]
        out[T] = {"mel": mel, "f0": src["f0"], "source": src["source"], "wav": wav}
    return out


@pytest.mark.parametrize("T", [50, 500])
def test_hift_f0_matches_reference(reference, T):
    r = reference[T]
    got = debug.hift_f0(model_path("turbo"), r["mel"])
    # the stage's f0 is f0_predictor's output; check it against the plain f0 stage once
    if T == 50:
        ref_plain = run_stage("hift_f0", snapshot_dir("turbo"), mel=r["mel"])["f0"]
        np.testing.assert_array_equal(ref_plain, r["f0"])
    assert got.shape == r["f0"].shape == (T,)
    rel, max_abs = _rel(got, r["f0"])
    print(f"hift_f0 T={T}: rel {rel:.2e} max_abs {max_abs:.2e}")
    assert rel <= 1e-5


@pytest.mark.parametrize("T", [12, 50, 500])
def test_hift_decode_matches_reference(reference, T):
    r = reference[T]
    assert r["source"].shape == (1, 1, 480 * T)
    got = debug.hift_decode(model_path("turbo"), r["mel"], r["source"])
    assert got.shape == r["wav"].shape == (480 * T,)
    rel, max_abs = _rel(got, r["wav"])
    print(f"hift_decode T={T}: rel {rel:.2e} max_abs {max_abs:.2e} (ref rms {np.sqrt(np.mean(r['wav'] ** 2)):.2e})")
    assert rel <= 1e-4
    # a flat source is accepted too
    np.testing.assert_array_equal(debug.hift_decode(model_path("turbo"), r["mel"], r["source"].reshape(-1)), got)


@pytest.mark.parametrize("T", [12, 500])
def test_quantised_model_decode_matches_reference(reference, T):
    """A quantised model's HiFT (the same f32 weights) takes the fast products where the CPU has
    AMX: every resblock conv, ConvTranspose1d and f0 condnet conv (past the first) as direct
    products on AMX tiles (bf16x3), whatever the length; the decode stays within the f32
    tolerance of the reference, f0 within 1e-4. Without AMX it is the f32 path."""
    from engine_native import _core

    r = reference[T]
    got = debug.hift_decode(model_path("turbo", "q4_0"), r["mel"], r["source"])
    exact = debug.hift_decode(model_path("turbo"), r["mel"], r["source"])
    rel, max_abs = _rel(got, r["wav"])
    print(f"hift_decode q4_0 T={T}: rel {rel:.2e} max_abs {max_abs:.2e}")
    assert got.shape == r["wav"].shape and rel <= 1e-4
    assert np.array_equal(got, exact) != _core.amx_available()
    f0 = debug.hift_f0(model_path("turbo", "q4_0"), r["mel"])  # its condnet's convs too
    rel, max_abs = _rel(f0, r["f0"])
    print(f"hift_f0 q4_0 T={T}: rel {rel:.2e} max_abs {max_abs:.2e}")
    assert rel <= 1e-4


def test_bad_shapes_raise_engine_error():
    import engine_native

    path = model_path("turbo")
    mel = _mel(10, 3)
    with pytest.raises(engine_native.EngineError, match=r"mel must have shape \(80, T\)"):
        debug.hift_f0(path, mel.T)
    with pytest.raises(engine_native.EngineError, match="mel must have shape"):
        debug.hift_f0(path, mel[:, :0])
    with pytest.raises(engine_native.EngineError, match="mel must have shape"):
        debug.hift_f0(path, mel[0])
    with pytest.raises(engine_native.EngineError, match="mel must have shape"):
        debug.hift_decode(path, mel[:79], np.zeros(4800, np.float32))
    with pytest.raises(engine_native.EngineError, match="source has 4799 samples"):
        debug.hift_decode(path, mel, np.zeros(4799, np.float32))
    with pytest.raises(engine_native.EngineError, match="source must be"):
        debug.hift_decode(path, mel, np.zeros((2, 4800), np.float32))


def test_excitation_matches_reference_given_the_same_random_draws():
    """The NSF source with phases and noise fed to both sides; f0 mixes voiced and unvoiced."""
    rng = np.random.default_rng(11)
    T = 60
    f0 = np.where(np.arange(T) % 20 < 14, rng.uniform(80, 300, T), 0.0).astype(np.float32)
    phases = rng.uniform(-np.pi, np.pi, 9).astype(np.float32)
    noise = rng.standard_normal((9, 480 * T)).astype(np.float32)
    got = debug.hift_excitation(model_path("turbo"), f0, phases, noise)
    ref = run_stage("hift_excitation", snapshot_dir("turbo"), f0=f0, phases=phases, noise=noise)["source"]
    rel, max_abs = _rel(got, ref)
    print(f"hift excitation T={T}: rel {rel:.2e} max_abs {max_abs:.2e}")
    assert got.shape == ref.shape == (480 * T,)
    assert rel <= 1e-5


def test_inference_is_deterministic_per_seed_and_bounded():
    mel = np.random.default_rng(5).normal(-6, 2, (80, 40)).astype(np.float32)
    a = debug.hift_inference(model_path("turbo"), mel, seed=7)
    b = debug.hift_inference(model_path("turbo"), mel, seed=7)
    c = debug.hift_inference(model_path("turbo"), mel, seed=8)
    assert a.shape == (480 * 40,) and np.isfinite(a).all() and np.abs(a).max() <= 0.99
    assert np.array_equal(a, b) and not np.array_equal(a, c)


def test_excitation_in_pieces_equals_one_call_whenever_its_noise_was_drawn():
    """The excitation's noise is drawn ahead on a thread (in blocks) and its sines in parallel
    pieces: cut anywhere (across noise blocks and thread pieces), with the noise drawn before or
    during the call, and continued from a copy, it is the one call's excitation bit for bit."""
    import time

    from engine_native import _core

    h = _core.HiFT(_core.ModelFile(str(model_path("turbo"))))
    rng = np.random.default_rng(4)
    f0 = (rng.uniform(80, 300, 700) * (rng.random(700) > 0.3)).astype(np.float32)  # voiced and unvoiced
    whole = h.excitation_continue(f0, h.source_state(3))  # 336000 samples: several pieces and blocks
    state = h.source_state(3)
    time.sleep(0.2)  # let the noise be drawn ahead
    cuts = [0, 1, 37, 300, 699, 700]
    parts = np.concatenate([h.excitation_continue(f0[a:b], state) for a, b in zip(cuts, cuts[1:])])
    assert np.array_equal(parts, whole)
    state = h.source_state(3)
    head = h.excitation_continue(f0[:100], state)
    look = h.excitation_continue(f0[100:], state.copy())  # a look ahead leaves `state` where it was
    assert np.array_equal(np.concatenate([head, look]), whole)
    assert np.array_equal(h.excitation_continue(f0[100:], state), look)
    assert not np.array_equal(h.excitation_continue(f0, h.source_state(4)), whole)


_INFERENCE = """
import sys, numpy as np
from engine_native import Engine
mel = np.load(sys.argv[2])
np.save(sys.argv[3], Engine(sys.argv[1], threads=2).stages.vocoder.hift.inference(mel, 0))
"""


def _decode_in_processes(tmp_path, frames: int, seed: int, switch: str, values, quant: str = "f32") -> list[np.ndarray]:
    """HiFT's decode of one random mel in a process of its own per value of the environment
    switch (the engine reads its switches once)."""
    import os
    import subprocess
    import sys

    np.save(tmp_path / "mel.npy", _mel(frames, seed))
    outs = []
    for i, value in enumerate(values):
        out = tmp_path / f"wav{i}.npy"
        res = subprocess.run([sys.executable, "-c", _INFERENCE, str(model_path("turbo", quant)), str(tmp_path / "mel.npy"),
                              str(out)], env=dict(os.environ, **{switch: value}), capture_output=True, text=True,
                             cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        outs.append(np.load(out))
    return outs


def test_avx512_products_equal_the_8_lane_build(tmp_path):
    """The FFT convolutions' per-bin products and the rgemm products with 16 lanes (AVX-512)
    give each output the same multiply-adds in the same order as the 8-lane build
    (CBS_HIFT_AVX512=0): equal bit for bit."""
    outs = _decode_in_processes(tmp_path, 120, 7, "CBS_HIFT_AVX512", ("1", "0"))
    assert outs[0].size == 120 * 480 and np.abs(outs[0]).max() > 0
    assert np.array_equal(outs[0], outs[1])


def test_short_signal_convs_run_directly(tmp_path):
    """A short mel's resblock convs run as direct products (rgemm) where a long one's go
    through the DFT (hift_graph.cpp direct_is_cheaper): the same decode within rounding, not
    bit for bit (CBS_HIFT_DIRECT=0 sends every one through the DFT)."""
    direct, dft = _decode_in_processes(tmp_path, 16, 9, "CBS_HIFT_DIRECT", ("", "0"))
    rel = float(np.linalg.norm(direct - dft) / np.linalg.norm(dft))
    print(f"direct vs DFT, 16 mel frames: rel {rel:.1e}")
    assert direct.size == dft.size == 16 * 480 and not np.array_equal(direct, dft)
    assert rel <= 1e-5


@pytest.mark.skipif(not __import__("engine_native")._core.amx_available(), reason="no AMX on this CPU")
def test_amx_convs_on_a_length_of_partial_tiles(tmp_path):
    """13 mel frames (104, 520 and 1560 frames at the resblocks: none a whole number of AMX's
    16-row tiles): a quantised model's AMX convs against its own exact path (CBS_AMX=0)."""
    amx, exact = _decode_in_processes(tmp_path, 13, 5, "CBS_AMX", ("", "0"), quant="q4_0")
    rel = float(np.linalg.norm(amx - exact) / np.linalg.norm(exact))
    print(f"AMX convs vs exact, 13 mel frames: rel {rel:.1e}")
    assert amx.size == exact.size == 13 * 480 and not np.array_equal(amx, exact)
    assert rel <= 1e-4
