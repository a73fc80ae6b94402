"""Re-voicing (speech-to-speech voice conversion): a recording -> the same words, timing and
intonation in another voice, the path of the reference's `ChatterboxVC.generate`:

    source -> 16 kHz (librosa.load's soxr_hq) -> S3Tokenizer's 25 Hz speech tokens
           -> S3Gen's flow (encoder, CFM) conditioned on the target voice's S3Gen prompt
           -> HiFT -> S3Gen's trim fade

No silence tokens are appended (T3's path appends them; the reference's VC does not). The
CFM is the model's own: meanflow for Turbo and Nano, the standard CFM with guidance for
Multilingual.

Long sources. The reference tokenizes the whole source and runs one S3Gen pass over all its
tokens, whose encoder and CFM attend over every frame (memory and time grow with the square
of the length). A source up to SEGMENT_SECONDS is converted exactly so. A longer one is cut
into segments of MIN_SEGMENT_SECONDS to SEGMENT_SECONDS at token boundaries (40 ms), each cut
in the quietest CUT_QUIET_TOKENS tokens of its range (the lowest mean level in dB, so a pause
between phrases wherever there is one), and every segment goes the reference's path on its
own (its own seed: the take's + its index; its own trim fade, which falls on that quiet
stretch). Memory is then bounded by one segment, whatever the source's length, and a stream's
first audio waits only for the first segment's tokens. A stream (not a whole conversion) of a
source longer than the sum of FIRST_SEGMENT_SECONDS cuts its first segment short, in the
quietest CUT_QUIET_TOKENS within those seconds of the start (the later segments as above): its
first audio then waits for a few seconds' tokens, not up to SEGMENT_SECONDS' worth. The output
keeps the source's timing: one token is 40 ms of source and 40 ms of output.

Loudness: the output is the reference's, unchanged (its level follows the target voice's
prompt; the speech tokens carry none of the source's level).
"""

from __future__ import annotations

import numpy as np

from engine_native.audio import resample_soxr, to_mono
from engine_native.errors import NoSpeechError, SilentAudioError, SourceError, SourceTooShortError
from engine_native.options import derived_seed
from engine_native.pipeline.cloning import _SAMPLE_RATE
from engine_native.pipeline.profile import StageTimes
from engine_native.pipeline.scheduler import Chunk, s3gen_pass
from engine_native.speech import check_speech

# The longest source converted in one pass (the reference's path exactly): the S3Tokenizer's
# window, so a segment is tokenized as the reference tokenizes a source of that length.
SEGMENT_SECONDS = 30
# A cut leaves at least this much on either side of it.
MIN_SEGMENT_SECONDS = 10
# A cut goes in the quietest run of this many tokens (200 ms) within its range.
CUT_QUIET_TOKENS = 5
# A stream's first segment ends between these seconds of the source (one longer than their
# sum, so that at least the lower bound follows the cut): the S3Tokenizer attends over a whole
# segment, so a stream's first audio waits for all of its first segment's tokens.
FIRST_SEGMENT_SECONDS = (3, 8)
# The shortest source: fewer tokens give S3Gen nothing to say.
MIN_SOURCE_TOKENS = 10


def source_16k(config, samples, sample_rate) -> np.ndarray:
    """The source checked and at the tokenizer's rate (mono float32): SourceError when it is
    not audio, SourceTooShortError when too short to tokenize, NoSpeechError without speech."""
    sr = _SAMPLE_RATE.check(sample_rate)
    try:
        mono = to_mono(samples)
    except ValueError as e:
        raise SourceError(f"the source is not usable audio: {e}") from None
    if mono.size == 0:
        raise SourceError("the source is empty: there is no audio to re-voice")
    if not np.all(np.isfinite(mono)):
        raise SourceError("the source holds invalid samples (NaN or infinity)")
    shortest = MIN_SOURCE_TOKENS / config.token_rate
    if mono.size / sr < shortest:
        raise SourceTooShortError(f"the source is {mono.size / sr:.2f} s long: too short to tokenize "
                                  f"(re-voicing needs at least {shortest:.2f} s)")
    try:
        check_speech(mono, sr, 0.0)
    except SilentAudioError as e:
        raise NoSpeechError(f"no speech in the source: {str(e).removeprefix('no speech found: ')}") from None
    return resample_soxr(mono, sr, config.tokenizer_rate)


