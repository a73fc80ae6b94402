"""The engine's error classes: every one is an `EngineError`, the class every native error has.

Catch `EngineError` for "anything the engine refused"; the subclasses say which input was
at fault so a caller (the GUI, the CLI) can word its message or offer the right fix.

The native module raises these classes: its exception translator looks them up here when
an error crosses into Python (so this module must not import `_core` at its top).
"""


class EngineError(RuntimeError):
    """Anything the engine refused: bad input, a model it cannot use, a failed computation."""


class ModelError(EngineError):
    """The model file is missing, unreadable, corrupt, not a Chatterbox model or inconsistent."""


class VoiceError(EngineError):
    """A voice file or recording cannot be used."""


class VoiceTooShortError(VoiceError):
    """The recording is shorter than the minimum the reference accepts."""


class SilentAudioError(VoiceError):
    """The recording holds no signal (digital silence)."""


class IncompatibleVoiceError(VoiceError):
    """The voice was made for another model variant."""


class SourceError(EngineError):
    """A recording to re-voice cannot be used (not audio, empty, invalid samples)."""


class SourceTooShortError(SourceError):
    """The recording to re-voice is too short to tokenize."""


class NoSpeechError(SourceError):
    """The recording to re-voice holds no speech."""


class EmptyTextError(EngineError):
    """There is nothing to say: the text is empty or only punctuation."""


class ParameterError(EngineError, ValueError):
    """A synthesis parameter is outside its valid range."""


class Cancelled(EngineError):
    """A stream was cancelled (raised only by calls made after the cancel)."""


class Superseded(Cancelled):
    """A stream was ended because a newer request took its place."""


class OutOfMemoryError(EngineError, MemoryError):
    """The engine could not allocate the memory a model or a computation needs."""


class DeviceError(EngineError):
    """A device (cpu, cuda:0, vulkan:0, ...) that is not present in this build, or one that failed to start."""


class EngineBusyError(EngineError):
    """The resource asked for (a KV cache, an engine) is in use by another stream."""
