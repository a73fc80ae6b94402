"""One speaker per voice: who speaks where in a recording.

The caller passes the embedding function (`embed(samples, rate) -> vector`: a trained
speaker encoder, `engine_native.speaker_encoder.SpeakerEncoder`, where there is one, else
the model's; see `lab` and the app), so the Voice Lab never imports the engine.

Method (the thresholds are measured on real recordings with the trained GE2E encoder:
benchmarks/bench_speakers.py):
1. Windows: each speech region of at least MIN_REGION_SECONDS is covered by windows of
   WINDOW_SECONDS every HOP_SECONDS (the last one ending at the region's end; a shorter
   region is one window). People take turns without pausing, so a speech region may hold
   both; the windows follow the turns at HOP_SECONDS resolution. Each window is embedded
   and L2-normalised.
2. Speakers: 2-means (cosine, started from the two most distant windows, 20 iterations),
   at most MAX_SPEAKERS (an interview, a podcast, a phone call; a third voice joins the
   nearer of the two, and a second split of one voice is what the ratio rule below gets
   wrong on a trained encoder, its windows overlapping). A split is kept
   when each side has at least MIN_WINDOWS windows and MIN_SPEAKER_SECONDS of speech and
   either the centroids' cosine is at most MAX_CENTROID_COSINE or the separation ratio -
   the distance between the two centroids over the mean distance of windows to their own
   centroid - is at least MIN_SEPARATION. The cosine rule is on the trained GE2E encoder's
   scale, 2 s windows (benchmarks/bench_speakers.py): a split of one person's speech leaves
   centroids 0.818-0.995 apart (13 recordings, clean and noisy radio); two people 0.60-0.82
   (a man and a woman 0.60-0.71; two women 0.78-0.82, and 0.89 for the two women of the
   pyannote conversation, who stay one speaker). The threshold sits just under the closest
   split of one person measured; where the two overlap a needless split is the lesser harm
   (the window still holds one voice, from part of the speech), a missed one is not. The ratio is
   scale-free: it still splits when every cosine is squeezed near 1, as with the
   random-weight test models, and stays under 2 on a trained encoder's split of one
   person's speech with enough windows.
3. Cells: each region is cut into HOP_SECONDS cells; a cell belongs to the speaker most of
   the windows over it belong to, and is *sure* when all of them agree. A speaker's spans
   (`spans_of`, what the clone window is taken from) are their sure cells, merged: the
   uncertain cells where a turn changes are left out, so a clone window never straddles a
   change of speaker.
4. Speakers are numbered by total speech (their cells), most first.
5. Clone spans: with two speakers found, a recording of more voices than MAX_SPEAKERS puts
   several people in one group. A speaker's clone spans (`clone_spans`, what the window is
   taken from) are their longest span and those of their other spans (of at least
   MIN_REGION_SECONDS) whose embedding's cosine to the longest one's is at least
   SAME_VOICE_COSINE - the likeness verdict's "same voice" (engine_native.likeness: 86 % of
   same-speaker pairs of real clips, 0.3 % of different ones). On codec2's compilation of
   eight talkers (wav/all.wav) this keeps each window to one talker; where it drops a span
   of the same person the window is only shorter.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from voice_lab.silence import Span

WINDOW_SECONDS = 2.0
HOP_SECONDS = 0.5
MIN_REGION_SECONDS = 1.0
MIN_SEPARATION = 2.0
#: ... or when the two centroids' cosine is at most this (a trained encoder's scale; see the module)
MAX_CENTROID_COSINE = 0.80
MIN_WINDOWS = 2
MIN_SPEAKER_SECONDS = 1.5
MAX_SPEAKERS = 2
#: a span joins a speaker's clone spans at this cosine to their longest span (see the module)
SAME_VOICE_COSINE = 0.80


@dataclass
class Cell:
    span: Span
    speaker: int
    sure: bool


@dataclass
class Speakers:
    segments: list[Span]                   # the embedded windows
    labels: list[int]                      # speaker of each window (0: the most speech)
    embeddings: np.ndarray                 # (n, d), L2-normalised
    separation: float | None = None        # the ratio of the first split (None: one window)
    seconds: list[float] = field(default_factory=list)
    cells: list[Cell] = field(default_factory=list)
    clone: list[list[Span]] | None = None  # each speaker's clone spans (None: all their spans)

    @property
    def count(self) -> int:
        return len(self.seconds)

    def spans_of(self, speaker: int) -> list[Span]:
        """Where `speaker` surely speaks (their sure cells, merged), in time order."""
        out: list[Span] = []
        for c in self.cells:
            if c.speaker != speaker or not c.sure:
                continue
            if out and abs(out[-1].end - c.span.start) < 1e-6:
                out[-1] = Span(out[-1].start, c.span.end)
            else:
                out.append(Span(c.span.start, c.span.end))
        return out

    def clone_spans(self, speaker: int) -> list[Span]:
        """The spans a clone window of `speaker` may be taken from: one voice (see the module)."""
        return self.spans_of(speaker) if self.clone is None else list(self.clone[speaker])

    def centroid(self, speaker: int) -> np.ndarray:
        c = self.embeddings[[i for i, lab in enumerate(self.labels) if lab == speaker]].mean(axis=0)
        return c / (np.linalg.norm(c) or 1.0)

    def to_dict(self) -> dict:
        return {"method": f"k-means on speaker embeddings of {WINDOW_SECONDS:g} s windows every {HOP_SECONDS:g} s, "
                          f"a split kept when the centroids' cosine <= {MAX_CENTROID_COSINE:g} or centroid distance / "
                          f"within-speaker spread >= {MIN_SEPARATION:g}",
                "count": self.count, "separation": None if self.separation is None else round(self.separation, 3),
                "speakers": [{"speaker": i + 1, "seconds": round(self.seconds[i], 3),
                              "spans": [s.to_list() for s in self.spans_of(i)],
                              "clone_spans": [s.to_list() for s in self.clone_spans(i)]} for i in range(self.count)]}


def windows(regions: list[Span], length: float = WINDOW_SECONDS, hop: float = HOP_SECONDS) -> list[Span]:
    """The windows over the regions (see the module)."""
    out = []
    for r in regions:
        if r.duration < MIN_REGION_SECONDS:
            continue
        if r.duration <= length:
            out.append(Span(r.start, r.end))
            continue
        n = int(np.ceil((r.duration - length) / hop - 1e-9)) + 1
        out += [Span(r.start + i * hop, r.start + i * hop + length) for i in range(n - 1)]
        out.append(Span(r.end - length, r.end))
    return out


def cells_of(regions: list[Span], wins: list[Span], labels: list[int], hop: float = HOP_SECONDS) -> list[Cell]:
    """Each embedded region cut into cells of about `hop` seconds, labelled by the windows over them."""
    out = []
    for r in regions:
        if r.duration < MIN_REGION_SECONDS:
            continue
        n = max(1, int(round(r.duration / hop)))
        for k in range(n):
            cell = Span(r.start + k * r.duration / n, r.start + (k + 1) * r.duration / n)
            mid = (cell.start + cell.end) / 2
            over = [labels[i] for i, w in enumerate(wins) if w.start <= mid <= w.end]
            if not over:
                continue
            votes = np.bincount(over)
            out.append(Cell(cell, int(np.argmax(votes)), int(votes.max()) == len(over)))
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
    wins = windows(regions)
    if not wins:
        return Speakers([], [], np.zeros((0, 0), np.float32))
    emb = _normalise(np.stack([np.asarray(embed(mono[int(w.start * rate):int(w.end * rate)], rate),
                                          np.float32).reshape(-1) for w in wins]))
    # the speech each window stands for: its share of the cells (a hop), a short region all of it
    share = np.array([min(w.duration, HOP_SECONDS) for w in wins])
    groups = [np.arange(len(wins))]
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
            apart = ratio >= MIN_SEPARATION or (
                len(a) and len(b) and float(np.prod(_normalise(np.stack([emb[a].mean(0), emb[b].mean(0)])), axis=0).sum())
                <= MAX_CENTROID_COSINE)
            if apart and min(len(a), len(b)) >= MIN_WINDOWS \
                    and min(share[a].sum(), share[b].sum()) >= MIN_SPEAKER_SECONDS:
                groups[gi:gi + 1] = [a, b]
                changed = True
                break
    labels = np.zeros(len(wins), int)
    for k, g in enumerate(groups):
        labels[g] = k
    cells = cells_of(regions, wins, labels.tolist())
    seconds = np.zeros(len(groups))
    for c in cells:
        seconds[c.speaker] += c.span.duration
    order = np.argsort(-seconds, kind="stable")
    rank = np.empty(len(groups), int)
    rank[order] = np.arange(len(groups))
    for c in cells:
        c.speaker = int(rank[c.speaker])
    found = Speakers(wins, rank[labels].tolist(), emb, first_ratio, [float(seconds[k]) for k in order], cells)
    if found.count > 1:
        found.clone = [one_voice_spans(found.spans_of(k), mono, rate, embed) for k in range(found.count)]
    return found


def one_voice_spans(spans: list[Span], mono: np.ndarray, rate: int, embed) -> list[Span]:
    """The longest span and the spans alike to it (SAME_VOICE_COSINE), in time order."""
    if len(spans) < 2:
        return list(spans)

    def voice(s: Span) -> np.ndarray:
        e = np.asarray(embed(mono[int(s.start * rate):int(s.end * rate)], rate), np.float64).reshape(-1)
        return e / (np.linalg.norm(e) or 1.0)

    longest = max(spans, key=lambda s: s.duration)
    ref = voice(longest)
    return [s for s in spans if s is longest
            or (s.duration >= MIN_REGION_SECONDS and float(voice(s) @ ref) >= SAME_VOICE_COSINE)]
