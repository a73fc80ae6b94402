"""HiFT as a stream: mel frames -> 24 kHz samples, each frame vocoded once.

A sentence's excitation is one continuous, seeded signal (its noise drawn ahead on a native
thread, `expect`), so a stream's pieces join exactly; the vocoder gets HIFT_CONTEXT mel
frames of left context and holds HIFT_HOLDBACK frames back for the next chunk, so the seams
carry no clicks. A whole sentence is the same object given every frame at once.
"""

from __future__ import annotations

import numpy as np

from engine_native.errors import EngineError

# HiFT's receptive field is about 12 mel frames each way (docs/CPU.md: with 12 frames of
# context a cut decodes to within 5e-8 of the whole); the excitation is cached exactly, so
# 12 frames of left context make a seam inaudible. Holding back 4 frames (80 ms) of right
# context keeps the last emitted frame within ~2 % of its final value while adding little
# latency.
HIFT_CONTEXT = 12
HIFT_HOLDBACK = 4


class Vocoder:
    """The model's HiFT (`hift`), the sentences' vocoder streams and S3Gen's trim fade."""

    def __init__(self, hift, trim_fade_samples: int, lock, profiler):
        self.hift = hift                    # _core.HiFT
        self._trim, self._lock, self._profiler = trim_fade_samples, lock, profiler

    def stream(self, seed: int) -> VocoderStream:
        """A sentence's vocoder: its excitation's noise starts being drawn now."""
        return VocoderStream(self, seed)

    def fade_in(self, wav: np.ndarray) -> np.ndarray:
        """S3Gen's trim fade on a sentence's first samples: `trim` samples of silence, then a
        raised-cosine fade-in."""
        ramp = ((np.cos(np.linspace(np.pi, 0, self._trim)) + 1) / 2).astype(np.float32)
        fade = np.concatenate([np.zeros(self._trim, np.float32), ramp])[: wav.size]
        wav = wav.copy()
        wav[: fade.size] *= fade
        return wav


class VocoderStream:
    """HiFT over a growing mel: emits each frame once, with exact excitation continuity."""

    def __init__(self, vocoder: Vocoder, seed: int):
        self._vocoder = vocoder
        self.hift = vocoder.hift
        self.state = self.hift.source_state(seed)
        self.spf = self.hift.samples_per_frame
        self.emitted = 0                                   # frames already turned into audio
        self.source_tail = np.zeros(0, np.float32)         # excitation of the last context frames

    def expect(self, frames: int) -> None:
        """Have the excitation's noise for the next `frames` frames drawn ahead (while S3Gen runs)."""
        self.hift.source_expect(self.state, frames)

    def push(self, mel: np.ndarray, final: bool, offset: int = 0, times=None) -> np.ndarray:
        """mel: [n_mels, frames] for the speech frames from `offset` on (every frame so far when 0;
        a window must start at least HIFT_CONTEXT frames before the first frame not yet
        emitted). Returns the new samples; `times`: a StageTimes the vocoder adds to."""
        M = offset + mel.shape[1]
        end = M if final else M - HIFT_HOLDBACK
        if end <= self.emitted:
            return np.zeros(0, np.float32)
        start = max(0, self.emitted - HIFT_CONTEXT)
        if offset > start:
            raise EngineError(f"internal: a mel window from frame {offset} lacks the vocoder's context from {start}")
        with self._vocoder._lock, self._vocoder._profiler.stage("hift", times):
            mel = np.ascontiguousarray(mel[:, start - offset:])
            f0 = self.hift.f0(mel)
            new = self.hift.excitation_continue(f0[self.emitted - start:end - start], self.state)
            ahead = self.hift.excitation_continue(f0[end - start:], self.state.copy()) if end < M else new[:0]
            context = self.source_tail[len(self.source_tail) - (self.emitted - start) * self.spf:]
            wav = self.hift.decode(mel, np.concatenate([context, new, ahead]))
            out = wav[(self.emitted - start) * self.spf:(end - start) * self.spf]
            self.source_tail = np.concatenate([context, new])[-HIFT_CONTEXT * self.spf:]
            self.emitted = end
        return out
