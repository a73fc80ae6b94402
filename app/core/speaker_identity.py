"""Which speaker encoder tells a recording's speakers apart and scores likeness: the one
choice the app and the command line share.

1. The trained GE2E speaker encoder (engine_native.speaker_encoder: Resemblyzer's weights in
   our VoiceEncoder), from a file given (`lab --speaker-encoder`) or the one scripts/setup.sh
   converts (engine_native.convert.ge2e.default_path), where it is. The Voice Lab's split
   thresholds (voice_lab.speakers) and likeness's verdicts (engine_native.likeness) are
   measured on it with real recordings (benchmarks/bench_speakers.py).
2. Else, to tell speakers apart, the loaded model's CAMPPlus x-vectors: the clustering's
   scale-free rule still splits on them, but nothing of theirs is measured on real voices
   (a random-weight model's carry no identity); likeness falls back to the model's
   VoiceEncoder against the voice's speaker_emb (engine_native.likeness).
3. Else nothing: the window is taken from all the speech, unchecked (NOT_CHECKED says so).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

#: What the Voice Lab cannot check without a speaker encoder, in words.
NOT_CHECKED = "without a speaker encoder the lab cannot check that the window holds one voice"
#: How a user gets the trained encoder.
HOW_TO_GET = "scripts/setup.sh converts the trained GE2E speaker encoder (Resemblyzer's weights) once"

_loaded: dict[str, object] = {}
_lock = threading.Lock()


@dataclass(frozen=True)
class SpeakerEmbedder:
    embed: Callable          # embed(samples, rate) -> vector
    description: str         # "the GE2E speaker encoder (PATH)" / "the model's CAMPPlus x-vectors (PATH)"
    trained: bool            # the thresholds were measured on it

    @property
    def short(self) -> str:
        """A few words for a label: "GE2E encoder" / "model's x-vectors"."""
        return "GE2E encoder" if self.trained else "model's x-vectors"


def installed_path() -> str | None:
    """The speaker encoder scripts/setup.sh converted, where it is (CBS_SPEAKER_ENCODER moves it)."""
    from engine_native.convert.ge2e import default_path

    path = default_path()
    return str(path) if path.is_file() else None


def trained_encoder(path: str | os.PathLike | None = None):
    """The trained speaker encoder at `path` (ModelError when it is missing or not one), else
    the installed one, else None; each file is loaded once per process."""
    path = os.fspath(path) if path else installed_path()
    if path is None:
        return None
    with _lock:
        enc = _loaded.get(path)
        if enc is None:
            from engine_native.speaker_encoder import SpeakerEncoder

            enc = _loaded[path] = SpeakerEncoder(path)
        return enc


def speaker_embedder(encoder_path: str | None = None, engine=None) -> SpeakerEmbedder | None:
    """What tells speakers apart (see the module): the trained encoder, else the engine's
    x-vectors, else None. `engine`: an Engine, or a function giving one (called only when no
    trained encoder is there; it may give None)."""
    enc = trained_encoder(encoder_path)
    if enc is not None:
        return SpeakerEmbedder(enc.embed, f"the GE2E speaker encoder ({enc.path})", True)
    if callable(engine) and not hasattr(engine, "speaker_xvector"):
        engine = engine()
    if engine is not None:
        return SpeakerEmbedder(engine.speaker_xvector, f"the model's CAMPPlus x-vectors ({engine.path})", False)
    return None


def equip(engine, encoder_path: str | None = None):
    """`engine` with the trained encoder (where there is one) scoring its likeness; returns it.
    An unreadable encoder file leaves the model's own scoring (likeness says which it used)."""
    from engine_native.errors import EngineError

    try:
        engine.likeness_encoder = trained_encoder(encoder_path)
    except EngineError:
        engine.likeness_encoder = None
    return engine
