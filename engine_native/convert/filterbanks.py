"""Mel filterbank matrices used by the Chatterbox reference, in pure numpy.

Each ``*_filterbank()`` function reproduces, in float32, the exact matrix the
PyTorch reference builds at run time, so the converter can store it in the GGUF
(``docs/DESIGN.md`` "Model files": filterbanks stay F32) and the C++ feature code never
has to re-derive a mel scale.  The companion constants (``MEL_24K``, ``VE_MEL``,
``KALDI_FBANK``) record every framing / windowing / scaling convention the C++
side needs next to the matrix; the converter writes them as GGUF metadata.

References (chatterbox-tts 0.1.7, librosa 0.11, torchaudio compliance.kaldi):

* ``chatterbox/models/s3gen/utils/mel.py`` ``mel_spectrogram`` (S3Gen prompt mels, 24 kHz)
* ``chatterbox/models/voice_encoder/melspec.py`` + ``config.py`` (VoiceEncoder, 16 kHz)
* ``chatterbox/models/s3gen/xvector.py`` ``extract_feature`` ->
  ``torchaudio.compliance.kaldi.fbank(wav, num_mel_bins=80)`` (CAMPPlus, 16 kHz)

Exactness: the two librosa (Slaney) matrices are bit-identical to librosa's (the
arithmetic is float64, as in librosa, with the same float32 store/scale steps).
The Kaldi matrix follows torch's float32 arithmetic step for step, except for one
operation: torch evaluates ``log(1 + f / 700)`` for the 256 FFT-bin frequencies with
its vectorised float32 libm (MKL VML or Sleef, up to 1 ulp off and CPU dependent),
while this module uses the correctly rounded float32 log.  On the reference CPU that
leaves 21 of the 256 bin mel values 1-2 float32 ulps (<= 2.4e-4 mel) apart, i.e. up to 7.1e-6
absolute in 41 weights of the 80x257 matrix (weights are <= 1); numpy's own float32
log would be further off (1.4e-5).  Given torch's own
per-bin mel values, the rest reproduces ``get_mel_banks`` bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "MEL_24K",
    "VE_MEL",
    "KALDI_FBANK",
    "slaney_mel_filterbank",
    "mel_24k_filterbank",
    "ve_mel_filterbank",
    "kaldi_mel_banks",
    "kaldi_fbank_filterbank",
]

# S3Gen 24 kHz prompt-feature mel (chatterbox/models/s3gen/utils/mel.py, mel_spectrogram defaults;
# s3gen.py calls it as self.mel_extractor(ref_wav_24) with no overrides).
MEL_24K = dict(
    sample_rate=24000,
    n_fft=1920,
    hop=480,  # hop_size
    win=1920,  # win_size; torch.hann_window(win_size) -> periodic Hann
    window="hann_periodic",
    n_mels=80,
    fmin=0.0,
    fmax=8000.0,
    mel_scale="slaney",  # librosa.filters.mel defaults htk=False, norm="slaney"
    mel_norm="slaney",
    center=False,  # torch.stft(center=False) ...
    pad_mode="reflect",  # ... after an explicit F.pad(reflect) of (n_fft - hop) // 2 each side
    pad_left=720,
    pad_right=720,
    magnitude_eps=1e-9,  # spec = sqrt(re^2 + im^2 + 1e-9)
    power=1.0,  # magnitude (not power) into the mel matmul
    log_clip=1e-5,  # log(clamp(mel, min=1e-5))
    log="natural",
    n_freqs=961,
)

# VoiceEncoder mel (chatterbox/models/voice_encoder/config.py VoiceEncConfig + melspec.py).
VE_MEL = dict(
    sample_rate=16000,
    n_fft=400,
    hop=160,  # hop_size
    win=400,  # win_size; librosa.stft default window="hann" (scipy get_window, fftbins=True -> periodic)
    window="hann_periodic",
    n_mels=40,  # num_mels
    fmin=0.0,
    fmax=8000.0,
    mel_scale="slaney",  # librosa.filters.mel defaults
    mel_norm="slaney",
    center=True,  # melspectrogram(wav, hp) uses pad=True -> librosa.stft(center=True, ...)
    pad_mode="reflect",  # pad_mode="reflect" (n_fft // 2 each side)
    preemphasis=0.0,  # hp.preemphasis = 0. -> disabled
    mel_power=2.0,  # |stft| ** 2 into the mel matmul
    mel_type="amp",  # no dB conversion
    normalized_mels=False,
    stft_magnitude_min=1e-4,  # only used for mel_type="db"; recorded for completeness
    partial_frames=160,  # ve_partial_frames
    rate=1.3,  # embeds_from_wavs default kwargs["rate"]
    overlap=0.5,  # embeds_from_mels / inference default
    min_coverage=0.8,
    trim_top_db=20.0,  # embeds_from_wavs: librosa.effects.trim(top_db=20) before the mel
    trim_frame_length=2048,  # librosa.effects.trim defaults: RMS frames (centred, zero padded) ...
    trim_hop=512,  # ... every 512 samples, compared with the loudest frame
    n_freqs=201,
)

# CAMPPlus Kaldi fbank (xvector.py: Kaldi.fbank(au.unsqueeze(0), num_mel_bins=80), all other args default).
KALDI_FBANK = dict(
    sample_rate=16000,
    frame_length_ms=25.0,
    frame_shift_ms=10.0,
    win=400,  # int(16000 * 25 * 0.001)
    hop=160,  # int(16000 * 10 * 0.001)
    n_fft=512,  # round_to_power_of_two=True -> next power of two of 400
    round_to_power_of_two=True,
    n_mels=80,
    low_freq=20.0,
    high_freq=0.0,  # <= 0 -> offset from Nyquist, i.e. 8000
    fmin=20.0,
    fmax=8000.0,
    mel_scale="kaldi",  # 1127 * ln(1 + f / 700), no area normalisation
    vtln_low=100.0,
    vtln_high=-500.0,
    vtln_warp=1.0,  # no warping
    window="povey",  # hann_window(400, periodic=False) ** 0.85
    window_povey_exponent=0.85,
    blackman_coeff=0.42,  # unused with povey
    preemphasis=0.97,  # x[j] -= 0.97 * x[max(0, j - 1)] within each frame
    remove_dc_offset=True,  # subtract per-frame mean before preemphasis
    dither=0.0,
    snip_edges=True,  # frames = 1 + (n - 400) // 160, only whole frames
    raw_energy=True,
    energy_floor=1.0,
    use_energy=False,
    htk_compat=False,
    use_power=True,  # |rfft| ** 2
    use_log_fbank=True,
    log_floor=float(np.finfo(np.float32).eps),  # log(max(mel, 1.1920929e-07))
    subtract_mean=False,  # fbank itself does not; xvector.extract_feature then subtracts the per-utterance mean
    utterance_mean_norm=True,
    min_duration=0.0,
    n_freqs=257,  # get_mel_banks gives 256 columns; fbank pads a zero Nyquist column
)


# ----------------------------------------------------------------------------------------------
# librosa (Slaney) mel
# ----------------------------------------------------------------------------------------------

_F_SP = 200.0 / 3
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOGSTEP = np.log(6.4) / 27.0


def _hz_to_mel_slaney(f):
    f = np.asanyarray(f, dtype=np.float64)
    mels = f / _F_SP
    if f.ndim:
        log_t = f >= _MIN_LOG_HZ
        mels[log_t] = _MIN_LOG_MEL + np.log(f[log_t] / _MIN_LOG_HZ) / _LOGSTEP
    elif f >= _MIN_LOG_HZ:
        mels = _MIN_LOG_MEL + np.log(f / _MIN_LOG_HZ) / _LOGSTEP
    return mels


def _mel_to_hz_slaney(m):
    m = np.asanyarray(m, dtype=np.float64)
    freqs = _F_SP * m
    if m.ndim:
        log_t = m >= _MIN_LOG_MEL
        freqs[log_t] = _MIN_LOG_HZ * np.exp(_LOGSTEP * (m[log_t] - _MIN_LOG_MEL))
    elif m >= _MIN_LOG_MEL:
        freqs = _MIN_LOG_HZ * np.exp(_LOGSTEP * (m - _MIN_LOG_MEL))
    return freqs


def slaney_mel_filterbank(sr: float, n_fft: int, n_mels: int, fmin: float, fmax: float) -> np.ndarray:
    """``librosa.filters.mel(sr=, n_fft=, n_mels=, fmin=, fmax=)`` with its defaults
    (``htk=False``, ``norm="slaney"``, ``dtype=float32``), step for step: the
    triangles are computed in float64 and stored into a float32 array, then scaled
    in place by the float64 Slaney area normalisation."""
    n_mels = int(n_mels)
    weights = np.zeros((n_mels, int(1 + n_fft // 2)), dtype=np.float32)
    fftfreqs = np.fft.rfftfreq(n=n_fft, d=1.0 / sr)
    mel_f = _mel_to_hz_slaney(np.linspace(_hz_to_mel_slaney(fmin), _hz_to_mel_slaney(fmax), n_mels + 2))
    fdiff = np.diff(mel_f)
    ramps = np.subtract.outer(mel_f, fftfreqs)
    for i in range(n_mels):
        lower = -ramps[i] / fdiff[i]
        upper = ramps[i + 2] / fdiff[i + 1]
        weights[i] = np.maximum(0, np.minimum(lower, upper))
    enorm = 2.0 / (mel_f[2 : n_mels + 2] - mel_f[:n_mels])
    weights *= enorm[:, np.newaxis]
    return weights


def mel_24k_filterbank() -> np.ndarray:
    """S3Gen 24 kHz mel basis, float32 (80, 961)."""
    p = MEL_24K
    return slaney_mel_filterbank(p["sample_rate"], p["n_fft"], p["n_mels"], p["fmin"], p["fmax"])


def ve_mel_filterbank() -> np.ndarray:
    """VoiceEncoder mel basis, float32 (40, 201)."""
    p = VE_MEL
    assert p["fmax"] <= p["sample_rate"] // 2
    return slaney_mel_filterbank(p["sample_rate"], p["n_fft"], p["n_mels"], p["fmin"], p["fmax"])


# ----------------------------------------------------------------------------------------------
# Kaldi mel (torchaudio.compliance.kaldi.get_mel_banks), emulating torch's float32 arithmetic
# ----------------------------------------------------------------------------------------------


def _mel_scale_scalar(freq: float) -> float:
    return 1127.0 * math.log(1.0 + freq / 700.0)


def kaldi_mel_banks(
    num_bins: int,
    window_length_padded: int,
    sample_freq: float,
    low_freq: float,
    high_freq: float,
    fft_bin_mels: np.ndarray | None = None,
) -> np.ndarray:
    """``get_mel_banks(...)[0]`` for ``vtln_warp_factor == 1`` (no warping): float32
    (num_bins, window_length_padded // 2).  Scalars are Python floats (double), the
    tensors are float32 exactly as torch builds them.

    ``fft_bin_mels`` (float32, ``window_length_padded // 2``) overrides the
    per-FFT-bin ``mel_scale(fft_bin_width * arange(num_fft_bins))`` row; tests pass
    torch's own values there to check every other step bit for bit."""
    f32 = np.float32
    assert num_bins > 3 and window_length_padded % 2 == 0
    num_fft_bins = window_length_padded // 2
    nyquist = 0.5 * sample_freq
    if high_freq <= 0.0:
        high_freq += nyquist
    assert 0.0 <= low_freq < nyquist and 0.0 < high_freq <= nyquist and low_freq < high_freq
    fft_bin_width = sample_freq / window_length_padded
    mel_low_freq = _mel_scale_scalar(low_freq)
    mel_high_freq = _mel_scale_scalar(high_freq)
    mel_freq_delta = (mel_high_freq - mel_low_freq) / (num_bins + 1)

    b = np.arange(num_bins, dtype=np.float32)[:, None]
    # torch: int64 tensor (op) python float -> float32 tensor, scalar cast to float32
    left_mel = f32(mel_low_freq) + b * f32(mel_freq_delta)
    center_mel = f32(mel_low_freq) + (b + f32(1.0)) * f32(mel_freq_delta)
    right_mel = f32(mel_low_freq) + (b + f32(2.0)) * f32(mel_freq_delta)

    if fft_bin_mels is None:
        freq = f32(fft_bin_width) * np.arange(num_fft_bins, dtype=np.float32)
        # torch computes this log in float32 through its vectorised libm (MKL VML / Sleef,
        # <= 1 ulp, CPU dependent); use the correctly rounded float32 log instead (float64
        # log rounded once), so the matrix is the same on every machine.  See module doc.
        ln = np.log((f32(1.0) + freq / f32(700.0)).astype(np.float64)).astype(np.float32)
        mel = f32(1127.0) * ln
    else:
        mel = np.asarray(fft_bin_mels, dtype=np.float32).reshape(num_fft_bins)
    mel = mel[None, :]

    up_slope = (mel - left_mel) / (center_mel - left_mel)
    down_slope = (right_mel - mel) / (right_mel - center_mel)
    bins = np.maximum(f32(0.0), np.minimum(up_slope, down_slope))
    return bins.astype(np.float32, copy=False)


def kaldi_fbank_filterbank() -> np.ndarray:
    """CAMPPlus Kaldi fbank matrix as ``kaldi.fbank`` applies it: float32 (80, 257),
    ``get_mel_banks(80, 512, 16000, 20, 0, 100, -500, 1)`` plus the zero column
    ``F.pad(mel_energies, (0, 1))`` for the Nyquist bin."""
    p = KALDI_FBANK
    banks = kaldi_mel_banks(p["n_mels"], p["n_fft"], p["sample_rate"], p["low_freq"], p["high_freq"])
    return np.pad(banks, ((0, 0), (0, 1)), mode="constant", constant_values=0).astype(np.float32)
