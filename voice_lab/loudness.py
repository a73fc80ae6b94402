"""Loudness per ITU-R BS.1770: integrated LUFS (pyloudnorm) and true peak (4x oversampling)."""

from __future__ import annotations

import math

import numpy as np


def integrated_lufs(samples: np.ndarray, rate: int) -> float | None:
    """Integrated loudness in LUFS; None when too short (< 0.4 s) or silent (gated away)."""
    import pyloudnorm

    x = np.asarray(samples, dtype=np.float64)
    if x.shape[0] < int(0.4 * rate) + 1:
        return None
    value = pyloudnorm.Meter(rate).integrated_loudness(x)
    return float(value) if math.isfinite(value) else None


def true_peak_db(samples: np.ndarray, rate: int | None = None) -> float | None:
    """True peak in dBTP: the sample peak after 4x polyphase oversampling (BS.1770 Annex 2)."""
    from scipy.signal import resample_poly

    x = np.asarray(samples, dtype=np.float64)
    if x.size == 0:
        return None
    up = resample_poly(x, 4, 1, axis=0)
    peak = float(max(np.max(np.abs(up)), np.max(np.abs(x))))
    return 20.0 * math.log10(peak) if peak > 0 else None


def measure(samples: np.ndarray, rate: int) -> dict:
    lufs = integrated_lufs(samples, rate)
    tp = true_peak_db(samples, rate)
    return {
        "integrated_lufs": None if lufs is None else round(lufs, 2),
        "true_peak_dbtp": None if tp is None else round(tp, 2),
    }
