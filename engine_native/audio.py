"""The reference's audio preparation for cloning, step for step, in numpy.

`prepare_conditionals` loads with librosa (soundfile, channel mean, soxr "HQ" resampling,
length fixed to ceil(n * ratio)), normalises loudness with pyloudnorm to -27 LUFS, and
inside `S3Gen.embed_ref` resamples 24 kHz -> 16 kHz again with torchaudio's windowed-sinc
`Resample` (Hann window, 6 zero crossings, rolloff 0.99). The first is the same library
here (`soxr`); the second is reproduced exactly below (its kernel is small and computed
once per rate pair, in float64 then float32, as torchaudio caches it).
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from engine_native.errors import VoiceError

# More channels than this is not a recording layout anyone uses (7.1 surround has 8).
MAX_CHANNELS = 16


def to_mono(samples: np.ndarray) -> np.ndarray:
    """(n,), (n, channels) or (channels, n) -> float32 (n,), channels averaged as librosa.to_mono
    does. A 2-D array whose first axis is short (<= MAX_CHANNELS) and second long is taken
    as channels-first."""
    try:
        x = np.asarray(samples, dtype=np.float32)
    except (TypeError, ValueError):
        raise ValueError("audio must be an array of numbers") from None
    if x.ndim == 2 and x.shape[0] <= MAX_CHANNELS < x.shape[1]:
        x = x.T  # channels-first, as torchaudio and some decoders give it: (channels, n)
    if x.ndim == 2:
        if x.shape[1] > MAX_CHANNELS:
            raise ValueError(f"audio of shape {x.shape} has neither (samples, channels) nor (channels, samples) "
                             f"layout with at most {MAX_CHANNELS} channels")
        x = x.mean(axis=1, dtype=np.float32) if x.shape[1] > 1 else x[:, 0]
    elif x.ndim != 1:
        raise ValueError(f"audio must be (samples,) or (samples, channels); got shape {x.shape}")
    return np.ascontiguousarray(x, dtype=np.float32)


def usable_mono(samples: np.ndarray) -> np.ndarray:
    """Audio an embedding or a clone is asked of, as mono float32 (`to_mono`); VoiceError when
    it is not numbers, has no samples or holds NaN or infinity."""
    try:
        mono = to_mono(samples)
    except ValueError as e:
        raise VoiceError(str(e)) from None
    if mono.size == 0 or not np.all(np.isfinite(mono)):
        raise VoiceError("the audio is empty or holds invalid samples")
    return mono


def _fix_length(y: np.ndarray, n_in: int, src: int, dst: int) -> np.ndarray:
    """librosa.resample's fix_length: ceil(n_in * dst / src) samples (the ratio in double), cut
    or zero-padded, float32."""
    n = int(np.ceil(n_in * (float(dst) / src)))
    y = y[:n] if y.shape[0] >= n else np.pad(y, (0, n - y.shape[0]))
    return np.asarray(y, np.float32)


def resample_soxr(x: np.ndarray, src: int, dst: int) -> np.ndarray:
    """librosa.resample(x, orig_sr=src, target_sr=dst) with its default res_type soxr_hq."""
    if src == dst:
        return np.asarray(x, np.float32)
    import soxr

    x = np.asarray(x, np.float32)
    return _fix_length(soxr.resample(x, src, dst, quality="HQ"), x.shape[0], src, dst)


def resample_polyphase(x: np.ndarray, src: int, dst: int) -> np.ndarray:
    """librosa.resample(x, orig_sr=src, target_sr=dst, res_type="polyphase"): scipy's
    resample_poly with the reduced ratio and its default Kaiser window, float32 in and out."""
    if src == dst:
        return np.asarray(x, np.float32)
    from scipy.signal import resample_poly

    x = np.asarray(x, np.float32)
    g = math.gcd(int(src), int(dst))
    return _fix_length(resample_poly(x, dst // g, src // g), x.shape[0], src, dst)


@lru_cache(maxsize=16)
def _sinc_kernel(src: int, dst: int, width_zc: int = 6, rolloff: float = 0.99) -> tuple[np.ndarray, int]:
    """torchaudio's _get_sinc_resample_kernel (sinc_interp_hann): kernel [dst', taps], width."""
    g = math.gcd(src, dst)
    orig, new = src // g, dst // g
    base = min(orig, new) * rolloff
    width = math.ceil(width_zc * orig / base)
    idx = np.arange(-width, width + orig, dtype=np.float64)[None, :] / orig
    t = (np.arange(0, -new, -1).astype(np.float32)[:, None] / np.float32(new)).astype(np.float64) + idx
    t = np.clip(t * base, -width_zc, width_zc)
    window = np.cos(t * math.pi / width_zc / 2) ** 2
    t = t * math.pi
    with np.errstate(invalid="ignore", divide="ignore"):
        k = np.where(t == 0, 1.0, np.sin(t) / t)
    k = k * window * (base / orig)
    return k.astype(np.float32), width


def resample_sinc(x: np.ndarray, src: int, dst: int) -> np.ndarray:
    """torchaudio.transforms.Resample(src, dst)(x) for a 1-D float32 signal."""
    if src == dst:
        return np.asarray(x, np.float32)
    kernel, width = _sinc_kernel(src, dst)
    g = math.gcd(src, dst)
    orig, new = src // g, dst // g
    x = np.asarray(x, np.float32)
    padded = np.pad(x, (width, width + orig))
    frames = np.lib.stride_tricks.sliding_window_view(padded, kernel.shape[1])[::orig]  # conv1d, stride orig
    y = (frames @ kernel.T).reshape(-1)  # [n_frames, new] -> interleaved output
    return np.ascontiguousarray(y[: int(math.ceil(new * x.shape[0] / orig))], dtype=np.float32)


def integrated_loudness(x: np.ndarray, rate: int) -> float:
    import pyloudnorm

    return float(pyloudnorm.Meter(rate).integrated_loudness(x))


def norm_loudness(x: np.ndarray, rate: int, target_lufs: float = -27.0) -> np.ndarray:
    """The reference's ChatterboxTurboTTS.norm_loudness: a gain to target_lufs when finite."""
    try:
        gain = 10.0 ** ((target_lufs - integrated_loudness(x, rate)) / 20.0)
    except Exception:  # the reference prints a warning and keeps the audio as it is
        return x
    if math.isfinite(gain) and gain > 0.0:
        return (x * gain).astype(np.float32)
    return x
