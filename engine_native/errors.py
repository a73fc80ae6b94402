"""The engine's error classes: every one is an `EngineError`, the class every native error has.

Catch `EngineError` for "anything the engine refused"; the subclasses say which input was
at fault so a caller (the GUI, the CLI) can word its message or offer the right fix.
"""

from engine_native._core import EngineError


class ModelError(EngineError):
    """The model file is missing, unreadable, corrupt or not a Chatterbox model."""


class VoiceError(EngineError):
    """A voice file or recording cannot be used."""


class VoiceTooShortError(VoiceError):
    """The recording is shorter than the minimum the reference accepts."""


class SilentAudioError(VoiceError):
    """The recording holds no signal (digital silence)."""


class IncompatibleVoiceError(VoiceError):
    """The voice was made for another model variant."""


class EmptyTextError(EngineError):
    """There is nothing to say: the text is empty or only punctuation."""


class ParameterError(EngineError, ValueError):
    """A synthesis parameter is outside its valid range."""


class Cancelled(EngineError):
    """A stream was cancelled (raised only by calls made after the cancel)."""
