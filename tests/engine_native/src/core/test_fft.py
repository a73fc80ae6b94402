"""The engine's one FFT (core/fft.h) against numpy.fft, at every length kind it meets:
powers of two (HiFT's tiles, n = 64), the features' n_fft (1920, 512, 400), HiFT's STFT
(16), radix 3 and 5, other primes (direct DFT) and n = 1, in double and in float32.

Tolerances (relative L2 error): double 1e-13, float32 1e-6.
"""

from __future__ import annotations

import numpy as np
import pytest

import engine_native
from engine_native import debug

LENGTHS = [1, 2, 3, 4, 5, 6, 7, 8, 12, 15, 16, 30, 49, 64, 97, 121, 128, 143, 400, 480, 512, 1000, 1920]


def _signal(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(n) + 1j * rng.standard_normal(n)


def _rel(got, ref) -> float:
    return float(np.linalg.norm(got - ref) / np.linalg.norm(ref))


@pytest.mark.parametrize("single", [False, True], ids=["double", "float32"])
@pytest.mark.parametrize("n", LENGTHS)
def test_fft_matches_numpy(n, single):
    x = _signal(n, n)
    if single:
        x = x.astype(np.complex64).astype(np.complex128)  # the values the float transform sees
    tol = 1e-6 if single else 1e-13
    fwd = debug.fft(x, single=single)
    inv = debug.fft(x, inverse=True, single=single)
    rel_f, rel_i = _rel(fwd, np.fft.fft(x)), _rel(inv, n * np.fft.ifft(x))
    print(f"fft n={n} {'float32' if single else 'double'}: forward rel {rel_f:.2e} inverse rel {rel_i:.2e}")
    assert rel_f <= tol and rel_i <= tol


def test_fft_of_a_real_signal_is_hermitian():
    x = np.random.default_rng(0).standard_normal(1920)
    X = debug.fft(x)
    np.testing.assert_allclose(X[1:], np.conj(X[1:][::-1]), rtol=0, atol=1e-11)


def test_fft_refuses_bad_input():
    with pytest.raises(engine_native.errors.EngineError):
        debug.fft(np.zeros(0))
    with pytest.raises(engine_native.errors.EngineError):
        engine_native._core.fft(np.zeros(4), np.zeros(3))
    with pytest.raises(engine_native.errors.EngineError):
        engine_native._core.fft(np.zeros((2, 2)), np.zeros((2, 2)))
