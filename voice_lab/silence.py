"""Silence detection for the Voice Lab: the engine's own (engine_native.speech), so every
cloning path judges speech the same way."""

from engine_native.speech import (DEFAULT_MIN_SILENCE, DEFAULT_NOISE_DB, Span, check_speech,  # noqa: F401
                                  db_to_amplitude, detect_silence, silent_runs, speech_regions, speech_seconds)
