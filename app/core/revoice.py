"""Re-voicing a recording, what the command line and the app share without Qt: the source read
by the hardened decoder (voice_lab.decode, as `bake`, `--ref` and the Voice Lab read one), and
the take a re-voiced recording becomes."""

from __future__ import annotations

import os


class SourceUnreadable(Exception):
    """The recording to re-voice cannot be read (missing, not audio, refused): one line."""


def decode_source(path: str):
    """(samples (frames, channels) float32, rate) of any recording ffmpeg reads."""
    from voice_lab import VoiceLabError
    from voice_lab.decode import decode

    try:
        return decode(path)
    except VoiceLabError as e:
        raise SourceUnreadable(f"cannot re-voice {path}: {e}") from None


def take_title(path: str, voice_name: str) -> str:
    """What a re-voiced recording's take is called (its text in the history)."""
    return f"{os.path.basename(path)}, re-voiced as {voice_name}"
