"""Likeness: how close a take sounds to its voice, and best-of-N takes.

The score is the cosine similarity between the engine's VoiceEncoder embedding of the
synthesised audio (made as `voice_from_audio` makes a voice's `speaker_emb`: 24 kHz,
loudness to -27 LUFS, resampled to 16 kHz; `Engine.speaker_embedding`) and the voice's own
`speaker_emb` (the model's built-in voice when none is given). Both are L2-normalised, so
the score is in [-1, 1]; 1 is the same speaker as far as T3's speaker encoder can tell.

A person reads it through `verdict` / `describe`: "same voice" at SAME_SPEAKER (0.80) and
above, "different voice" under DIFFERENT_SPEAKER (0.70), "unsure" between. The thresholds
are measured with the trained GE2E encoder (Resemblyzer's weights in this VoiceEncoder,
engine_native.speaker_encoder) on real recordings of 12 speakers (benchmarks/bench_speakers.py):
same-speaker pairs of clips median 0.90 (5th percentile 0.73), different speakers median
0.49 (95th percentile 0.69, the closest pair 0.83: two women of one conversation); 86 % of
same-speaker pairs read "same voice" and 0.3 % of different ones, 97 % of different-speaker
pairs "different voice" and 2 % of same ones. A trained Chatterbox model's own
VoiceEncoder has this architecture and recipe but other weights: its scale is assumed, not
measured, to match. Random-weight test models read ~1.0 for everything.

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


def likeness(engine, samples: np.ndarray, voice=None) -> float:
    """Cosine between the speaker embedding of `samples` (at engine.sample_rate) and the voice's."""
    ref = np.asarray((voice if voice is not None else engine.builtin_voice).speaker_emb, np.float32).reshape(-1)
    emb = engine.speaker_embedding(samples, engine.sample_rate)
    denom = float(np.linalg.norm(emb) * np.linalg.norm(ref))
    return float(np.dot(emb, ref) / denom) if denom > 0 else 0.0


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
    `scorer(audio) -> float` replaces the likeness (default: likeness to `voice`). None
    when cancelled."""
    lo, hi = plausible_seconds(text)
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
        score = (scorer(audio) if scorer is not None else likeness(engine, audio, voice)) if audio.size else -1.0
        takes.append(audio)
        candidates.append((int(s), score, secs, lo <= secs <= hi))
    best = choose(candidates)
    return Take(takes[best], candidates[best][0], candidates[best][1], candidates)
