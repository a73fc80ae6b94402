"""Voice Lab: decode, probe, find speech, pick a window and clean a recording for cloning.

Pure Python (numpy + ffmpeg); never imports Qt.
"""

from __future__ import annotations

from voice_lab.errors import (
    ChainError,
    EmptyAudioError,
    FfmpegMissingError,
    NoSpeechError,
    NotAudioError,
    RefusedRecordingError,
    TooLittleSpeechError,
    VoiceLabError,
)

#: The reference cloner asserts `len(wav) / sr > 5.0` on the prompt; a clip must be longer.
CLONING_MIN_SECONDS = 5.0
#: Every clip Voice Lab hands to cloning: 24 kHz, mono, float32.
OUTPUT_RATE = 24000

__all__ = [
    "CLONING_MIN_SECONDS",
    "OUTPUT_RATE",
    "ChainError",
    "EmptyAudioError",
    "FfmpegMissingError",
    "NoSpeechError",
    "NotAudioError",
    "RefusedRecordingError",
    "TooLittleSpeechError",
    "VoiceLabError",
    "prepare_clip",
    "LabResult",
]


def __getattr__(name: str):  # lazy: `import voice_lab` stays cheap for the GUI
    if name in ("prepare_clip", "LabResult", "write_outputs"):
        from voice_lab import lab

        return getattr(lab, name)
    raise AttributeError(name)
