"""Checking a recording for the Perth watermark the engine (and the official chatterbox-tts)
puts on what it speaks: the command line's `detect` and the app's "Check a recording for a
watermark…" both come here. The file is decoded as every recording is (voice_lab.decode:
any audio or video ffmpeg reads, at its own rate, channels mixed) and read by the detector
(engine_native.watermark); anything wrong with it is one line (CheckError).
"""

from __future__ import annotations

from dataclasses import dataclass


class CheckError(Exception):
    """The file could not be checked: not audio, empty, too short, unreadable (one line)."""


@dataclass(frozen=True)
class Verdict:
    path: str
    marked: bool
    confidence: float   # the mean of the detector's rounded bits, as the official `perth` CLI prints it
    score: float        # the detector's score before rounding (NaN: digital silence)

    @property
    def text(self) -> str:
        return f"{'marked' if self.marked else 'not marked'} (confidence {self.confidence:.2f})"


def watermarker(model: str | None = None):
    """The detector: `model` (a perth.gguf), else the one engine_native.watermark finds, shared."""
    from engine_native.watermark import Watermarker, default_watermarker

    return Watermarker(model) if model else default_watermarker()


def check_recording(path: str, wm=None) -> Verdict:
    """The verdict on one file; CheckError saying what is wrong otherwise (the watermark model
    missing included)."""
    from engine_native import EngineError
    from voice_lab import VoiceLabError
    from voice_lab.decode import decode

    try:
        wm = wm or watermarker()
        samples, rate = decode(path)
        d = wm.detect(samples, rate)
    except (VoiceLabError, EngineError, OSError) as e:
        raise CheckError(str(e)) from None
    return Verdict(str(path), d.marked, d.confidence, d.score)
