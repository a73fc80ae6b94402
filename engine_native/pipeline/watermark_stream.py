"""The last step of the data path: Resemble AI's Perth watermark on every sentence the engine
speaks (engine_native.watermark), as the official chatterbox-tts marks the output of every
generate() call. A sentence here is what one generate() call makes there (the reference does
not split text; the engine speaks it sentence by sentence, each with its own T3 run), so each
sentence is marked as one clip: whole in `Engine.synthesize` (exactly apply_watermark on it),
piece by piece in `Engine.stream` (a StreamMarker: each chunk comes out a little shorter, the
held-back samples with the next one; the joined sentence is as long as the unmarked one).

On by default (`Engine(watermark=True)`); the watermarker (perth.gguf, found by
`watermark.find_model`) is loaded with the engine, so a missing model is a ModelError at load
that names the command making it.
"""

from __future__ import annotations

import threading

import numpy as np

from engine_native.watermark import StreamMarker, Watermarker, find_model


class Marking:
    """`stages.marking`: the watermarker the scheduler marks sentences with, loaded on demand
    and shared by every engine of the process (it holds no state a call changes)."""

    _shared: dict[str, Watermarker] = {}
    _shared_lock = threading.Lock()

    def __init__(self, sample_rate: int, lock, profiler):
        self._rate, self._lock, self._profiler = sample_rate, lock, profiler
        self.watermarker: Watermarker | None = None

    def load(self) -> Watermarker:
        """The watermarker (ModelError, naming the command that makes it, when there is none)."""
        if self.watermarker is None:
            path = str(find_model())
            with Marking._shared_lock:
                wm = Marking._shared.get(path)
                if wm is None:
                    wm = Marking._shared[path] = Watermarker(path)
            self.watermarker = wm
        return self.watermarker

    def sentence(self) -> SentenceMarker:
        """A marker for one sentence (its chunks pushed in order, the last with final=True)."""
        return SentenceMarker(self, self.load().stream(self._rate))


class SentenceMarker:
    """One sentence's StreamMarker, run on the model's lock (it takes the cores S3Gen and HiFT
    use, in the same arrival order) and timed as the `watermark` stage."""

    def __init__(self, marking: Marking, marker: StreamMarker):
        self._marking, self._marker = marking, marker

    @property
    def marked(self) -> bool:
        """False when the sentence was too short for the watermarker (it came back unmarked)."""
        return self._marker.marked

    def push(self, samples: np.ndarray, final: bool, threads: int, times=None) -> np.ndarray:
        with self._marking._profiler.stage("watermark", times):
            return self._marker.push(samples, final, threads=threads)
