"""The Voice Lab pipeline: recording in, 24 kHz mono float32 clip + report out.

The steps are the app's too: `read_recording` / `analyse` (decode, silences, speech regions,
a suggested window and chain), `render_window` (a window through a chain, with loudness
before and after); `prepare_clip` runs them in one go for the command line.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

import numpy as np

from voice_lab import CLONING_MIN_SECONDS, OUTPUT_RATE
from voice_lab.chain import Chain, choose_preset, render, resolve
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


@dataclass
class Analysis:
    """A recording as the lab sees it: decoded (mono, at most MAX_WORK_RATE), its silences and
    speech regions; `analyse` adds the suggested window, chain and the source's loudness."""

    path: str
    probe: object
    mono: np.ndarray
    rate: int
    channels: int
    silences: list
    regions: list
    digital_silence: bool = False  # every sample of every channel is zero
    window: list = field(default_factory=list)  # [(start, end)] in seconds
    window_note: str = ""
    chain_name: str = "clean"
    chain_reason: str = ""
    source_loudness: dict = field(default_factory=dict)

    @property
    def duration(self) -> float:
        return self.mono.size / self.rate


@dataclass
class WindowClip:
    """A window of a recording at OUTPUT_RATE, as recorded and through the chain."""

    original: np.ndarray
    processed: np.ndarray
    graph: str  # the ffmpeg filter graph that made `processed`
    before: dict  # loudness.measure of `original`
    after: dict  # ... of `processed`


def read_recording(path, noise_db: float = DEFAULT_NOISE_DB, min_silence: float = DEFAULT_MIN_SILENCE) -> Analysis:
    """Probe and decode `path` and find its silences and speech regions."""
    path = os.fspath(path)
    info = probe(path)
    x, rate = decode(path, rate=min(info.sample_rate, MAX_WORK_RATE) or None, info=info)
    mono = (x.mean(axis=1) if x.shape[1] > 1 else x[:, 0]).astype(np.float32)
    silences = detect_silence(x, rate, noise_db, min_silence)
    regions = speech_regions(silences, x.shape[0] / rate)
    return Analysis(path, info, mono, rate, int(x.shape[1]), silences, regions, digital_silence=not np.any(x))


def analyse(path, target: float = DEFAULT_TARGET_SECONDS) -> Analysis:
    """The recording, plus what the app suggests for it: a window of `target` seconds (or why
    there is none), a chain from its codec and bitrate, and its loudness."""
    a = read_recording(path)
    try:
        w = choose_window(a.regions, max(target, MIN_CLIP_SECONDS), CLONING_MIN_SECONDS)
        a.window = [(s.start, s.end) for s in w.spans]
        a.window_note = "one continuous stretch" if w.method == "continuous" else f"{len(w.spans)} pieces joined"
    except VoiceLabError as e:
        a.window_note = str(e)
    a.chain_name, a.chain_reason = choose_preset(a.probe)
    a.source_loudness = measure(a.mono, a.rate)
    return a


def cut(mono: np.ndarray, rate: int, spans) -> np.ndarray:
    """The window's pieces, (start, end) in seconds, joined; each with 5 ms fades so the joins
    do not click."""
    pieces = []
    fade = max(1, int(FADE_SECONDS * rate))
    for start, end in spans:
        p = mono[int(round(start * rate)):int(round(end * rate))].astype(np.float32, copy=True)
        n = min(fade, p.shape[0] // 2)
        if n > 0:
            ramp = np.linspace(0.0, 1.0, n, endpoint=False, dtype=np.float32)
            p[:n] *= ramp
            p[-n:] *= ramp[::-1]
        pieces.append(p)
    return np.concatenate(pieces) if pieces else np.zeros(0, np.float32)


def render_window(mono: np.ndarray, rate: int, spans, chain: Chain) -> WindowClip:
    """The window at OUTPUT_RATE, as recorded and through `chain`, with the loudness of both."""
    raw = cut(mono, rate, spans)
    original = resample(raw, rate, OUTPUT_RATE).astype(np.float32)
    processed, graph = render(raw, rate, chain, OUTPUT_RATE)
    processed = np.ascontiguousarray(processed, dtype=np.float32)
    return WindowClip(original, processed, graph, measure(original, OUTPUT_RATE), measure(processed, OUTPUT_RATE))


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
    a = read_recording(path, noise_db, min_silence)
    if a.digital_silence:
        raise NoSpeechError(f"{path}: no speech found: the recording is digital silence")
    if not a.regions:
        raise NoSpeechError(f"{path}: no speech found: nothing is louder than {noise_db:g} dBFS "
                            f"for more than {min_silence:g} s")
    effective = max(float(target), MIN_CLIP_SECONDS)
    speakers_report = None
    window_regions = a.regions
    if embed is not None:
        from voice_lab.speakers import find_speakers

        found = find_speakers(a.mono, a.rate, a.regions, embed)
        chosen = 0 if speaker is None else int(speaker)
        if found.count and not 0 <= chosen < found.count:
            raise VoiceLabError(f"{path}: speaker {chosen + 1} asked for; the recording has {found.count}")
        speakers_report = {**found.to_dict(), "chosen": chosen + 1 if found.count else None}
        if found.count > 1:
            window_regions = found.clone_spans(chosen)
    try:
        window = choose_window(window_regions, effective, CLONING_MIN_SECONDS)
    except VoiceLabError as e:
        raise type(e)(f"{path}: {e}") from None
    chain_obj, chain_reason = resolve(chain, a.probe)
    clip = render_window(a.mono, a.rate, [(s.start, s.end) for s in window.spans], chain_obj)
    out = clip.processed

    report = {
        "source": a.probe.to_dict(),
        "analysis": {
            "decoded_rate": a.rate,
            "decoded_channels": a.channels,
            "duration": round(a.duration, 4),
            "noise_db": noise_db,
            "min_silence": min_silence,
            "silences": [s.to_list() for s in a.silences],
            "speech_regions": [r.to_list() for r in a.regions],
            "speech_seconds": round(sum(r.duration for r in a.regions), 4),
        },
        "window": {**window.to_dict(), "target_requested": float(target)},
        "chain": chain_obj.to_dict(),
        "chain_reason": chain_reason,
        "ffmpeg_filter": clip.graph,
        "loudness": {"before": clip.before, "after": clip.after},
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