def segments(wav16: np.ndarray, config, first_short: bool = False) -> list[tuple[int, int]]:
    """[start, end) sample ranges of the 16 kHz source: one when it is at most SEGMENT_SECONDS,
    else cut at token boundaries as the module says; `first_short` (a stream): the first segment
    cut within FIRST_SEGMENT_SECONDS where the source is longer than their sum."""
    hop, rate = config.tokenizer_rate // config.token_rate, config.token_rate
    n = wav16.size
    n_tokens = -(-n // hop)
    first_lo, first_hi = (int(round(s * rate)) for s in FIRST_SEGMENT_SECONDS)
    first_short = first_short and n_tokens > first_lo + first_hi
    if n <= SEGMENT_SECONDS * config.tokenizer_rate and not first_short:
        return [(0, n)]
    frames = np.pad(wav16.astype(np.float64), (0, n_tokens * hop - n)).reshape(n_tokens, hop)
    level = 10 * np.log10(np.mean(frames ** 2, axis=1) + 1e-12)
    # quiet[k]: the mean level of the CUT_QUIET_TOKENS tokens around boundary k
    half = CUT_QUIET_TOKENS // 2
    quiet = np.convolve(np.pad(level, (half, CUT_QUIET_TOKENS - 1 - half), mode="edge"),
                        np.ones(CUT_QUIET_TOKENS) / CUT_QUIET_TOKENS, mode="valid")

    def quietest(lo: int, hi: int) -> int:
        return lo + int(np.argmin(quiet[lo:hi + 1]))

    out, start = [], 0
    if first_short:
        start = quietest(first_lo, first_hi)
        out.append((0, start * hop))
    longest, shortest = SEGMENT_SECONDS * rate, MIN_SEGMENT_SECONDS * rate
    while n_tokens - start > longest:
        cut = quietest(start + shortest, min(start + longest, n_tokens - shortest))
        out.append((start * hop, cut * hop))
        start = cut
    out.append((start * hop, n))
    return out


def tokenize(stages, wav16: np.ndarray, cancel, times: StageTimes | None = None) -> np.ndarray | None:
    """S3Tokenizer's speech tokens of 16 kHz audio (the reference's `s3gen.tokenizer`), its
    time the stage `tokenize` (added to `times`); None when cancelled."""
    with stages.s3gen_turn(cancel):
        if cancel.is_set():
            return None
        with stages.profiler.stage("tokenize", times):
            encoder = stages.cloner.encoders()["s3tok"]
            return np.asarray(encoder.tokens(np.ascontiguousarray(wav16, np.float32)), np.int32)


def segment_chunks(stages, tokens: np.ndarray, voice, seed: int, p: dict, plan, cancel, watermark: bool = False,
                   times: StageTimes | None = None):
    """One segment's (samples, final, StageTimes, watermarked): S3Gen and HiFT over its tokens,
    whole (one pass, the reference's) or streamed as `plan` cuts it (scheduler.s3gen_pass's
    windows); marked as a sentence is (ChatterboxVC marks its whole output) when `watermark`.
    `times`: what the segment cost before its passes (its tokenizing), the first chunk's."""
    ratio, total = stages.config.token_mel_ratio, int(tokens.size)
    speech = tokens.tolist()
    vocoder = stages.vocoder.stream(seed)
    marker = stages.marking.sentence() if watermark else None
    n, started = 0, False
    times = StageTimes(seed=seed) if times is None else times
    while True:
        n = min(total, n + plan.want(n, started, total))
        final = n == total
        if final and not started:
            vocoder.expect(ratio * total)
        wav = s3gen_pass(stages, vocoder, speech[:n], voice, seed, p, final=final, whole=plan.whole,
                         cancel=cancel, times=times)
        if wav is None:
            return
        if wav.size == 0 and not final:
            continue
        if not started:
            wav = stages.vocoder.fade_in(wav)
            started = True
        if marker is not None:
            if cancel.is_set():
                return
            with stages.s3gen_turn(cancel) as threads:
                wav = marker.push(wav, final, threads, times)
            if wav.size == 0 and not final:
                continue  # held back by the watermark: it comes with the next chunk
        times.attempts, times.speech_tokens = 1, n
        times.audio_s = wav.size / stages.config.sample_rate
        yield wav, final, times, marker is not None and marker.marked
        if final:
            return
        times = StageTimes(seed=seed)  # the next chunk's (a pass with nothing to play yet adds to it)


def chunks(stages, wav16: np.ndarray, voice, seed: int, p: dict, plan, cancel, watermark: bool = False,
           cuts: list[tuple[int, int]] | None = None):
    """The re-voiced source as Chunks (text "", the segment as the sentence: sentence_index,
    n_sentences; span: the segment's [start, end) in 16 kHz source samples); ends quietly once
    `cancel` is set. `cuts`: the segments (default: `segments`, the first cut short when `plan`
    streams)."""
    if cuts is None:
        cuts = segments(wav16, stages.config, first_short=not plan.whole)
    index = 0
    for si, (a, b) in enumerate(cuts):
        segment_seed = derived_seed(seed, si)
        spent = StageTimes(seed=segment_seed)
        tokens = tokenize(stages, wav16[a:b], cancel, spent)
        if tokens is None or cancel.is_set():
            return
        for wav, final, times, marked in segment_chunks(stages, tokens, voice, segment_seed, p, plan, cancel,
                                                        watermark, spent):
            if cancel.is_set():
                return
            yield Chunk(samples=wav, sample_rate=stages.config.sample_rate, index=index,
                        is_last=final and si == len(cuts) - 1, text="", span=(a, b), sentence_index=si,
                        n_sentences=len(cuts), stages=times, watermarked=marked)
            index += 1
        if cancel.is_set():
            return
