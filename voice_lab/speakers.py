"""One speaker per voice: who speaks where in a recording.

The caller passes the embedding function (`embed(samples, rate) -> vector`; the app and
`lab` pass the engine's speaker-verification encoder, `Engine.speaker_xvector`), so the Voice Lab
never imports the engine.

Method:
1. Segments: each speech region is cut into segments of SEGMENT_SECONDS (1.5-3 s: a
   region of length L gets round(L / 2 s) equal segments; a region under 1 s is skipped,
   too short for a stable embedding). Each segment is embedded and L2-normalised.
2. Two speakers or one: 2-means (cosine, k-means++-style start from the two most distant
   segments, 20 iterations) on the segment embeddings. The split is kept when its
   separation ratio - the distance between the two centroids divided by the mean distance
   of segments to their own centroid (within-cluster spread) - is at least
   MIN_SEPARATION, and each side has at least two segments and 1.5 s of speech. The ratio is
   scale-free: random-weight test models give embeddings that are all very close to each
   other (cosines of 0.99), so a fixed cosine threshold would never split; two real voices
   still give centroids far apart relative to the scatter inside each voice.
   At most two speakers are told apart (an interview, a podcast, a phone call); a third
   voice joins the nearer of the two.
3. Speakers are numbered by total speech, most first; `spans_of(i)` are speaker i's
   segments, merged where adjacent, for the clone window.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from voice_lab.silence import Span

SEGMENT_SECONDS = 2.0
MIN_SEGMENT_SECONDS = 1.0
MIN_SEPARATION = 2.0
MIN_SPEAKER_SECONDS = 1.5
MAX_SPEAKERS = 2


@dataclass
class Speakers:
    segments: list[Span]
    labels: list[int]                      # speaker of each segment (0: the most speech)
    embeddings: np.ndarray                 # (n, d), L2-normalised
    separation: float | None = None        # the ratio of the first split (None: one segment)
    seconds: list[float] = field(default_factory=list)

    @property
    def count(self) -> int:
        return len(self.seconds)

    def spans_of(self, speaker: int) -> list[Span]:
        out: list[Span] = []
        for s, lab in zip(self.segments, self.labels):
            if lab != speaker:
                continue
            if out and abs(out[-1].end - s.start) < 1e-6:
                out[-1] = Span(out[-1].start, s.end)
            else:
                out.append(Span(s.start, s.end))
        return out

    def centroid(self, speaker: int) -> np.ndarray:
        c = self.embeddings[[i for i, lab in enumerate(self.labels) if lab == speaker]].mean(axis=0)
        return c / (np.linalg.norm(c) or 1.0)

    def to_dict(self) -> dict:
        return {"method": f"2-means on speaker embeddings of {SEGMENT_SECONDS:g} s segments, split kept when "
                          f"centroid distance / within-cluster spread >= {MIN_SEPARATION:g}",
                "count": self.count, "separation": None if self.separation is None else round(self.separation, 3),
                "speakers": [{"speaker": i + 1, "seconds": round(self.seconds[i], 3),
                              "spans": [s.to_list() for s in self.spans_of(i)]} for i in range(self.count)]}


def segments(regions: list[Span], seconds: float = SEGMENT_SECONDS) -> list[Span]:
    out = []
    for r in regions:
        if r.duration < MIN_SEGMENT_SECONDS:
            continue
        n = max(1, round(r.duration / seconds))
        step = r.duration / n
        out += [Span(r.start + i * step, r.start + (i + 1) * step) for i in range(n)]
    return out


def _normalise(x: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(x, axis=1, keepdims=True)
    return x / np.where(n > 0, n, 1.0)


def two_means(x: np.ndarray, iterations: int = 20) -> tuple[np.ndarray, float]:
    """Labels (0/1) of a 2-means split of unit vectors `x`, and its separation ratio."""
    if len(x) < 2:
        return np.zeros(len(x), int), 0.0
    d = 1.0 - x @ x.T
    i, j = np.unravel_index(np.argmax(d), d.shape)
    c = np.stack([x[i], x[j]])
    labels = np.zeros(len(x), int)
    for _ in range(iterations):
        new = np.argmax(x @ c.T, axis=1)
        if (new == 0).all() or (new == 1).all():
            break
        labels = new
        c = _normalise(np.stack([x[labels == k].mean(axis=0) for k in (0, 1)]))
    if (labels == 0).all() or (labels == 1).all():
        return np.zeros(len(x), int), 0.0
    between = float(np.linalg.norm(c[0] - c[1]))
    within = float(np.mean(np.linalg.norm(x - c[labels], axis=1)))
    return labels, between / max(within, 1e-12)


def find_speakers(mono: np.ndarray, rate: int, regions: list[Span], embed) -> Speakers:
    """Who speaks where (see the module). `embed(samples, rate) -> vector`."""
    segs = segments(regions)
    if not segs:
        return Speakers([], [], np.zeros((0, 0), np.float32))
    emb = _normalise(np.stack([np.asarray(embed(mono[int(s.start * rate):int(s.end * rate)], rate),
                                          np.float32).reshape(-1) for s in segs]))
    durs = np.array([s.duration for s in segs])
    groups = [np.arange(len(segs))]
    first_ratio = None
    changed = True
    while changed and len(groups) < MAX_SPEAKERS:
        changed = False
        for gi, g in enumerate(groups):
            if len(g) < 2:
                continue
            lab, ratio = two_means(emb[g])
            if first_ratio is None:
                first_ratio = ratio
            a, b = g[lab == 0], g[lab == 1]
            if ratio >= MIN_SEPARATION and len(a) >= 2 and len(b) >= 2 and durs[a].sum() >= MIN_SPEAKER_SECONDS \
                    and durs[b].sum() >= MIN_SPEAKER_SECONDS:
                groups[gi:gi + 1] = [a, b]
                changed = True
                break
    groups.sort(key=lambda g: -durs[g].sum())
    labels = [0] * len(segs)
    for k, g in enumerate(groups):
        for i in g:
            labels[i] = k
    return Speakers(segs, labels, emb, first_ratio, [float(durs[g].sum()) for g in groups])
