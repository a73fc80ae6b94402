"""The engine API: a model file in, 24 kHz speech out, whole or streamed chunk by chunk.

    engine = Engine("chatterbox-turbo-q4_0.gguf")
    audio = engine.synthesize("Hello there.")                      # float32, 24 kHz mono
    for chunk in engine.stream("Hello there. How are you?"):       # Chunk objects
        play(chunk.samples)

`Engine` names the steps of `ChatterboxTurboTTS.generate()` and delegates each to a stage of
`engine.stages` (engine_native.pipeline): the text front end (punc_norm, the tokenizer,
sentences) -> a T3 session (speech tokens) -> S3Gen's flow (encoder, CFM) -> a vocoder
stream (HiFT) -> the Perth watermark -> Chunks, driven sentence by sentence by
`pipeline.scheduler`; cloning is `pipeline.cloning`; re-voicing a recording (`revoice`,
ChatterboxVC's path: its S3Tokenizer tokens instead of T3's) is `pipeline.revoice`. Each
sentence has its own seed (seed + index), so regenerating one sentence reproduces it.

Watermark: like the official package, the engine marks everything it speaks with Resemble
AI's Perth implicit watermark (imperceptible; `chatterbox-studio detect` or
`engine_native.watermark` finds it), on by default: `Engine(model, watermark=False)` or
`engine.watermark = False` turns it off for every later synthesize/stream of that engine.

Decoder: `Engine(model, decoder=other_model)` decodes the model's speech tokens with another
model file's S3Gen and HiFT. Every Chatterbox model reads the same S3 speech tokens (the 25 Hz
S3Tokenizer's 6,561 codes) and conditions S3Gen on a voice by the same recipe and shapes (the
prompt's tokens, its 80-band mel, CAMPPlus's x-vector; the decoder takes the voice's as the
model's own cloning made them), so a Turbo or Nano file gives the Multilingual model Turbo's
meanflow decoder: 2 CFM evaluations (low-latency: 1) instead of 20 (10 guided steps), with the
decoder's sound instead of the model's own S3Gen's (docs/CPU_MULTILINGUAL.md measures both).
Never implied: without `decoder` the model's own S3Gen decodes, as the reference does.

Concurrency: any number of threads may call one Engine (`pipeline.concurrency`): native
computations run with the GIL released, in arrival order; every generation has its own T3
session, so concurrent streams interleave chunk by chunk and each caller gets its whole
result. `Stream.cancel()` ends a stream and frees the engine at once. Every Chunk carries
what each stage cost (`Chunk.stages`); `Engine.profile` tells a hook when a stage starts and
ends (`pipeline.profile`).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import numpy as np

from engine_native import options as schema
from engine_native.errors import EmptyTextError, ModelError, ParameterError
from engine_native.pipeline import revoice, scheduler
from engine_native.pipeline.cloning import MIN_SPEECH_SECONDS, MIN_VOICE_SECONDS, MIN_VOICE_SECONDS_MTL  # noqa: F401
from engine_native.pipeline.concurrency import CancelToken, Stream
from engine_native.pipeline.model import check_device, devices  # noqa: F401 - public here too
from engine_native.pipeline.profile import StageEvent, StageTimes  # noqa: F401 - public here too
from engine_native.pipeline.request import check_options
from engine_native.pipeline.scheduler import Chunk, ChunkPlan  # noqa: F401 - Chunk is public here
from engine_native.pipeline.stages import Stages
from engine_native.pipeline.text_frontend import check_text
from engine_native.text import Sentence, split_text
from engine_native.voice import Voice, clip_path
from engine_native.watermark import find_model

# Chatterbox's output rate, for a front end that needs a rate before any model is loaded;
# a loaded model's own value (`Engine.sample_rate`, from the GGUF) always wins.
NOMINAL_SAMPLE_RATE = 24000
# Stream settings by what matters most. "quality" is the reference model (its Euler steps,
# the whole voice prompt), chunked, the prompt a cached prefix on the CPU
# (s3gen_flow.STREAM_CACHED_PROMPT); "low-latency" starts speaking sooner: a small first
# chunk, one CFM step (meanflow models are trained to allow it; a little less detail) and the
# last 4 s of the voice's S3Gen prompt (cheaper S3Gen passes; a little less likeness).
PRESETS = {
    "quality": {},
    "low-latency": {"first_chunk_tokens": 10, "chunk_tokens": 25, "cfm_steps": 1, "prompt_seconds": 4.0},
}
# A standard (guided, non-meanflow) CFM is not trained for one step: its low-latency preset
# takes 7 of the reference's 10 cosine steps, the knee where the log-mel cosine against 10
# steps stays at 0.995 (docs/CPU.md). `Engine.presets` applies it.
GUIDED_LOW_LATENCY_CFM_STEPS = 7


class Engine:
    def __init__(self, model_path: str | os.PathLike, *, device: str = "auto", threads: int | None = None,
                 backend: str | None = None, watermark: bool = True, decoder: str | os.PathLike | None = None):
        """`device`: "auto" (the fastest present), "cpu", "cuda:0", "vulkan:0", ... (`devices()`
        lists them); one that is not present raises DeviceError naming those that are. A device
        that fails to start or to hold the model falls back to the CPU: `device_note` says why.
        `backend` is the former name of `device`. `watermark`: mark what the engine speaks
        with the Perth watermark (the `watermark` property); on, a missing watermark model is
        a ModelError naming the command that makes it. `decoder`: another model file whose S3Gen
        and HiFT turn this model's speech tokens into audio instead of its own (the module's "Decoder")."""
        t0 = time.perf_counter()
        self.path = Path(model_path)
        if not self.path.is_file():
            raise ModelError(f"model file not found: {self.path}")
        if threads is not None:
            schema.check("threads", threads)
        if watermark:
            find_model()  # a missing watermark model fails before the model loads
        self._threads = int(threads or 0)  # 0: one per core
        if decoder is not None and not Path(decoder).is_file():
            raise ModelError(f"decoder model file not found: {decoder}")
        self.stages = Stages(self.path, str(backend or device).lower(), self._threads,
                             None if decoder is None else Path(decoder))
        self._watermark = False
        self.watermark = watermark
        config = self.stages.config
        self.variant, self.sample_rate, self.defaults = config.variant, config.sample_rate, config.defaults
        self.device, self.device_note = self.stages.device, self.stages.device_note
        self.builtin_voice = self.stages.builtin_voice
        #: a trained speaker encoder (engine_native.speaker_encoder) that scores likeness
        #: (engine_native.likeness) against voices whose recording is known; None: the model's
        #: VoiceEncoder. The caller chooses (the app and the CLI: app.core.speaker_identity).
        self.likeness_encoder = None
        self.load_seconds = time.perf_counter() - t0

    # ---------------------------------------------------------------- information
    @property
    def watermark(self) -> bool:
        """Whether synthesize and stream mark their audio with the Perth watermark (each
        Chunk says so: `Chunk.watermarked`). Setting it applies to requests made afterwards;
        turning it on loads the watermark model (ModelError when there is none)."""
        return self._watermark

    @watermark.setter
    def watermark(self, on: bool) -> None:
        if not isinstance(on, bool):
            raise ParameterError(f"watermark must be True or False, got {on!r}")
        if on:
            self.stages.marking.load()
        self._watermark = on

    @property
    def token_rate(self) -> int:
        """Speech tokens per second of audio (from the GGUF)."""
        return self.stages.config.token_rate

    @property
    def presets(self) -> dict[str, dict]:
        """PRESETS as they fit this model (a guided CFM's low-latency preset keeps 7 steps)."""
        out = {name: dict(p) for name, p in PRESETS.items()}
        if self.stages.flow.cfm.guided:
            out["low-latency"]["cfm_steps"] = GUIDED_LOW_LATENCY_CFM_STEPS
        return out

    @property
    def info(self) -> dict:
        return {"path": str(self.path), **self.stages.info(), "threads": self.stages.threads,
                "load_seconds": self.load_seconds}

    @staticmethod
    def split_text(text: str) -> list[Sentence]:
        return split_text(text)

    def profile(self, hook):
        """A context manager: `hook(StageEvent)` is told when each stage starts and ends while
        inside (on the computing thread, the engine's locks held: it must be quick and must not
        call the engine). See engine_native.pipeline.profile."""
        return self.stages.profiler.hooked(hook)

    # ---------------------------------------------------------------- text and languages
    @property
    def expression_tags(self) -> list[str]:
        """The paralinguistic tags this model's tokenizer holds ("[laugh]", ...; see engine_native.tags)."""
        return self.stages.text.expression_tags

    def text_tokens(self, text: str, language: str | None = None) -> list[int]:
        """T3's text token ids for one sentence, as synthesis makes them (punc_norm, then the
        tokenizer; Multilingual: with the language tag, between the start and stop text tokens,
        the language detected from the text when not given)."""
        if not isinstance(text, str) or not text.strip():
            raise EmptyTextError("there is nothing to tokenize: the text is empty")
        return self.stages.text.ids(text, self.stages.text.language(language, text))

    @property
    def languages(self) -> dict[str, str]:
        """The languages this model speaks, code -> English name ({} for Turbo and Nano)."""
        return self.stages.text.languages

    def detect_language(self, text: str) -> str:
        """The language code guessed from the text's script (and, for Latin script, its
        letters and common words) among this model's languages (all 23 for Turbo and Nano, which
        speak English only: the guess is then only informative); "en" when nothing points elsewhere."""
        return self.stages.text.detect_language(text)

    # ---------------------------------------------------------------- voices and cloning
    def speaker_embedding(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        """The VoiceEncoder's speaker embedding (L2-normalised) of any audio, made the way
        voice_from_audio makes a voice's speaker_emb: 24 kHz, loudness to -27 LUFS (not for
        Multilingual models), 16 kHz."""
        return self.stages.cloner.speaker_embedding(samples, sample_rate)

    def speaker_xvector(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        """CAMPPlus's x-vector (L2-normalised) of any audio at 16 kHz, the speaker-verification
        embedding S3Gen is conditioned on: what the Voice Lab tells speakers apart with."""
        return self.stages.cloner.speaker_xvector(samples, sample_rate)

    def check_voice(self, voice: Voice) -> None:
        """Does this voice fit this model? VoiceError (naming the file) when it does not."""
        self.stages.cloner.check(voice)

    def voice_from_audio(self, samples: np.ndarray, sample_rate: int, *, name: str | None = None, **meta) -> Voice:
        """A voice from one recording (any rate, mono or (n, channels)), exactly as the
        reference's `prepare_conditionals` makes it from the same samples."""
        return self.stages.cloner.voice_from_audio(samples, sample_rate, name=name, **meta)

    @staticmethod
    def voice_clip(voice: Voice) -> str | None:
        """The recording a voice file was made from, where it is kept beside the file
        (`engine_native.voice.clip_path`: NAME.wav, .flac or .ogg beside NAME.voice.gguf, as
        `chatterbox-studio lab --bake` leaves them and `voice.save_clip` writes); else None."""
        return clip_path(voice.path)

    def adapt_voice(self, voice: Voice, clip=None) -> Voice:
        """`voice` made fit for this model: the voice itself when its variant is this model's;
        else a voice re-made with this model's recipe (`voice_from_audio`) from its recording:
        `clip` (a path, or (samples, sample_rate)), else the clip kept beside its file
        (`voice_clip`). Its name and metadata carry over ("remade_from" records the old
        variant); the engine keeps the result while the voice object lives. IncompatibleVoiceError
        when there is no recording to re-make it from."""
        return self.stages.cloner.adapt(voice, clip)

    @property
    def CLONER_IDLE_SECONDS(self) -> float:  # noqa: N802 - the public name it always had
        """Seconds the cloning encoders stay loaded after their last use (pipeline.cloning)."""
        return self.stages.cloner.idle_seconds

    @CLONER_IDLE_SECONDS.setter
    def CLONER_IDLE_SECONDS(self, seconds: float) -> None:  # noqa: N802
        self.stages.cloner.idle_seconds = seconds

    def release_voice_encoders(self, idle_only: bool = False) -> int:
        """Frees the cloning encoders' weights now (they load again on the next clone); returns
        the bytes freed. idle_only: only when unused for CLONER_IDLE_SECONDS (else re-checked later)."""
        return self.stages.cloner.release(idle_only)

    # ---------------------------------------------------------------- synthesis
    def synthesize(self, text: str, voice: Voice | None = None, *, seed: int | None = None,
                   language: str | None = None, **options) -> np.ndarray:
        """The whole text as one float32 array at `sample_rate` (sentence by sentence; each
        sentence watermarked whole, as the reference marks one generate() call, while
        `watermark` is on).
        Multilingual models also take `language` (a code of `languages`; None: detected from
        the text, the guess logged), `exaggeration` and `cfg_weight`; Turbo and Nano refuse
        those three unless None (ParameterError)."""
        voice, seed, p = self._request(text, voice, seed, options, language)
        chunks = scheduler.chunks(self.stages, text, voice, seed, p, ChunkPlan(), CancelToken(), self._watermark)
        return np.concatenate([c.samples for c in chunks])

    def stream(self, text: str, voice: Voice | None = None, *, first_chunk_tokens: int = 10, chunk_tokens: int = 25,
               seed: int | None = None, language: str | None = None, **options) -> Stream:
        """A Stream of Chunks; returns at once (the text is split as the stream runs). The
        options are synthesize's. A sentence's first chunk holds first_chunk_tokens speech
        tokens, each later one chunk_tokens or the sentence's tokens so far when that is
        more (scheduler.CHUNK_GROWTH). While `watermark` is on, each chunk is marked as it
        comes, its last ~20 ms held back for the next chunk (pipeline.watermark_stream)."""
        plan = ChunkPlan(schema.check("first_chunk_tokens", first_chunk_tokens),
                         schema.check("chunk_tokens", chunk_tokens))
        # Validate everything now, so a bad request fails here and not at the first next().
        voice, seed, p = self._request(text, voice, seed, options, language)
        mark = self._watermark
        return Stream(lambda cancel: scheduler.chunks(self.stages, text, voice, seed, p, plan, cancel, mark))

    def speech_tokens(self, text: str, voice: Voice | None = None, *, seed: int | None = None,
                      language: str | None = None, **options) -> list[list[int]]:
        """T3's speech tokens for each sentence of `text`, as `synthesize` samples them at the
        first attempt (stop token and T3's other specials kept): what S3Gen would speak."""
        voice, seed, p = self._request(text, voice, seed, options, language)
        return scheduler.sentence_tokens(self.stages, text, voice, seed, p, CancelToken())

    def prepare_stream(self, voice: Voice | None = None, *, first_chunk_tokens: int | None = None,
                       chunk_tokens: int | None = None, t3: bool = True, **options) -> Stream:
        """Readies `voice` for streams with these options ahead of them, so that a first
        stream's first chunk comes as soon as a later one's: T3's conditioning prefix for the
        voice (`t3`; its exaggeration matters; re-voicing has no T3 and passes False) and its
        cached stream prefix (s3gen_flow.STREAM_CACHED_PROMPT; a preset's cfm_steps and
        prompt_seconds matter; none where streams cannot cache the prompt, a guided CFM). The
        app calls it when a voice is chosen. A Stream that yields no chunk: iterate it to run,
        cancel() to stop."""
        _, p = self._options(0, {k: v for k, v in options.items() if k not in ("seed", "language")})
        voice = self._usable_voice(voice)
        return Stream(lambda cancel: scheduler.prepare(self.stages, voice, p, cancel, t3=bool(t3)))

    def release_stream_prefixes(self) -> int:
        """Frees the cached stream prefixes; returns the CFM's bytes freed."""
        return self.stages.flow.release_prefixes()

    # ---------------------------------------------------------------- re-voicing
    def revoice(self, samples: np.ndarray, sample_rate: int, voice: Voice | None = None, *, seed: int | None = None,
                cfm_steps: int | None = None, prompt_seconds: float | None = None) -> np.ndarray:
        """A recording (any rate, mono or (n, channels)) spoken again in `voice` (None: the
        built-in one): the same words and timing, float32 at `sample_rate`, by the path of the
        reference's `ChatterboxVC.generate`, watermarked as it marks while `watermark` is on
        (pipeline.revoice; a source over
        revoice.SEGMENT_SECONDS is cut at pauses). SourceError for audio it cannot use,
        SourceTooShortError, NoSpeechError."""
        wav16, voice, seed, p = self._revoice_request(samples, sample_rate, voice, seed, cfm_steps, prompt_seconds)
        return np.concatenate([c.samples for c in revoice.chunks(self.stages, wav16, voice, seed, p, ChunkPlan(),
                                                                 CancelToken(), self._watermark)])

    def revoice_stream(self, samples: np.ndarray, sample_rate: int, voice: Voice | None = None, *,
                       first_chunk_tokens: int = 10, chunk_tokens: int = 25, seed: int | None = None,
                       cfm_steps: int | None = None, prompt_seconds: float | None = None) -> Stream:
        """`revoice` as a Stream of Chunks (checked now; converted as it is iterated), cut as
        `stream` cuts a sentence; a Chunk's sentence is a segment of the source (text ""), the
        first one cut short (revoice.FIRST_SEGMENT_SECONDS) so that the first audio comes early."""
        plan = ChunkPlan(schema.check("first_chunk_tokens", first_chunk_tokens),
                         schema.check("chunk_tokens", chunk_tokens))
        wav16, voice, seed, p = self._revoice_request(samples, sample_rate, voice, seed, cfm_steps, prompt_seconds)
        mark = self._watermark
        return Stream(lambda cancel: revoice.chunks(self.stages, wav16, voice, seed, p, plan, cancel, mark))

    def revoice_tokens(self, samples: np.ndarray, sample_rate: int) -> list[np.ndarray]:
        """The source's speech tokens as `revoice` converts them, one int32 array per segment."""
        wav16 = revoice.source_16k(self.stages.config, samples, sample_rate)
        return [revoice.tokenize(self.stages, wav16[a:b], CancelToken())
                for a, b in revoice.segments(wav16, self.stages.config)]

    def _revoice_request(self, samples, sample_rate, voice, seed, cfm_steps, prompt_seconds):
        voice = self._usable_voice(voice)
        seed, p = self._options(seed, {"cfm_steps": cfm_steps, "prompt_seconds": prompt_seconds})
        return revoice.source_16k(self.stages.config, samples, sample_rate), voice, seed, p

    def _options(self, seed, options: dict) -> tuple[int, dict]:
        return check_options(self.stages.config, self.stages.t3.max_tokens_upper(), seed, options)

    def _request(self, text, voice, seed, options, language=None):
        check_text(text)
        seed, p = self._options(seed, options)
        p["language"] = self.stages.text.language(language, text)
        return self._usable_voice(voice), seed, p

    def _usable_voice(self, voice: Voice | None) -> Voice:
        voice = self.builtin_voice if voice is None else voice
        if isinstance(voice, Voice) and voice.variant != self.variant:
            voice = self.adapt_voice(voice)  # re-made from its kept recording, else refused
        self.check_voice(voice)
        return voice
