"""Likeness: how close a take sounds to its voice, and best-of-N takes.

The score is a cosine of two L2-normalised speaker embeddings, in [-1, 1]. Which embeddings
is the caller's explicit choice (`Likeness`; `Likeness.by` names it):
- with a trained speaker encoder (`encoder`, else `engine.likeness_encoder`:
  engine_native.speaker_encoder.SpeakerEncoder, Resemblyzer's GE2E weights) and the voice's
  own recording (`reference` (samples, rate), else the clip kept beside its file,
  `Engine.voice_clip`): the encoder's embedding of the take against its embedding of the
  recording - the scale the verdict thresholds below are measured on;
- else the engine's VoiceEncoder embedding of the take (made as `voice_from_audio` makes a
  voice's `speaker_emb`: 24 kHz, loudness to -27 LUFS, 16 kHz; `Engine.speaker_embedding`)
  against the voice's `speaker_emb` (the model's built-in voice when none is given).

A person reads it through `verdict` / `describe`: "same voice" at SAME_SPEAKER (0.80) and
above, "different voice" under DIFFERENT_SPEAKER (0.70), "unsure" between. The thresholds
are measured with the trained GE2E encoder (Resemblyzer's weights in this VoiceEncoder,
engine_native.speaker_encoder) on real recordings of 12 speakers (benchmarks/bench_speakers.py):
same-speaker pairs of clips median 0.90 (5th percentile 0.73), different speakers median
0.49 (95th percentile 0.69, the closest pair 0.83: two women of one conversation); 86 % of
same-speaker pairs read "same voice" and 0.3 % of different ones, 97 % of different-speaker
pairs "different voice" and 2 % of same ones. A trained Chatterbox model's own
VoiceEncoder has this architecture and recipe but other weights: on it the scale is assumed,
not measured, to match. Random-weight test models read ~1.0 for everything.

Best-of-N renders a piece with N seeds and keeps the take with the highest likeness among
those whose length is plausible for the text: between `0.4 x expected - 0.3 s` and
`2.5 x expected + 1 s`, where expected = characters / 14 characters a second (a
run-on or a cut-off take sounds wrong whatever its timbre). When no take is plausible the
highest score overall wins.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

CHARS_PER_SECOND = 14.0
#: Reading a score (cosine of speaker embeddings): at or above SAME_SPEAKER the take sounds
#: like its voice; below DIFFERENT_SPEAKER like someone else; between, unsure.
SAME_SPEAKER = 0.80
DIFFERENT_SPEAKER = 0.70


TRAINED = "the trained speaker encoder"
MODEL = "the model's VoiceEncoder"


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float32).reshape(-1), np.asarray(b, np.float32).reshape(-1)
    denom = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(np.dot(a, b) / denom) if denom > 0 else 0.0


def kept_recording(voice) -> tuple[np.ndarray, int] | None:
    """The recording kept beside a voice's file (engine_native.voice.clip_path), or None."""
    from engine_native.voice import clip_path

    path = clip_path(getattr(voice, "path", None))
    if path is None:
        return None
    import soundfile as sf

    try:
        samples, rate = sf.read(path, dtype="float32", always_2d=True)
    except Exception:  # an unreadable clip: score as if none were kept (soundfile raises several kinds)
        return None
    return samples.mean(axis=1), int(rate)


class Likeness:
    """Scores takes against one voice (see the module for which embeddings): the voice's side
    is embedded once. `by` says which embeddings; `trained` whether the verdict's thresholds
    were measured on them."""

    def __init__(self, engine, voice=None, *, encoder=None, reference=None):
        self.engine = engine
        self.voice = voice if voice is not None else engine.builtin_voice
        if encoder is None:
            encoder = getattr(engine, "likeness_encoder", None)
        if encoder is not None and reference is None:
            reference = kept_recording(self.voice)
        self.encoder = encoder if reference is not None else None
        if self.encoder is not None:
            self._ref = self.encoder.embed(reference[0], reference[1])
        else:
            self._ref = np.asarray(self.voice.speaker_emb, np.float32).reshape(-1)

    @property
    def trained(self) -> bool:
        return self.encoder is not None

    @property
    def by(self) -> str:
        return TRAINED if self.trained else MODEL

    def __call__(self, samples: np.ndarray) -> float:
        """Likeness of `samples` (at engine.sample_rate) to the voice."""
        if self.encoder is not None:
            return _cosine(self.encoder.embed(samples, self.engine.sample_rate), self._ref)
        return _cosine(self.engine.speaker_embedding(samples, self.engine.sample_rate), self._ref)


def scored_by(engine, voice=None, *, encoder=None, reference=None) -> str:
    """What `Likeness` would score takes of `voice` with (TRAINED or MODEL), without embedding."""
    from engine_native.voice import clip_path

    encoder = encoder if encoder is not None else getattr(engine, "likeness_encoder", None)
    voice = voice if voice is not None else engine.builtin_voice
    known = reference is not None or clip_path(getattr(voice, "path", None)) is not None
    return TRAINED if encoder is not None and known else MODEL


def likeness(engine, samples: np.ndarray, voice=None, *, encoder=None, reference=None) -> float:
    """Likeness of `samples` (at engine.sample_rate) to the voice (see `Likeness`)."""
    return Likeness(engine, voice, encoder=encoder, reference=reference)(samples)


def verdict(score: float) -> str:
    """"same voice", "unsure" or "different voice" for a likeness score (see SAME_SPEAKER)."""
    if score >= SAME_SPEAKER:
        return "same voice"
    return "different voice" if score < DIFFERENT_SPEAKER else "unsure"


def describe(score: float) -> str:
    """A score as a person reads it: "0.87 (same voice)"."""
    return f"{score:.2f} ({verdict(score)})"


def plausible_seconds(text: str) -> tuple[float, float]:
    """(shortest, longest) plausible duration of a take of `text`."""
    expected = len(" ".join(text.split())) / CHARS_PER_SECOND
    return max(0.0, 0.4 * expected - 0.3), 2.5 * expected + 1.0


@dataclass
class Take:
    samples: np.ndarray
    seed: int
    score: float
    candidates: list = field(default_factory=list)   # [(seed, score, seconds, plausible)] in render order


def choose(candidates) -> int:
    """Index of the best (seed, score, seconds, plausible) candidate: the best plausible one,
    else the best of all."""
    pool = [i for i, c in enumerate(candidates) if c[3]] or list(range(len(candidates)))
    return max(pool, key=lambda i: candidates[i][1])


def best_take(engine, text: str, voice=None, *, seeds, options: dict | None = None,
              stream_options: dict | None = None, cancel=None, scorer=None) -> Take | None:
    """Render `text` once per seed (as Engine.stream renders it) and keep the best take.
    `scorer(audio) -> float` replaces the likeness (default: `Likeness` to `voice`, with the
    engine's likeness_encoder where it has one). None when cancelled."""
    lo, hi = plausible_seconds(text)
    if scorer is None:
        scorer = Likeness(engine, voice)
    takes, candidates = [], []
    for s in seeds:
        chunks = []
        it = engine.stream(text, voice, seed=s, **(stream_options or {}), **(options or {}))
        try:
            for c in it:
                if cancel is not None and cancel.is_set():
                    return None
                chunks.append(c.samples)
        finally:
            it.close()
        audio = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
        secs = audio.size / engine.sample_rate
        score = scorer(audio) if audio.size else -1.0
        takes.append(audio)
        candidates.append((int(s), score, secs, lo <= secs <= hi))
    best = choose(candidates)
    return Take(takes[best], candidates[best][0], candidates[best][1], candidates)
