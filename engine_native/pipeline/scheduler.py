"""The scheduler: a request's sentences through the stages, as `Chunk`s.

Per sentence (its seed: the take's seed + the sentence's index, so regenerating one
sentence reproduces it): a T3 session samples speech tokens; an early stop (too few speech
tokens for the text) is sampled again with another seed while nothing has played; S3Gen
renders the tokens into mel frames and the vocoder stream turns the frames not yet played
into samples; the sentence's first samples get S3Gen's trim fade; where the request marks
its audio, the sentence's marker (watermark_stream) marks them, holding a streamed chunk's
last few milliseconds back for the next one.

One loop serves both ways of cutting a sentence (`ChunkPlan`): whole (`Engine.synthesize`:
all the tokens, then one S3Gen pass over the whole voice prompt, the reference's; of three
early stops the longest is kept) and streamed (`Engine.stream`: a first chunk of
`first_tokens`, then ever larger ones; each pass over a bounded window of the tokens, the
voice prompt a cached prefix where the flow allows it, `S3GenFlow.prefix_usable`). What a
streamed sentence still differs in from the whole one is the CFM's view of tokens not yet
sampled and of tokens before its window (its attention is bidirectional), which tests bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from engine_native.errors import Cancelled
from engine_native.options import derived_seed
from engine_native.pipeline.profile import StageTimes
from engine_native.pipeline.t3_session import TokenWorker
from engine_native.pipeline.vocoder_stream import HIFT_CONTEXT

# A streamed chunk's S3Gen pass (encoder and CFM attend both ways over the whole input)
# sees the voice prompt, this many speech tokens before the frames it adds, and the new
# tokens: each chunk then costs the same however long the sentence grows (-1: the whole
# prefix, every chunk; the cost grows with the square of the sentence).
STREAM_CONTEXT_TOKENS = 50
# A chunk after the first takes max(chunk_tokens, this x the sentence's tokens so far): a long
# sentence takes a few passes (each pays for the voice prompt, which dominates a pass) instead
# of one per chunk_tokens; first audio unchanged (docs/CPU.md has the measurements).
CHUNK_GROWTH = 1.0
# T3 runs of a sentence that stops early, at most; each retry's seed is this stride further.
MAX_ATTEMPTS = 3
RETRY_SEED_STRIDE = 1_000_003


@dataclass
class Chunk:
    samples: np.ndarray          # float32, mono
    sample_rate: int
    index: int                   # 0, 1, ... over the whole stream
    is_last: bool
    text: str                    # the sentence this audio belongs to
    span: tuple[int, int]        # that sentence's character span in the input text
    sentence_index: int
    n_sentences: int
    stages: StageTimes = field(default_factory=StageTimes)  # what it cost, stage by stage
    watermarked: bool = False    # carries the Perth watermark (Engine(watermark=True), the default)

    @property
    def timings(self) -> dict:
        """`stages` as a dict (t3_ms, s3gen_ms, hift_ms, attempts, speech_tokens, audio_s, seed, ...)."""
        return self.stages.as_dict()


@dataclass(frozen=True)
class ChunkPlan:
    """How a sentence is cut: whole (first_tokens None), or a first chunk of first_tokens
    speech tokens and then max(chunk_tokens, CHUNK_GROWTH x the tokens so far) each."""
    first_tokens: int | None = None
    chunk_tokens: int = 0

    @property
    def whole(self) -> bool:
        return self.first_tokens is None

    def want(self, n_so_far: int, started: bool, max_tokens: int) -> int:
        if self.whole:
            return max_tokens
        if not (started or n_so_far):
            return self.first_tokens
        return max(self.chunk_tokens, int(CHUNK_GROWTH * n_so_far))


def chunks(stages, text: str, voice, seed: int, p: dict, plan: ChunkPlan, cancel, watermark: bool = False):
    """The request's Chunks, sentence after sentence, each sentence watermarked when
    `watermark`; ends quietly once `cancel` is set."""
    sentences = stages.text.sentences(text, cancel, p["language"])
    if sentences is None:
        return
    index = 0
    for si, sentence in enumerate(sentences):
        ids = stages.text.ids(sentence.text, p["language"])
        for wav, final, times, marked in sentence_chunks(stages, ids, voice, derived_seed(seed, si), p, plan, cancel, watermark):
            if cancel.is_set():
                return
            yield Chunk(samples=wav, sample_rate=stages.config.sample_rate, index=index,
                        is_last=final and si == len(sentences) - 1, text=sentence.text,
                        span=(sentence.start, sentence.end), sentence_index=si, n_sentences=len(sentences),
                        stages=times, watermarked=marked)
            index += 1
        if cancel.is_set():  # cancelled inside the sentence's computation: no later sentence
            return


def sentence_chunks(stages, ids, voice, seed: int, p: dict, plan: ChunkPlan, cancel, watermark: bool = False):
    """One sentence's (samples, final, StageTimes, watermarked), cut as `plan` says. From a
    streamed sentence's first chunk on, a TokenWorker samples the next tokens while the
    passes run (where T3 samples beside S3Gen)."""
    t3, flow, ratio = stages.t3, stages.flow, stages.config.token_mel_ratio
    times = StageTimes(seed=seed)
    attempt = 0
    session = t3.open_cancellable(ids, voice, seed, p, cancel, times)
    if session is None:
        return
    vocoder = stages.vocoder.stream(seed)  # its noise is drawn while T3 samples
    marker = stages.marking.sentence() if watermark else None
    worker = None
    best = None           # whole: the longest of the attempts
    tokens: list[int] = []
    started = False
    try:
        while True:
            if cancel.is_set():
                return
            want = plan.want(len(tokens), started, p["max_tokens"])
            if worker is None:
                tokens = tokens + session.next(want, times)
                final = session.done
            else:
                t0 = time.perf_counter()
                tokens, final = worker.wait(len(tokens) + want, cancel)
                times.t3_steps_ms += (time.perf_counter() - t0) * 1e3
            if cancel.is_set():
                return
            if not started and final:
                if plan.whole and (best is None or len(tokens) > len(best)):
                    best = tokens
                if t3.early_stop(tokens, len(ids)) and attempt + 1 < MAX_ATTEMPTS:
                    # Nothing has played yet: an early stop is sampled again.
                    attempt += 1
                    session.close()
                    session = t3.open_cancellable(ids, voice, derived_seed(seed, attempt * RETRY_SEED_STRIDE), p, cancel, times)
                    if session is None:
                        return
                    tokens = []
                    continue
                if plan.whole:
                    tokens = best
            if final and worker is None:
                session.close()  # its KV cache goes back to the pool before the S3Gen pass
            speech = flow.speech_input(tokens, final)
            if final and not started:
                vocoder.expect(ratio * len(speech))  # one pass: all its noise drawn while S3Gen runs
            wav = s3gen_pass(stages, vocoder, speech, voice, seed, p, final=final, whole=plan.whole,
                             cancel=cancel, times=times)
            if wav is None:  # Stop during S3Gen / HiFT: the sentence ends quietly
                return
            if wav.size == 0 and not final:
                continue  # nothing new to play yet: this pass's cost goes to the next chunk
            if not started:
                wav = stages.vocoder.fade_in(wav)
                started = True  # audio exists: an early stop is no longer sampled again
            if marker is not None:
                if cancel.is_set():
                    return
                with stages.s3gen_turn(cancel) as threads:
                    wav = marker.push(wav, final, threads, times)
            if worker is None and not final and t3.beside_s3gen and not session.batched:
                worker = TokenWorker(t3, session, tokens)  # samples on while this chunk plays
            if wav.size == 0 and not final:
                continue  # all held back by the watermark: it comes with the next chunk
            times.attempts, times.speech_tokens = attempt + 1, len(tokens)
            times.audio_s = wav.size / stages.config.sample_rate
            yield wav, final, times, marker is not None and marker.marked
            if final:
                return
            times = StageTimes(seed=seed)
    finally:
        if worker is not None:
            worker.stop()
        session.close()


def s3gen_pass(stages, vocoder, speech: list[int], voice, seed: int, p: dict, *, final: bool, whole: bool,
               cancel, times) -> np.ndarray | None:
    """One S3Gen pass over `speech` (the tokens so far) and the vocoder's new samples; None
    when `cancel` stopped it. Whole: over every token and the whole voice prompt, the
    reference's pass. Streamed: over a window from STREAM_CONTEXT_TOKENS before the vocoder's
    own context, the voice prompt a cached prefix where the flow allows it."""
    flow, ratio = stages.flow, stages.config.token_mel_ratio
    if whole or STREAM_CONTEXT_TOKENS < 0:
        start = 0
    else:
        start = max(0, (vocoder.emitted - HIFT_CONTEXT) // ratio - STREAM_CONTEXT_TOKENS)
    with stages.s3gen_turn(cancel):
        try:
            if whole:
                # A batch pass is S3Gen's largest (its compute buffers): no stream prefix is
                # held beside it (the app streams; its voice is readied again when chosen).
                flow.release_prefixes()
            mel = flow.mel(speech, voice, seed, final=final, cfm_steps=p["cfm_steps"],
                           prompt_seconds=p["prompt_seconds"], start=start,
                           cached_prompt=not whole and flow.prefix_usable(p["cfm_steps"]), times=times)
            return vocoder.push(mel, final, ratio * start, times)
        except Cancelled:
            if cancel.is_set():
                return None
            raise


def sentence_tokens(stages, text: str, voice, seed: int, p: dict, cancel) -> list[list[int]]:
    """T3's speech tokens for each sentence, as a whole synthesis samples them at its first
    attempt (the stop token and T3's other specials kept)."""
    out = []
    for si, sentence in enumerate(stages.text.sentences(text, cancel, p["language"])):
        session = stages.t3.open(stages.text.ids(sentence.text, p["language"]), voice, derived_seed(seed, si), p, cancel)
        try:
            out.append(list(session.next(p["max_tokens"])))
        finally:
            session.close()
    return out


def prepare(stages, voice, p: dict, cancel, t3: bool = True):
    """Readies the voice for these options (a generator that yields nothing: the Stream of
    `Engine.prepare_stream`): with `t3`, T3's conditioning prefix (a sentence's session then
    computes only its text), then the cached stream prefix where streams use one."""
    if t3 and not cancel.is_set():
        stages.t3.prepare(stages.text.ids(".", p.get("language")), voice, p, cancel)
    if stages.flow.prefix_usable(p["cfm_steps"]) and not cancel.is_set():
        with stages.s3gen_turn(cancel):
            try:
                stages.flow.prepare(voice, p["cfm_steps"], p["prompt_seconds"])
            except Cancelled:
                if not cancel.is_set():
                    raise
    yield from ()
