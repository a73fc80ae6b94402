"""Reference stages for the Perth watermark (resemble-perth 1.0.1, the package's own trained
weights: nothing to build, the snapshot argument is unused). REFERENCE-VENV ONLY.

`perth_apply`: PerthImplicitWatermarker().apply_watermark(samples, sample_rate=rate).
`perth_bits`: get_watermark(samples, rate, round=False) and round=True, with the decoder's
three branches' outputs per frame (forward hooks on slow/normal/fast_layers) and the frame mask.
`perth_time`: seconds for apply on `samples` and get_watermark on `detect_samples`, with
torch on `threads` threads (the best of `repeats`).
`librosa_resample`: librosa.resample(samples, orig_sr, target_sr, res_type) as the package
calls it (soxr_hq in apply_watermark, polyphase in get_watermark).
"""
from __future__ import annotations

import time
import warnings
from pathlib import Path

import numpy as np
import torch

from .stages import Inputs, stage

_watermarker = None


def _perth():
    global _watermarker
    if _watermarker is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # pkg_resources' deprecation notice
            import perth
        _watermarker = perth.PerthImplicitWatermarker()
    return _watermarker


def _audio(inputs: Inputs, key: str = "samples") -> tuple[np.ndarray, int]:
    return np.asarray(inputs[key], np.float32), int(np.asarray(inputs["sample_rate"]))


@stage("perth_apply")
def perth_apply_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """samples, sample_rate -> wav: apply_watermark as chatterbox-tts calls it."""
    x, rate = _audio(inputs)
    with torch.inference_mode():
        y = _perth().apply_watermark(x, sample_rate=rate)
    return {"wav": np.asarray(y, np.float32)}


@stage("perth_bits")
def perth_bits_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """samples, sample_rate -> score (round=False), bit (round=True) and each decoder branch's
    output [2, frames] (attention, mark) with the frame mask [frames] it is averaged under."""
    x, rate = _audio(inputs)
    wm = _perth()
    dec = wm.perth_net.decoder
    seen: dict[str, np.ndarray] = {}
    hooks = [getattr(dec, f"{b}_layers").register_forward_hook(
        lambda _m, _i, out, b=b: seen.__setitem__(b, out[0].detach().numpy().copy()))
        for b in ("slow", "normal", "fast")]
    if int(np.asarray(inputs.get("float64", 0))):
        return _bits_float64(wm, x, rate, seen, hooks)
    try:
        with torch.inference_mode():
            score = wm.get_watermark(x, rate, round=False)
            bit = np.round(score)   # get_watermark(round=True): the same computation, rounded half to even
            # the mask the decoder averages under, from the same magnitudes
            from librosa import resample
            x32 = resample(x, orig_sr=rate, target_sr=wm.perth_net.hp.sample_rate, res_type="polyphase") \
                if rate != wm.perth_net.hp.sample_rate else x
            mag, _ = wm.perth_net.ap.signal_to_magphase(torch.from_numpy(np.ascontiguousarray(x32)).float())
            from perth.perth_net.perth_net_implicit.model import magmask
            mask = magmask(mag[None])[0].numpy()
    finally:
        for h in hooks:
            h.remove()
    out = {"score": np.asarray(score, np.float32), "bit": np.asarray(bit, np.float32), "mask": mask}
    out.update({f"{b}_out": v for b, v in seen.items()})
    return out


def _bits_float64(wm, x, rate, seen, hooks) -> Inputs:
    """get_watermark's steps in float64 (the STFT and the decoder): how far the f32 reference
    itself is from exact arithmetic."""
    import copy

    from librosa import resample
    from perth.perth_net.perth_net_implicit.utils import cx_to_magphase

    net = wm.perth_net
    try:
        x32 = resample(x.astype(np.float64), orig_sr=rate, target_sr=net.hp.sample_rate, res_type="polyphase") \
            if rate != net.hp.sample_rate else x.astype(np.float64)
        ap = net.ap.spectrogram
        with torch.inference_mode():
            spec = torch.stft(torch.from_numpy(np.ascontiguousarray(x32)), n_fft=ap.n_fft, hop_length=ap.hop_length,
                              win_length=ap.win_length, window=ap.window.double(), center=True, pad_mode="reflect",
                              normalized=False, onesided=True, return_complex=True)
            mag, _ = cx_to_magphase(net.hp, spec)
            dec = copy.deepcopy(net.decoder).double()
            for b in ("slow", "normal", "fast"):   # the hooks were on the f32 copy
                getattr(dec, f"{b}_layers").register_forward_hook(
                    lambda _m, _i, out, b=b: seen.__setitem__(b, out[0].detach().numpy().astype(np.float32)))
            score = dec(mag[None])[0].clip(0., 1.)
    finally:
        for h in hooks:
            h.remove()
    out = {"score": np.asarray(score.item(), np.float32), "bit": np.asarray(round(score.item()), np.float32)}
    out.update({f"{b}_out": v for b, v in seen.items()})
    return out


@stage("perth_time")
def perth_time_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """Seconds (best of `repeats`) for apply_watermark(samples) and get_watermark(detect_samples)
    with torch on `threads` threads."""
    torch.set_num_threads(int(np.asarray(inputs["threads"])))
    repeats = int(np.asarray(inputs.get("repeats", 3)))
    x, rate = _audio(inputs)
    d, _ = _audio(inputs, "detect_samples")
    wm = _perth()
    with torch.inference_mode():
        wm.apply_watermark(x[: rate], sample_rate=rate)   # warm-up (first-call allocations)
        apply_s, detect_s = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            wm.apply_watermark(x, sample_rate=rate)
            apply_s.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            wm.get_watermark(d, rate)
            detect_s.append(time.perf_counter() - t0)
    return {"apply_s": np.asarray(min(apply_s)), "detect_s": np.asarray(min(detect_s))}


@stage("librosa_resample")
def librosa_resample_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """samples, orig_sr, target_sr, res_type -> y."""
    from librosa import resample

    x = np.asarray(inputs["samples"], np.float32)
    res_type = str(np.asarray(inputs["res_type"]))
    y = resample(x, orig_sr=int(np.asarray(inputs["orig_sr"])), target_sr=int(np.asarray(inputs["target_sr"])),
                 res_type=res_type)
    return {"y": np.asarray(y)}
