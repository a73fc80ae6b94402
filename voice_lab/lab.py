"""The Voice Lab pipeline: recording in, 24 kHz mono float32 clip + report out."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from voice_lab import CLONING_MIN_SECONDS, OUTPUT_RATE
from voice_lab.chain import Chain, render, resolve
from voice_lab.decode import decode, probe, resample
from voice_lab.errors import NoSpeechError, VoiceLabError
from voice_lab.loudness import measure
from voice_lab.silence import DEFAULT_MIN_SILENCE, DEFAULT_NOISE_DB, detect_silence, speech_regions
from voice_lab.window import choose_window

DEFAULT_TARGET_SECONDS = 10.0
#: A clip is never shorter than this (the cloning minimum plus a margin), whatever the target.
MIN_CLIP_SECONDS = CLONING_MIN_SECONDS + 0.5
#: Decoding keeps the source rate up to this; every step after works on it, then 24 kHz.
MAX_WORK_RATE = 48000
FADE_SECONDS = 0.005


@dataclass
class LabResult:
    samples: np.ndarray  # (n,) float32 at OUTPUT_RATE, mono
    rate: int
    report: dict = field(default_factory=dict)
    chain: Chain | None = None

    @property
    def duration(self) -> float:
        return self.samples.shape[0] / self.rate


def _cut(mono: np.ndarray, rate: int, spans) -> np.ndarray:
    pieces = []
    fade = max(1, int(FADE_SECONDS * rate))
    for s in spans:
        a, b = int(round(s.start * rate)), int(round(s.end * rate))
        p = mono[a:b].astype(np.float32, copy=True)
        n = min(fade, p.shape[0] // 2)
        if n > 0:
            ramp = np.linspace(0.0, 1.0, n, endpoint=False, dtype=np.float32)
            p[:n] *= ramp
            p[-n:] *= ramp[::-1]
        pieces.append(p)
    return np.concatenate(pieces) if pieces else np.zeros(0, np.float32)


def prepare_clip(path, target: float = DEFAULT_TARGET_SECONDS, chain="auto",
                 noise_db: float = DEFAULT_NOISE_DB, min_silence: float = DEFAULT_MIN_SILENCE,
                 embed=None, speaker: int | None = None) -> LabResult:
    """Decode `path`, find the speech, pick the window, run the chain; see the module doc.

    `embed(samples, rate) -> vector` (a speaker encoder, e.g. Engine.speaker_xvector)
    tells the speakers apart (voice_lab.speakers); the window then comes from one speaker
    only: `speaker` (0-based, by most speech), default the one with the most speech. The
    report's "speakers" says who speaks where (absent without `embed`).

    `chain`: "auto" (from codec and bitrate), "clean", "lossy", a chain .json path, a
    `Chain` or its dict. Raises a `VoiceLabError` subclass with a clear message on bad input.
    """
    path = os.fspath(path)
    if not target or target <= 0 or not np.isfinite(target):
        raise VoiceLabError(f"the target length must be a positive number of seconds, got {target!r}")
    info = probe(path)
    x, rate = decode(path, rate=min(info.sample_rate, MAX_WORK_RATE) or None, info=info)
    duration = x.shape[0] / rate
    if not np.any(x):
        raise NoSpeechError(f"{path}: no speech found: the recording is digital silence")
    silences = detect_silence(x, rate, noise_db, min_silence)
    regions = speech_regions(silences, duration)
    if not regions:
        raise NoSpeechError(f"{path}: no speech found: nothing is louder than {noise_db:g} dBFS "
                            f"for more than {min_silence:g} s")
    effective = max(float(target), MIN_CLIP_SECONDS)
    mono = x.mean(axis=1) if x.shape[1] > 1 else x[:, 0]
    speakers_report = None
    window_regions = regions
    if embed is not None:
        from voice_lab.speakers import find_speakers

        found = find_speakers(mono, rate, regions, embed)
        chosen = 0 if speaker is None else int(speaker)
        if found.count and not 0 <= chosen < found.count:
            raise VoiceLabError(f"{path}: speaker {chosen + 1} asked for; the recording has {found.count}")
        speakers_report = {**found.to_dict(), "chosen": chosen + 1 if found.count else None}
        if found.count > 1:
            window_regions = found.spans_of(chosen)
    try:
        window = choose_window(window_regions, effective, CLONING_MIN_SECONDS)
    except VoiceLabError as e:
        raise type(e)(f"{path}: {e}") from None
    chain_obj, chain_reason = resolve(chain, info)

    raw = _cut(mono, rate, window.spans)
    before = measure(resample(raw, rate, OUTPUT_RATE), OUTPUT_RATE)
    out, graph = render(raw, rate, chain_obj, OUTPUT_RATE)
    out = np.ascontiguousarray(out, dtype=np.float32)
    after = measure(out, OUTPUT_RATE)

    report = {
        "source": info.to_dict(),
        "analysis": {
            "decoded_rate": rate,
            "decoded_channels": int(x.shape[1]),
            "duration": round(duration, 4),
            "noise_db": noise_db,
            "min_silence": min_silence,
            "silences": [s.to_list() for s in silences],
            "speech_regions": [r.to_list() for r in regions],
            "speech_seconds": round(sum(r.duration for r in regions), 4),
        },
        "window": {**window.to_dict(), "target_requested": float(target)},
        "chain": chain_obj.to_dict(),
        "chain_reason": chain_reason,
        "ffmpeg_filter": graph,
        "loudness": {"before": before, "after": after},
        "output": {
            "rate": OUTPUT_RATE,
            "channels": 1,
            "sample_format": "float32",
            "samples": int(out.shape[0]),
            "duration": round(out.shape[0] / OUTPUT_RATE, 4),
        },
    }
    if speakers_report is not None:
        report["speakers"] = speakers_report
    return LabResult(out, OUTPUT_RATE, report, chain_obj)


def _atomic_write(path: str, write) -> None:
    """engine_native's one atomic writer; its failure is a VoiceLabError naming the file."""
    from engine_native.files import WriteFailed, atomic_write

    try:
        atomic_write(path, lambda tmp: write(str(tmp)))
    except WriteFailed as e:
        raise VoiceLabError(str(e)) from None


def write_clip(path: str, samples: np.ndarray, rate: int = OUTPUT_RATE) -> None:
    """The clip as a 32-bit float mono WAV, written atomically."""
    import soundfile as sf

    _atomic_write(path, lambda tmp: sf.write(tmp, np.asarray(samples, np.float32), rate,
                                             format="WAV", subtype="FLOAT"))


def write_report(path: str, report: dict) -> None:
    def w(tmp):
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2, allow_nan=False)
            f.write("\n")

    _atomic_write(path, w)


def write_outputs(result: LabResult, clip_path: str, report_path: str | None = None) -> str:
    """Write the clip and its report (default: CLIP with the suffix .lab.json); returns the report path."""
    report_path = report_path or os.path.splitext(clip_path)[0] + ".lab.json"
    write_clip(clip_path, result.samples, result.rate)
    report = dict(result.report)
    report["output"] = {**report.get("output", {}), "path": os.path.abspath(clip_path)}
    write_report(report_path, report)
    return report_path
