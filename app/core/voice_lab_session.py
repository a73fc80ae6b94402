"""The Voice Lab's state, without Qt: one recording being made into a voice.

A session holds what the user works on: the recording's analysis, who speaks where, the
clone window, the filter chain, the rendered window (kept while the window and chain stay
the same), the cloned voice and where it went. The view (app.qt.voice_lab_view) lays it out
and binds it; the work is in the functions below, which never run on the GUI thread: the
analysis and the rendering (voice_lab.lab) and the file writes as background operations,
`find_speakers` as a background operation with the trained speaker encoder where it is
installed, else on the engine thread with the model's x-vectors (the choice:
app.core.speaker_identity), `clone` and `test_take_likeness` on the engine thread
(EngineClient's operations of the same names).
"""

from __future__ import annotations

import dataclasses
import os

from voice_lab import CLONING_MIN_SECONDS, OUTPUT_RATE, VoiceLabError
from voice_lab.lab import MIN_CLIP_SECONDS, Analysis, WindowClip

DEFAULT_TARGET_S = 10.0
TEST_SENTENCE = "Hello! This is my new voice. How does it sound?"
MEDIA_SUFFIXES = (".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".mp4", ".mkv", ".webm", ".mov")


def suggested_name(path: str) -> str:
    """A voice's name from its recording's file name ("my_talk.mp3" -> "my talk")."""
    base = os.path.basename(path)
    for suffix in MEDIA_SUFFIXES:
        if base.lower().endswith(suffix):
            base = base[: -len(suffix)]
    return base.replace("_", " ").strip() or "New voice"


class VoiceLabSession:
    def __init__(self):
        self.open(None)

    def open(self, path: str | None) -> None:
        """A new recording: everything of the last one goes."""
        self.path = path
        self.analysis: Analysis | None = None
        self.speakers = None  # voice_lab.speakers.Speakers of the recording, once told apart
        self.speakers_by = None  # the app.core.speaker_identity.SpeakerEmbedder that told them apart
        self.speaker = 0  # the speaker the window comes from (by most speech)
        self.windows: list[tuple[float, float]] = []  # the clone window, in seconds
        self.chain = None  # voice_lab.chain.Chain the window goes through
        self.clip: WindowClip | None = None  # the rendered window, for clip_key
        self.clip_key = None
        self.voice = None  # the cloned engine_native.Voice
        self.voice_clip: tuple | None = None  # (samples, rate) it was cloned from: kept beside a saved voice
        self.clone_likeness: float | None = None
        self.saved_path: str | None = None
        self.baked_path: str | None = None
        self.busy = ""  # "analysing" / "speakers" / "rendering" / "cloning" / "saving" / "baking" / ""

    # --- the recording ------------------------------------------------------------------------------

    def analysed(self, a: Analysis) -> None:
        self.analysis = a
        self.set_windows(a.window)

    def speakers_found(self, found, by=None) -> None:
        self.speakers, self.speakers_by = found, by
        self.speaker = 0

    def speakers_note(self) -> str:
        """Who told the speakers apart and what that leaves unchecked, in words."""
        from app.core.speaker_identity import HOW_TO_GET, NOT_CHECKED

        by = self.speakers_by
        if by is None:
            return f"Speakers not checked: {NOT_CHECKED} ({HOW_TO_GET}, or load a model)."
        if by.trained:
            return f"Speakers told apart by {by.description}, whose thresholds are measured on real voices."
        return (f"Speakers told apart by {by.description}: the thresholds are measured on the trained GE2E "
                f"encoder, not on these, so two similar voices may stay one ({HOW_TO_GET}).")

    @property
    def several_speakers(self) -> bool:
        return self.speakers is not None and self.speakers.count > 1

    def regions(self) -> list[tuple[float, float, str]]:
        """What the waveform colours: silence, speech, and a second speaker's speech as "speech2"."""
        a = self.analysis
        if a is None:
            return []
        out = [(s.start, s.end, "silence") for s in a.silences]
        if self.several_speakers:
            out += [(s.start, s.end, "speech") for s in self.speakers.spans_of(0)]
            out += [(s.start, s.end, "speech2") for s in self.speakers.spans_of(1)]
        else:
            out += [(r.start, r.end, "speech") for r in a.regions]
        return out

    # --- the window and the chain -------------------------------------------------------------------

    def choose_window(self, target: float) -> list[tuple[float, float]]:
        """The window of about `target` seconds of the chosen speaker's speech (all the speech
        with one speaker); VoiceLabError when there is too little, and then no window at all
        with several speakers (never another speaker's)."""
        from voice_lab.window import choose_window

        regions, who = self.analysis.regions, ""
        if self.several_speakers:
            regions, who = self.speakers.clone_spans(self.speaker), f"speaker {self.speaker + 1}: "
        try:
            w = choose_window(regions, max(target, MIN_CLIP_SECONDS), CLONING_MIN_SECONDS)
        except VoiceLabError as e:
            if who:
                self.set_windows([])
            raise VoiceLabError(who + str(e)) from None
        self.set_windows([(s.start, s.end) for s in w.spans])
        return self.windows

    def set_windows(self, spans) -> None:
        self.windows = [(float(a), float(b)) for a, b in spans]

    def set_chain(self, chain) -> None:
        self.chain = chain.copy()

    @property
    def window_seconds(self) -> float:
        return sum(b - a for a, b in self.windows)

    def key(self):
        """What the rendered window depends on."""
        return tuple(self.windows), None if self.chain is None else self.chain.to_json(indent=None)

    def current_clip(self) -> WindowClip | None:
        """The rendered window if it still matches the window and the chain."""
        return self.clip if self.clip is not None and self.clip_key == self.key() else None

    def rendered(self, clip: WindowClip, key) -> None:
        self.clip, self.clip_key = clip, key

    def clone_problem(self) -> str | None:
        """Why the window cannot be cloned yet, in words; None when it can."""
        total = self.window_seconds
        if total <= CLONING_MIN_SECONDS:
            return (f"The window is {total:.1f} s; cloning needs more than {CLONING_MIN_SECONDS:.0f} s "
                    "of speech. Drag its edges wider.")
        return None

    # --- the voice ----------------------------------------------------------------------------------

    def cloned(self, voice, samples) -> None:
        self.voice, self.voice_clip = voice, (samples, OUTPUT_RATE)
        self.saved_path = None
        self.clone_likeness = None

    def meta(self) -> dict:
        """What a saved voice records of the lab: the chain."""
        return {"chain": self.chain.to_json(indent=None)} if self.chain is not None else {}


# --- the jobs (never on the GUI thread) --------------------------------------------------------------


def find_speakers(mono, rate: int, regions, engine=None):
    """(who speaks where: voice_lab.speakers.Speakers, the SpeakerEmbedder that told them
    apart): with the trained speaker encoder where it is installed, else with `engine`'s
    x-vectors (app.core.speaker_identity); (None, None) when there is neither."""
    from app.core.speaker_identity import speaker_embedder
    from voice_lab.speakers import find_speakers as find

    by = speaker_embedder(engine=engine)
    if by is None:
        return None, None
    found = find(mono, rate, regions, by.embed)
    # Kept by the session for its label only: without its embed function, which may be an
    # engine's method and would keep that model in memory after the user switches models.
    return found, dataclasses.replace(by, embed=None)


def clone(engine, samples, rate: int = OUTPUT_RATE):
    """A voice from the rendered window."""
    return engine.voice_from_audio(samples, rate)


def test_take_likeness(engine, text: str, voice, options: dict | None = None, cancel=None,
                       recording=None) -> tuple[float, str] | None:
    """(likeness, what scored it) of a take of `text` in `voice` to the voice: how well the
    clone speaks like `recording` ((samples, rate), the clip it was cloned from), with the
    engine's trained speaker encoder where it has one (engine_native.likeness.Likeness). A
    take needs no more tokens than its sentence can plausibly last; `cancel` (anything with
    `is_set()`) stops it between chunks. None when cancelled."""
    from engine_native.likeness import Likeness, best_take, plausible_seconds

    opts = dict(options or {})
    longest_tokens = int(plausible_seconds(text)[1] * engine.token_rate) + 1
    opts.setdefault("max_tokens", min(longest_tokens, engine.defaults["max_tokens"]))
    scorer = Likeness(engine, voice, reference=recording)
    take = best_take(engine, text, voice, seeds=[0], options=opts, cancel=cancel, scorer=scorer)
    return None if take is None else (take.score, scorer.by)


def save_to_library(store, voice, name: str, clip, meta: dict) -> str:
    """The voice (and the recording it came from) into the library; returns its path."""
    return store.add(voice, name, clip=clip, **meta)


def export_voice(voice, path: str, name: str, meta: dict) -> str:
    """The voice as a file of its own; returns the path written."""
    if not path.endswith(".voice.gguf"):
        path += ".voice.gguf"
    voice.save(path, name=name, **meta)
    return path


def export_model(model_path: str, voice, path: str, name: str, meta: dict) -> str:
    """A copy of the model whose built-in voice is `voice` (engine_native.bake)."""
    from dataclasses import replace

    from engine_native.bake import bake_into_model

    if not path.endswith(".gguf"):
        path += ".gguf"
    baked = replace(voice, meta={**voice.meta, "name": name, **meta})  # its name and chain, as `info` shows them
    return str(bake_into_model(model_path, baked, path))
