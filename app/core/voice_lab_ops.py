"""Voice Lab work that runs off the GUI thread: analyse a recording, cut the window, render the
filter chain. Pure numpy/ffmpeg through voice_lab; no Qt here."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from voice_lab import CLONING_MIN_SECONDS, OUTPUT_RATE, VoiceLabError

MAX_WORK_RATE = 48000
FADE_S = 0.005


@dataclass
class Analysis:
    path: str
    probe: object
    mono: np.ndarray
    rate: int
    silences: list
    regions: list
    window: list = field(default_factory=list)  # [(start, end)]
    window_note: str = ""
    chain_name: str = "clean"
    chain_reason: str = ""
    source_loudness: dict = field(default_factory=dict)

    @property
    def duration(self) -> float:
        return self.mono.size / self.rate


def analyse(path: str, target: float) -> Analysis:
    """Probe, decode, find speech, choose the window and the chain (background thread)."""
    from voice_lab.chain import choose_preset
    from voice_lab.decode import decode, probe
    from voice_lab.lab import MIN_CLIP_SECONDS
    from voice_lab.loudness import measure
    from voice_lab.silence import detect_silence, speech_regions
    from voice_lab.window import choose_window

    info = probe(path)
    x, rate = decode(path, rate=min(info.sample_rate, MAX_WORK_RATE) or None, info=info)
    mono = (x.mean(axis=1) if x.shape[1] > 1 else x[:, 0]).astype(np.float32)
    silences = detect_silence(x, rate)
    regions = speech_regions(silences, x.shape[0] / rate)
    a = Analysis(path, info, mono, rate, silences, regions)
    try:
        w = choose_window(regions, max(target, MIN_CLIP_SECONDS), CLONING_MIN_SECONDS)
        a.window = [(s.start, s.end) for s in w.spans]
        a.window_note = "one continuous stretch" if w.method == "continuous" else f"{len(w.spans)} pieces joined"
    except VoiceLabError as e:
        a.window_note = str(e)
    a.chain_name, a.chain_reason = choose_preset(info)
    a.source_loudness = measure(mono, rate)
    return a


def cut(mono: np.ndarray, rate: int, spans) -> np.ndarray:
    """The window's pieces joined, each with 5 ms fades so the joins do not click."""
    pieces = []
    n_fade = max(1, int(FADE_S * rate))
    for a, b in spans:
        p = mono[int(round(a * rate)):int(round(b * rate))].astype(np.float32, copy=True)
        n = min(n_fade, p.size // 2)
        if n:
            ramp = np.linspace(0.0, 1.0, n, endpoint=False, dtype=np.float32)
            p[:n] *= ramp
            p[-n:] *= ramp[::-1]
        pieces.append(p)
    return np.concatenate(pieces) if pieces else np.zeros(0, np.float32)


def render_clip(mono: np.ndarray, rate: int, spans, chain) -> dict:
    """Original and processed window at 24 kHz, with loudness before/after (background thread)."""
    from voice_lab.chain import render
    from voice_lab.decode import resample
    from voice_lab.loudness import measure

    raw = cut(mono, rate, spans)
    original = resample(raw, rate, OUTPUT_RATE).astype(np.float32)
    processed, graph = render(raw, rate, chain, OUTPUT_RATE)
    return {"original": original, "processed": np.ascontiguousarray(processed, np.float32), "graph": graph,
            "before": measure(original, OUTPUT_RATE), "after": measure(processed, OUTPUT_RATE)}
