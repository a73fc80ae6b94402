"""Errors raised by Voice Lab. Every message is meant to be shown to the user as is."""

from __future__ import annotations


class VoiceLabError(Exception):
    """Base class: something about the input recording (or the tools) prevents preparing a clip."""


class FfmpegMissingError(VoiceLabError):
    """ffmpeg / ffprobe are needed for this file or step but are not installed."""


class NotAudioError(VoiceLabError):
    """The file cannot be read as audio (or has no audio track)."""


class EmptyAudioError(VoiceLabError):
    """The file decodes to zero samples."""


class NoSpeechError(VoiceLabError):
    """The recording is silence throughout (nothing above the noise threshold)."""


class TooLittleSpeechError(VoiceLabError):
    """There is speech, but less than the cloning minimum."""


class ChainError(VoiceLabError):
    """A filter chain (JSON or step parameters) is invalid, or ffmpeg rejected it."""


class RefusedRecordingError(NotAudioError):
    """The file is not a recording but a playlist, a list of files or URLs, or a container kind
    that can name other files or streams; it is refused without reading what it names."""
