"""What each stage cost: the timing record every `Chunk` carries, and hooks told when a
stage starts and ends.

The stages time themselves (`Profiler.stage`): the T3 prompt (`t3_prompt`: the voice,
text and start-of-speech prefill), T3's sampling steps (`t3_steps`), an S3Gen pass
(`s3gen`: the encoder and the CFM with its noise, the voice prompt sliced and its cached
prefix made where a stream needs one) and within it `encoder` and `cfm`, and HiFT
(`hift`: f0, the excitation and the decode of the frames a chunk adds), the Perth
watermark on what a chunk brings (`watermark`), and a re-voiced source's S3Tokenizer
(`tokenize`: a segment's speech tokens, counted in its first chunk). Each adds its wall
time to the chunk's `StageTimes` and tells every hook registered with `Engine.profile`:

    events = []
    with engine.profile(events.append):
        engine.synthesize("Hello.")
    # [StageEvent(stage='t3_prompt', phase='start', ...), StageEvent('t3_prompt', 'end', ms=..,
    #  outcome='finished'), ...]

A hook runs on the computing thread with the engine's locks held: it must return quickly
and must not call the engine. An `end` event's outcome says whether the stage finished,
was cut short by `Stream.cancel()` ("cancelled") or raised ("failed").
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass

from engine_native.errors import Cancelled

STAGES = ("t3_prompt", "t3_steps", "s3gen", "encoder", "cfm", "hift", "watermark", "tokenize")


@dataclass(frozen=True)
class StageEvent:
    stage: str            # one of STAGES
    phase: str            # "start" or "end"
    ms: float = 0.0       # end: the stage's wall time
    outcome: str = ""     # end: "finished", "cancelled" or "failed"


@dataclass
class StageTimes:
    """One chunk's cost by stage (ms) and what it holds. A whole synthesis's sentence counts
    every attempt's T3 work; a streamed chunk counts what it waited for."""
    seed: int = 0              # the sentence's seed (a take's seed + the sentence's index)
    attempts: int = 1          # T3 runs of the sentence (an early stop is sampled again)
    t3_prompt_ms: float = 0.0
    t3_steps_ms: float = 0.0
    t3_tokens: int = 0         # tokens this chunk took from T3
    s3gen_ms: float = 0.0      # the S3Gen pass: encoder + CFM and their glue
    encoder_ms: float = 0.0
    cfm_ms: float = 0.0
    hift_ms: float = 0.0
    watermark_ms: float = 0.0  # the Perth watermark (pipeline.watermark_stream)
    tokenize_ms: float = 0.0   # re-voicing: the S3Tokenizer over a segment of the source
    speech_tokens: int = 0     # the sentence's T3 tokens so far (specials included)
    audio_s: float = 0.0       # this chunk's audio

    @property
    def t3_ms(self) -> float:
        return self.t3_prompt_ms + self.t3_steps_ms

    def add(self, stage: str, ms: float) -> None:
        setattr(self, f"{stage}_ms", getattr(self, f"{stage}_ms") + ms)

    def as_dict(self) -> dict:
        """Every field, and t3_ms: the `Chunk.timings` the app and the server read."""
        return {**asdict(self), "t3_ms": self.t3_ms}


class Profiler:
    """Times the stages into a StageTimes and tells the registered hooks."""

    def __init__(self):
        self._hooks: tuple = ()
        self._lock = threading.Lock()

    @contextmanager
    def hooked(self, hook):
        """`hook(StageEvent)` is called for every stage start and end while inside."""
        with self._lock:
            self._hooks += (hook,)
        try:
            yield hook
        finally:
            with self._lock:
                hooks = list(self._hooks)
                hooks.remove(hook)
                self._hooks = tuple(hooks)

    @contextmanager
    def stage(self, name: str, times: StageTimes | None = None):
        hooks = self._hooks
        for hook in hooks:
            hook(StageEvent(name, "start"))
        outcome = "failed"
        t0 = time.perf_counter()
        try:
            yield
            outcome = "finished"
        except Cancelled:
            outcome = "cancelled"
            raise
        finally:
            ms = (time.perf_counter() - t0) * 1e3
            if times is not None:
                times.add(name, ms)
            for hook in hooks:
                hook(StageEvent(name, "end", ms, outcome))
