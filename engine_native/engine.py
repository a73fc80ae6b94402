"""The engine API: a model file in, 24 kHz speech out, whole or streamed chunk by chunk.

    engine = Engine("chatterbox-turbo-q4_0.gguf")
    audio = engine.synthesize("Hello there.")                      # float32, 24 kHz mono
    for chunk in engine.stream("Hello there. How are you?"):       # Chunk objects
        play(chunk.samples)

The path of `ChatterboxTurboTTS.generate()` per sentence: punc_norm -> GPT-2 BPE -> T3
sampling -> speech tokens (+ silence) -> S3Gen encoder -> meanflow CFM from seeded noise
-> HiFT (f0, seeded excitation, decode) -> the start trim-fade. Text is split into
sentences first; each sentence has its own seed (seed + index), so regenerating one
sentence reproduces it.

Streaming: T3 hands tokens on as it samples them; each chunk runs S3Gen
on the growing token prefix, its left part bounded to `_STREAM_CONTEXT_TOKENS` tokens before
the frames still to play (not final: the encoder's lookahead frames are dropped, as the
reference's `finalize=False` does) and vocodes only the frames not yet played. The HiFT
excitation is one continuous, seeded signal per sentence (cached across chunks), and the
vocoder gets `_HIFT_CONTEXT` mel frames of left context and holds `_HIFT_HOLDBACK` frames
back for the next chunk, so the seams carry no clicks; the trim-fade touches only a
sentence's first chunk. The CFM noise is drawn frame by frame, so a prefix sees the same
noise as the whole. What still differs from `synthesize` is the CFM's view of tokens not
yet sampled and of tokens before its window (its attention is bidirectional), which tests bound.

Concurrency: any number of threads may call one Engine. Native computations run with the
GIL released, served in arrival order (fair locks): on the CPU, T3 has a backend and a
lock of its own, so one T3 computation can run beside one S3Gen / HiFT computation (a
stream's worker samples its next tokens while its last ones are rendered); every generation has
its own T3 session (its own KV cache, taken from a small pool so the voice's conditioning
prefix is reused), so concurrent streams interleave chunk by chunk and each caller gets its
whole result, never a truncated one. `Stream.cancel()` ends a stream: its consumer's loop
ends quietly, the T3 loop in flight stops at its next token and an S3Gen / HiFT computation
in flight at its next graph node (ggml's abort callback), so the engine is free at once.
"""

from __future__ import annotations

import hashlib
import logging
import os
import secrets
import threading
import time
import warnings
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine_native import _core
from engine_native.audio import norm_loudness, resample_sinc, resample_soxr, to_mono
from engine_native import options as schema
from engine_native.language import NAMES as LANGUAGE_NAMES, detect_language
from engine_native.errors import (Cancelled, DeviceError, EmptyTextError, EngineError, IncompatibleVoiceError, ModelError,
                                  ParameterError, SilentAudioError, VoiceError, VoiceTooShortError)
from engine_native.speech import check_speech
from engine_native.text import MAX_TEXT_CHARS, Sentence, has_speech, iter_sentences, split_text
from engine_native.voice import Voice, clip_path

# HiFT's receptive field is about 12 mel frames each way (measured: with 12 frames of
# context a cut decodes to within 5e-8 of the whole); the excitation is cached exactly,
# so 12 frames of left context make a seam inaudible. Holding back 4 frames (80 ms) of
# right context keeps the last emitted frame within ~2 % of its final value while
# adding little latency.
_HIFT_CONTEXT = 12
_HIFT_HOLDBACK = 4
# A streamed chunk's S3Gen pass (encoder and CFM attend both ways over the whole input)
# sees the voice prompt, this many speech tokens before the frames it adds, and the new
# tokens: each chunk then costs the same however long the sentence grows (-1: the whole
# prefix, every chunk; the cost grows with the square of the sentence).
_STREAM_CONTEXT_TOKENS = 50
# A chunk after the first takes max(chunk_tokens, this x the sentence's tokens so far): a long
# sentence takes a few passes (each pays for the voice prompt, which dominates a pass) instead
# of one per chunk_tokens; first audio unchanged. Measured (Turbo Q4_0, quality, loaded
# machine, benchmarks/bench_stream_context.py): 250 tokens, 11 passes 227 s -> 7 passes 131 s
# (0.5); then 0.5 -> 1.0 (chunks 10, 25, 35, 70, 110): S3Gen 77.7 -> 68.5 s, 7 -> 5 passes,
# rel vs batch 0.012 -> 0.011, log-mel 0.035 -> 0.027 (fewer seams); 100 tokens 61.4 -> 53.6 s.
_CHUNK_GROWTH = 1.0
# A stream's CFM passes take the voice prompt as a cached prefix (meanflow models): the
# prompt's frames attend only to themselves, the chunk-causal mask of CosyVoice2's streaming
# mode with the prompt as its first chunk (the U-Net's convolutions are causal already), so
# the prompt's trajectory is integrated once per voice and step count and a pass computes
# only its own frames (tests/engine_native/src/s3gen/test_s3gen_cfm.py checks that against the reference under that mask).
# The price: the audio departs from the batch synthesis, whose prompt frames also attend to
# the speech (docs/CPU.md gives the figures). False: every pass runs the reference's
# full-context CFM over the prompt again (benchmarks/bench_stream_context.py compares).
_STREAM_CACHED_PROMPT = True
# The cached prompt's own noise: fixed, so that one prefix serves every sentence and seed.
_PROMPT_NOISE_SEED = 0
# Cached prompts kept (about 72 MB for a 10 s prompt at 2 CFM steps, 18 MB for the
# low-latency preset's 4 s at 1): the voice and preset in use (two took the bench's peak RSS
# past 1.0 GB). A batch synthesis frees it.
_STREAM_PREFIXES = 1
# On a GPU the S3Gen encoder's compute buffers are sized at load for the built-in voice's
# prompt and this many speech tokens (20 s of audio), with its position table: a first
# sentence up to that long then allocates nothing (H200, Turbo Q4_0, 500 tokens: first
# encode 18.6-24.8 ms against 7.0-7.8 steady, the difference allocation and the table).
_S3GEN_RESERVE_SPEECH_TOKENS = 500
# T3 beside S3Gen: once a sentence's first chunk is out, a worker thread samples its next
# tokens on T3's own CPU backend while the stream's S3Gen / HiFT passes run on the model's
# backend with this many threads fewer than the engine's (at least one), instead of the two
# taking turns on all the cores. T3 keeps its thread count: ggml's flash attention (an F32
# model's decode attention; t3/decode_attention's is per head) splits the KV cache by
# thread, so another count samples other tokens (measured: 1 vs 2 threads differ
# from the 5th token on, random weights); the chunk boundaries stay the same, so the audio does.
_S3GEN_BESIDE_T3_FEWER_THREADS = 1
_T3_WORKER_STEP = 5  # tokens per T3 call of the worker: how often the stream sees new ones
# Chatterbox's output rate, for a front end that needs a rate before any model is loaded;
# a loaded model's own value (`Engine.sample_rate`, from the GGUF) always wins.
NOMINAL_SAMPLE_RATE = 24000
# The reference's minimum recording length (prepare_conditionals asserts > 5 s).
MIN_VOICE_SECONDS = 5.0
# Speech (above -30 dBFS, ffmpeg silencedetect's sense) a recording must hold to be cloned:
# -80 dBFS hiss is refused instead of being normalised into a "voice".
MIN_SPEECH_SECONDS = 1.0
# An "early stop": T3 ending with fewer speech tokens than this many per text token.
_MIN_SPEECH_PER_TEXT_TOKEN = 2.0
# Multilingual text ids are graphemes (and ~6 Cangjie codes per Chinese glyph): about one
# speech token per id is normal there, so an early stop is under half of one.
_MIN_SPEECH_PER_TEXT_TOKEN_MTL = 0.5
# The Multilingual recipe has no minimum length (the reference asserts none); below 2 s the
# VoiceEncoder sees less than one of its 1.6 s windows.
MIN_VOICE_SECONDS_MTL = 2.0
_MAX_ATTEMPTS = 3

# Stream settings by what matters most. "quality" is the reference model (its Euler steps,
# the whole voice prompt), chunked, the prompt a cached prefix on the CPU
# (_STREAM_CACHED_PROMPT); "low-latency" starts speaking sooner: a small first chunk, one CFM
# step (meanflow models are trained to allow it; a little less detail) and the last 4 s
# of the voice's S3Gen prompt (cheaper S3Gen passes; a little less likeness).
PRESETS = {
    "quality": {},
    "low-latency": {"first_chunk_tokens": 10, "chunk_tokens": 25, "cfm_steps": 1, "prompt_seconds": 4.0},
}
# A standard (guided, non-meanflow) CFM is not trained for one step: its low-latency preset
# takes 7 of the reference's 10 cosine steps, the knee the earlier port measured (log-mel
# cosine 0.995 against 10 steps; 6 steps 0.990). `Engine.presets` applies it.
GUIDED_LOW_LATENCY_CFM_STEPS = 7


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
    timings: dict = field(default_factory=dict)


_SAMPLE_RATE = schema.Option("sample_rate", int, 1000, 768000, False, False, "a recording's sample rate in Hz")
# Idle T3 sessions kept for reuse (each holds a KV cache; one keeps the last voice's prefix).
_IDLE_T3_CACHES = 1
log = logging.getLogger(__name__)


def _get_or(f, key: str, default: int) -> int:
    return f.get_int(key) if f.has_key(key) else default


class _FairLock:
    """A re-entrant lock that serves waiting threads in arrival order (a ticket lock), so
    concurrent callers interleave fairly instead of one starving the others."""

    def __init__(self):
        self._cv = threading.Condition(threading.Lock())
        self._next_ticket = 0
        self._serving = 0
        self._owner = None
        self._depth = 0

    def __enter__(self):
        me = threading.get_ident()
        with self._cv:
            if self._owner == me:
                self._depth += 1
                return self
            ticket = self._next_ticket
            self._next_ticket += 1
            while self._serving != ticket or self._owner is not None:
                self._cv.wait()
            self._owner, self._depth = me, 1
        return self

    def __exit__(self, *exc):
        with self._cv:
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._serving += 1
                self._cv.notify_all()


class _StreamVocoder:
    """HiFT over a growing mel: emits each frame once, with exact excitation continuity."""

    def __init__(self, hift, seed: int):
        self.hift = hift
        self.state = hift.source_state(seed)
        self.spf = hift.samples_per_frame
        self.emitted = 0                                   # frames already turned into audio
        self.source_tail = np.zeros(0, np.float32)         # excitation of the last context frames

    def push(self, mel: np.ndarray, final: bool, offset: int = 0) -> tuple[np.ndarray, float]:
        """mel: [n_mels, frames] for the speech frames from `offset` on (every frame so far when 0;
        a window must start at least _HIFT_CONTEXT frames before the first frame not yet
        emitted). Returns (new samples, ms)."""
        t0 = time.perf_counter()
        M = offset + mel.shape[1]
        end = M if final else M - _HIFT_HOLDBACK
        if end <= self.emitted:
            return np.zeros(0, np.float32), 0.0
        start = max(0, self.emitted - _HIFT_CONTEXT)
        if offset > start:
            raise EngineError(f"internal: a mel window from frame {offset} lacks the vocoder's context from {start}")
        mel = np.ascontiguousarray(mel[:, start - offset:])
        f0 = self.hift.f0(mel)
        new = self.hift.excitation_continue(f0[self.emitted - start:end - start], self.state)
        ahead = self.hift.excitation_continue(f0[end - start:], self.state.copy()) if end < M else new[:0]
        context = self.source_tail[len(self.source_tail) - (self.emitted - start) * self.spf:]
        wav = self.hift.decode(mel, np.concatenate([context, new, ahead]))
        out = wav[(self.emitted - start) * self.spf:(end - start) * self.spf]
        self.source_tail = np.concatenate([context, new])[-_HIFT_CONTEXT * self.spf:]
        self.emitted = end
        return out, (time.perf_counter() - t0) * 1e3


class _TokenWorker:
    """Samples the rest of a stream's sentence on a thread of its own, beside the stream's
    S3Gen passes (T3 on its own backend)."""

    def __init__(self, engine, t3, tokens: list[int]):
        self._engine, self._t3 = engine, t3
        self._tokens = list(tokens)
        self._done = False
        self._error = None
        self._cv = threading.Condition()
        with engine._workers_lock:
            engine._t3_workers += 1
        self._thread = threading.Thread(target=self._run, name="cbs-t3-worker", daemon=True)
        self._thread.start()

    def _run(self):
        try:
            while not (self._t3.done or self._t3.cancelled):
                with self._engine._t3_lock:
                    got = self._t3.next(_T3_WORKER_STEP)
                with self._cv:
                    self._tokens += got
                    self._cv.notify_all()
        except BaseException as e:  # noqa: BLE001 - raised in the stream's thread by wait()
            self._error = e
        finally:
            with self._engine._workers_lock:
                self._engine._t3_workers -= 1
            with self._cv:
                self._done = True
                self._cv.notify_all()

    def wait(self, n: int, cancel) -> tuple[list[int], bool]:
        """The sentence's first n tokens once sampled (fewer when it ends first) and whether
        they are all of it; returns early when the stream is cancelled."""
        with self._cv:
            while len(self._tokens) < n and not self._done and not cancel.is_set():
                self._cv.wait(0.05)
            if self._error is not None:
                raise self._error
            return self._tokens[:n], self._done and n >= len(self._tokens)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._t3.cancel()
        self._thread.join()


class Stream:
    """The iterator `Engine.stream` returns; `cancel()` may be called from any thread."""

    def __init__(self, gen_factory):
        self._cancel = _CancelToken()
        self._gen = gen_factory(self._cancel)

    def __iter__(self):
        return self

    def __next__(self) -> Chunk:
        if self._cancel.is_set():
            self._gen.close()
            raise StopIteration
        return next(self._gen)

    def cancel(self) -> None:
        """Stop: the iterator ends before its next chunk; sampling in flight stops at its next token,
        an S3Gen / HiFT computation at its next graph node."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def close(self) -> None:
        self._cancel.set()
        self._gen.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _CancelToken:
    """A cancel flag that also reaches the native T3 loop running for it, and the graph
    computation (S3Gen encoder, CFM, HiFT) running for it: `armed(model)` points the
    model's abort flag at this token for one stretch of computations."""

    def __init__(self):
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._t3 = None
        self._model = None

    def set(self) -> None:
        with self._lock:
            self._event.set()
            t3 = self._t3
            if self._model is not None:  # under the lock: never after `armed` has disarmed
                self._model.abort_compute(True)
        if t3 is not None:
            t3.cancel()

    @contextmanager
    def armed(self, model):
        """While inside, cancelling this token aborts `model`'s computation in flight (it raises
        Cancelled). Only one generation computes at a time (the engine's lock is held)."""
        with self._lock:
            self._model = model
            model.abort_compute(self._event.is_set())
        try:
            yield
        finally:
            with self._lock:
                self._model = None
                model.abort_compute(False)

    def is_set(self) -> bool:
        return self._event.is_set()

    def watch(self, t3) -> None:
        """The T3 token stream now running for this generation (None: none)."""
        with self._lock:
            self._t3 = t3
        if t3 is not None and self._event.is_set():
            t3.cancel()


def devices() -> list[dict]:
    """Every device present, the fastest first ("auto" takes the first): dicts of id ("cpu",
    "cuda:0", "vulkan:0"), name, backend, description, type (cpu/gpu/igpu), memory_free and
    memory_total (bytes)."""
    return _core.devices()


def _core_device(name: str) -> str:
    """The id of the device `name` selects ("auto" -> the first present, "cuda" -> "cuda:0")."""
    ids = [d["id"] for d in _core.devices()]
    if name == "auto":
        return ids[0]
    if name in ids:
        return name
    if name == "gpu":
        return next((d["id"] for d in _core.devices() if d["type"] in ("gpu", "igpu")), "")
    return next((i for i in ids if i == f"{name}:0"), "")


def check_device(name: str) -> str:
    """The id `name` selects; DeviceError naming the devices present when it selects none."""
    if not isinstance(name, str) or not name:
        raise DeviceError("the device must be a name such as auto, cpu, cuda:0 or vulkan:0")
    found = _core_device(name.lower())
    if not found:
        present = ", ".join(d["id"] for d in _core.devices())
        raise DeviceError(f"device '{name}' is not present (devices: {present})")
    return found


class Engine:
    def __init__(self, model_path: str | os.PathLike, *, device: str = "auto", threads: int | None = None,
                 backend: str | None = None):
        """`device`: "auto" (the fastest present), "cpu", "cuda:0", "vulkan:0", ... (`devices()`
        lists them); one that is not present raises DeviceError naming those that are. A device
        that fails to start or to hold the model falls back to the CPU: `device_note` says why.
        `backend` is the former name of `device`."""
        t0 = time.perf_counter()
        self.path = Path(model_path)
        if not self.path.is_file():
            raise ModelError(f"model file not found: {self.path}")
        if threads is not None:
            schema.check("threads", threads)
        self._threads = int(threads or 0)  # 0: one per core
        requested = str(backend or device).lower()
        check_device(requested)
        self.device_note = ""
        try:
            self._load(requested)
        except DeviceError:
            raise
        except EngineError as e:
            if requested == "cpu" or _core_device(requested) == "cpu":
                raise ModelError(str(e)) from None
            # The device could not start or hold the model: the CPU instead, saying so.
            self.device_note = f"{requested} failed ({e}); running on the CPU"
            warnings.warn(f"chatterbox-studio: {self.device_note}", RuntimeWarning, stacklevel=2)
            try:
                self._load("cpu")
            except EngineError as e2:
                raise ModelError(str(e2)) from None
        f = self._file
        self.variant = f.get_string("chatterbox.variant")
        self.sample_rate = f.get_int("chatterbox.s3gen.sample_rate")
        self._speech_codes = f.get_int("chatterbox.s3gen.speech_vocab")  # tokens >= this are T3 specials
        self._silence = [f.get_int("chatterbox.s3gen.silence_token")] * f.get_int("chatterbox.s3gen.n_silence_tokens")
        self._lookahead_frames = (f.get_int("chatterbox.s3gen.enc.pre_lookahead_len")
                                  * f.get_int("chatterbox.s3gen.token_mel_ratio"))
        self._trim = f.get_int("chatterbox.hift.trim_fade_samples")
        self._mtl = self.variant == "mtl"
        self._cond_prompt_len = f.get_int("chatterbox.t3.speech_cond_prompt_len")
        if self._mtl:
            # Llama T3: learned position tables bound the text (start/stop included) and the
            # speech; its KV cache grows as needed.
            self._max_text_ids = f.get_int("chatterbox.t3.text_pos_len")
            self._max_speech = f.get_int("chatterbox.t3.max_speech_tokens")
            self._text_start = f.get_int("chatterbox.t3.start_text_token")
            self._text_stop = f.get_int("chatterbox.t3.stop_text_token")
            self._n_ctx = 0
        else:
            self._n_ctx = f.get_int("chatterbox.t3.n_ctx")
        # The voice recipe's rates and lengths (prepare_conditionals): from the GGUF; files
        # converted before these keys existed get the Turbo/Nano reference values.
        self._token_rate = f.get_int("chatterbox.s3gen.token_rate")
        self._token_mel_ratio = f.get_int("chatterbox.s3gen.token_mel_ratio")
        self._tokenizer_rate = f.get_int("chatterbox.s3tok.sample_rate")
        self._s3gen_prompt_seconds = _get_or(f, "chatterbox.s3gen.prompt_seconds", 10)   # DEC_COND_LEN
        self._t3_prompt_seconds = _get_or(f, "chatterbox.t3.prompt_seconds", 15)         # ENC_COND_LEN
        self._norm_loudness = (f.get_bool("chatterbox.voice.norm_loudness")              # MTL: none
                               if f.has_key("chatterbox.voice.norm_loudness") else True)
        self.defaults = {
            "temperature": f.get_float("chatterbox.sampling.temperature"),
            "top_k": f.get_int("chatterbox.sampling.top_k"),
            "top_p": f.get_float("chatterbox.sampling.top_p"),
            "repetition_penalty": f.get_float("chatterbox.sampling.repetition_penalty"),
            "min_p": f.get_float("chatterbox.sampling.min_p"),
            "cfm_steps": self._cfm.n_timesteps,
            "max_tokens": f.get_int("chatterbox.sampling.max_gen_len"),
            "prompt_seconds": None,   # None: the voice's whole S3Gen prompt (the reference)
        }
        if self._mtl:
            # The reference's generate(): no top-k (None: off; 1..100000 may still be set).
            self.defaults["top_k"] = None
            for name in schema.MTL:
                self.defaults[name] = f.get_float(f"chatterbox.sampling.{name}")
        self.builtin_voice = Voice(
            speaker_emb=f.tensor_f32("voice.speaker_emb").reshape(-1),
            cond_prompt_speech_tokens=f.tensor_f32("voice.cond_prompt_speech_tokens").astype(np.int32).reshape(-1),
            embedding=f.tensor_f32("voice.embedding").reshape(-1),
            prompt_token=f.tensor_f32("voice.prompt_token").astype(np.int32).reshape(-1),
            prompt_feat=f.tensor_f32("voice.prompt_feat").reshape(-1, self._hift.in_channels),
            variant=self.variant, meta={"name": (f.get_string("chatterbox.builtin_voice.name")  # a baked voice's
                                                 if f.has_key("chatterbox.builtin_voice.name") else "Built-in"),
                                        "builtin": True})
        self._lock = _FairLock()     # one native computation at a time, in arrival order
        # A stream's T3 worker beside S3Gen (T3 on a CPU backend of its own, with a lock of its
        # own). Off by default: on 2 cores with both threads busy it measured no faster (1.73x ->
        # 1.64x batch, loaded) and it takes CPU from the GUI thread (the GUI soak's stalls); off,
        # T3 and S3Gen take turns under one lock as before. CBS_STREAM_OVERLAP=1 turns it on.
        self._overlap = self._t3.own_backend and os.environ.get("CBS_STREAM_OVERLAP") == "1"
        self._t3_lock = _FairLock() if self._overlap else self._lock
        self._t3_workers = 0         # _TokenWorkers running (S3Gen then leaves them their threads)
        self._s3gen_beside_threads = max(1, self._n_threads - _S3GEN_BESIDE_T3_FEWER_THREADS)
        self._workers_lock = threading.Lock()
        self._idle_caches = []       # T3 KV caches of finished sessions, for reuse
        self._cache_lock = threading.Lock()
        self._cloner = None          # the cloning encoders, while loaded (_voice_encoders)
        self._cloner_used = 0.0
        self._encoder_refs = []      # every encoder built on the loaded weights (release only when all are gone)
        self.load_seconds = time.perf_counter() - t0

    def _load(self, device: str) -> None:
        self._file = _core.ModelFile(str(self.path), device=device, threads=self._threads)
        if self._file.get_string("chatterbox.variant") == "mtl":
            from engine_native.text_mtl import MtlTokenizer

            self._tokenizer = MtlTokenizer(self.path)
        else:
            self._tokenizer = _core.Gpt2Tokenizer(str(self.path))
        self._n_threads = self._threads or _core.system_info()["default_threads"]
        self._t3 = _core.T3(self._file, threads=self._n_threads)  # on the CPU: a backend of its own
        self._encoder = _core.S3GenEncoder(self._file)
        if self._file.device != "cpu":
            has_voice = "voice.prompt_token" in self._file.tensor_names()
            prompt = self._file.tensor_f32("voice.prompt_token").size if has_voice else 0
            self._encoder.reserve(prompt + _S3GEN_RESERVE_SPEECH_TOKENS)
        self._cfm = _core.S3GenCfm(self._file)
        self._prefixes: dict = {}  # (voice prompt digest, CFM steps) -> (encoder, CFM) prefixes (_stream_prefix)
        self._hift = _core.HiFT(self._file)  # on the model's device (a GPU: ggml ops; a device OOM: the CPU)
        self.device = self._file.device

    @property
    def token_rate(self) -> int:
        """Speech tokens per second of audio (from the GGUF)."""
        return self._token_rate

    # ---------------------------------------------------------------- information
    @property
    def presets(self) -> dict[str, dict]:
        """PRESETS as they fit this model (a guided CFM's low-latency preset keeps 7 steps)."""
        out = {name: dict(p) for name, p in PRESETS.items()}
        if self._cfm.guided:
            out["low-latency"]["cfm_steps"] = GUIDED_LOW_LATENCY_CFM_STEPS
        return out

    @property
    def info(self) -> dict:
        f = self._file
        hp = {k: f.get_int(f"chatterbox.t3.{k}") for k in ("n_layer", "n_embd", "n_head", "n_ctx", "text_vocab",
                                                            "speech_vocab", "speech_cond_prompt_len")
              if f.has_key(f"chatterbox.t3.{k}")}
        hp["cfm_steps"] = self._cfm.n_timesteps
        hp["meanflow"] = not self._cfm.guided
        system = _core.system_info()
        return {"path": str(self.path), "variant": self.variant, "quantization": f.get_string("chatterbox.quant"),
                "backend": self.device, "device": self.device, "device_note": self.device_note,
                "hift_device": "cpu" if self._hift.device == "CPU" else self.device, "cpu_variant": system["cpu_variant"],
                "threads": self._threads or system["default_threads"], "ggml_version": system["ggml_version"],
                "sample_rate": self.sample_rate, "hparams": hp, "defaults": dict(self.defaults),
                "languages": self.languages, "load_seconds": self.load_seconds}

    @staticmethod
    def split_text(text: str) -> list[Sentence]:
        return split_text(text)

    # ---------------------------------------------------------------- text and likeness (engine_native.script)
    @property
    def expression_tags(self) -> list[str]:
        """The paralinguistic tags this model's tokenizer holds ("[laugh]", ...; see engine_native.tags)."""
        if self._mtl:
            return []  # the grapheme tokenizer's added tokens are language tags and Cangjie codes
        if getattr(self, "_expression_tags", None) is None:
            from engine_native.tags import read_expression_tags

            self._expression_tags = read_expression_tags(self._file, self._tokenizer)
        return list(self._expression_tags)

    def text_tokens(self, text: str, language: str | None = None) -> list[int]:
        """T3's text token ids for one sentence, as synthesis makes them (punc_norm, then the
        tokenizer; Multilingual: with the language tag, between the start and stop text tokens,
        the language detected from the text when not given)."""
        if not isinstance(text, str) or not text.strip():
            raise EmptyTextError("there is nothing to tokenize: the text is empty")
        return self._text_ids(text, self._language(language, text))

    # ---------------------------------------------------------------- languages (Multilingual)
    @property
    def languages(self) -> dict[str, str]:
        """The languages this model speaks, code -> English name ({} for Turbo and Nano)."""
        if not self._mtl:
            return {}
        return {c: LANGUAGE_NAMES.get(c, c) for c in sorted(self._tokenizer.languages)}

    def detect_language(self, text: str) -> str:
        """The language code guessed from the text's script (and, for Latin script, its
        letters and common words) among this model's languages (all 23 for Turbo and Nano, which
        speak English only: the guess is then only informative); "en" when nothing points elsewhere."""
        if not isinstance(text, str):
            raise EmptyTextError(f"text must be a string; got {type(text).__name__}")
        return detect_language(text, self.languages or None)

    def _language(self, language, text: str) -> str | None:
        """The request's language code (Multilingual), detected from `text` when None (the guess
        logged); ParameterError for a Turbo/Nano model given one or an unknown code."""
        if not self._mtl:
            if language is not None:
                raise ParameterError(f"language applies to Multilingual models only; this model is {self.variant}")
            return None
        if language is None:
            guess = self.detect_language(text)
            log.info("language not given: detected %s (%s) from the text", guess, LANGUAGE_NAMES.get(guess, guess))
            return guess
        code = language.strip().lower() if isinstance(language, str) else None
        if code not in self.languages:
            raise ParameterError(f"unknown language {language!r}; this model speaks "
                                 f"{', '.join(self.languages)}")
        return code

    @staticmethod
    def _audio(samples: np.ndarray, sample_rate: int) -> tuple[np.ndarray, int]:
        """Any audio an embedding is asked of, as (mono float32, rate); VoiceError if unusable."""
        sr = _SAMPLE_RATE.check(sample_rate)
        try:
            mono = to_mono(samples)
        except ValueError as e:
            raise VoiceError(str(e)) from None
        if mono.size == 0 or not np.all(np.isfinite(mono)):
            raise VoiceError("the audio is empty or holds invalid samples")
        return mono, sr

    def speaker_embedding(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        """The VoiceEncoder's speaker embedding (L2-normalised) of any audio, made the way
        voice_from_audio makes a voice's speaker_emb: 24 kHz, loudness to -27 LUFS (not for
        Multilingual models), 16 kHz."""
        mono, sr = self._audio(samples, sample_rate)
        with self._lock:
            ve = self._voice_encoders()["ve"]
            wav24 = resample_soxr(mono, sr, self.sample_rate)
            if self._norm_loudness:  # Turbo/Nano; the Multilingual recipe has no loudness step
                wav24 = norm_loudness(wav24, self.sample_rate)
            ref16 = resample_soxr(wav24, self.sample_rate, self._tokenizer_rate)
            return np.asarray(ve.embed(ref16, threads=self._threads), np.float32).reshape(-1)

    def speaker_xvector(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        """CAMPPlus's x-vector (L2-normalised) of any audio at 16 kHz, the speaker-verification
        embedding S3Gen is conditioned on: what the Voice Lab tells speakers apart with (a
        verification model separates voices more sharply than T3's VoiceEncoder)."""
        mono, sr = self._audio(samples, sample_rate)
        with self._lock:
            campplus = self._voice_encoders()["campplus"]
            x = np.asarray(campplus.embed(resample_soxr(mono, sr, self._tokenizer_rate)), np.float32).reshape(-1)
        return x / (np.linalg.norm(x) or 1.0)

    # ---------------------------------------------------------------- voices
    def check_voice(self, voice: Voice) -> None:
        """Does this voice fit this model? VoiceError (naming the file) when it does not."""
        if not isinstance(voice, Voice):
            raise VoiceError(f"voice must be an engine_native.Voice; got {type(voice).__name__}")
        if voice.variant != self.variant:
            raise IncompatibleVoiceError(
                f"{voice.where()} was made with a Chatterbox {voice.variant or 'unknown'} model; this model is "
                f"{self.variant}. Clone the voice again with this model (Engine.adapt_voice does so from the "
                f"recording kept beside the voice file, where there is one).")
        voice.validate()
        f = self._file
        expect = {"speaker_emb": f.get_int("chatterbox.t3.speaker_embed_size"),
                  "embedding": self._file.tensor_info("voice.embedding")[1][0]}
        for name, n in expect.items():
            if getattr(voice, name).size != n:
                raise IncompatibleVoiceError(f"{voice.where()}: {name} has {getattr(voice, name).size} values; "
                                             f"this model needs {n}")
        n_mels = self._hift.in_channels
        if voice.prompt_feat.shape[1] != n_mels:
            raise IncompatibleVoiceError(f"{voice.where()}: prompt_feat must be [frames, {n_mels}]")
        for name in ("cond_prompt_speech_tokens", "prompt_token"):
            t = getattr(voice, name)
            if t.max() >= self._speech_codes:
                raise IncompatibleVoiceError(f"{voice.where()}: {name} holds ids outside this model's codebook")
        if voice.cond_prompt_speech_tokens.size > self._cond_prompt_len:
            raise VoiceError(f"{voice.where()}: {voice.cond_prompt_speech_tokens.size} T3 prompt tokens; this model "
                             f"takes at most {self._cond_prompt_len}")
        # S3Gen's prompt: mel frames = token_mel_ratio x tokens, and no longer than the recipe makes.
        n_tok, n_frames = voice.prompt_token.size, voice.prompt_feat.shape[0]
        if n_frames // self._token_mel_ratio != n_tok:  # (the reference keeps an odd last frame)
            raise VoiceError(f"{voice.where()}: its S3Gen prompt is inconsistent ({n_tok} tokens but {n_frames} "
                             f"mel frames; {self._token_mel_ratio} frames per token expected)")
        if n_tok > self._s3gen_prompt_seconds * self._token_rate:
            raise VoiceError(f"{voice.where()}: its S3Gen prompt holds {n_tok} tokens; at most "
                             f"{self._s3gen_prompt_seconds * self._token_rate} expected")

    def _voice_encoders(self):
        """The cloning encoders, built on first use (their weights load then: a synthesis-only
        session never holds them) and released after CLONER_IDLE_SECONDS unused. Call with
        self._lock held."""
        self._cloner_used = time.monotonic()
        if self._cloner is None:
            missing = [c for c in ("Mel24k", "VoiceEncoder", "CampPlus", "S3Tokenizer") if not hasattr(_core, c)]
            if missing:
                raise EngineError(f"this build of the engine lacks {', '.join(missing)}; voice cloning is unavailable")
            self._cloner = {"mel": _core.Mel24k(self._file), "ve": _core.VoiceEncoder(self._file),
                            "campplus": _core.CampPlus(self._file), "s3tok": _core.S3Tokenizer(self._file)}
            self._encoder_refs += [weakref.ref(c) for c in self._cloner.values()]
            self._schedule_cloner_release(self.CLONER_IDLE_SECONDS)
        return self._cloner

    # Seconds the cloning encoders (S3Tokenizer, CAMPPlus, VoiceEncoder: about 0.5 GB in F32)
    # stay loaded after their last use: a burst of clones reuses them, an idle session frees them.
    CLONER_IDLE_SECONDS = 60.0

    def _schedule_cloner_release(self, delay: float) -> None:
        me = weakref.ref(self)  # the timer must not keep the engine alive
        timer = threading.Timer(delay, lambda: (e := me()) is not None and e.release_voice_encoders(idle_only=True))
        timer.daemon = True
        timer.start()

    def release_voice_encoders(self, idle_only: bool = False) -> int:
        """Frees the cloning encoders' weights now (they load again on the next clone); returns
        the bytes freed. idle_only: only when unused for CLONER_IDLE_SECONDS (else re-checked later)."""
        with self._lock:
            if self._cloner is None:
                return 0
            idle = time.monotonic() - self._cloner_used
            if idle_only and idle < self.CLONER_IDLE_SECONDS:
                self._schedule_cloner_release(self.CLONER_IDLE_SECONDS - idle)
                return 0
            self._cloner = None
            if any(r() is not None for r in self._encoder_refs):
                return 0  # someone still holds an encoder built on these weights: they stay
            self._encoder_refs = []
            return self._file.release_lazy() if hasattr(self._file, "release_lazy") else 0

    def voice_from_audio(self, samples: np.ndarray, sample_rate: int, *, name: str | None = None, **meta) -> Voice:
        """A voice from one recording (any rate, mono or (n, channels)), exactly as the
        reference's `prepare_conditionals` makes it from the same samples."""
        sr = _SAMPLE_RATE.check(sample_rate)
        try:
            mono = to_mono(samples)
        except ValueError as e:
            raise VoiceError(str(e)) from None
        if not np.all(np.isfinite(mono)):
            raise VoiceError("the recording contains invalid samples (NaN or infinity)")
        S3GEN_SR, S3_SR = self.sample_rate, self._tokenizer_rate
        duration = mono.size / sr
        shortest = MIN_VOICE_SECONDS_MTL if self._mtl else MIN_VOICE_SECONDS
        if duration <= shortest:
            raise VoiceTooShortError(f"the recording is {duration:.1f} s long; cloning needs more than "
                                     f"{shortest:.0f} s of audio (10 s or more is best)")
        if not np.any(np.abs(mono) > 1e-6):
            raise SilentAudioError("the recording is silent: there is no signal to clone")
        # The Voice Lab's speech detection, before loudness normalisation lifts noise to speech level.
        check_speech(mono, sr, MIN_SPEECH_SECONDS)
        with self._lock:
            enc = self._voice_encoders()
            t0 = time.perf_counter()
            wav24 = resample_soxr(mono, sr, S3GEN_SR)            # librosa.load(path, sr=24000)
            if self._norm_loudness:                               # to -27 LUFS (Turbo/Nano; not MTL)
                wav24 = norm_loudness(wav24, S3GEN_SR)
            ref16 = resample_soxr(wav24, S3GEN_SR, S3_SR)         # librosa.resample -> T3 and the VoiceEncoder
            dec = wav24[: self._s3gen_prompt_seconds * S3GEN_SR]  # DEC_COND_LEN
            dec16 = resample_sinc(dec, S3GEN_SR, S3_SR)           # embed_ref's torchaudio Resample
            try:
                prompt_feat = np.asarray(enc["mel"].compute(dec), np.float32)
                embedding = np.asarray(enc["campplus"].embed(dec16), np.float32)
                prompt_token = np.asarray(enc["s3tok"].tokens(dec16), np.int32)
                ratio = self._token_mel_ratio
                if prompt_feat.shape[0] != ratio * prompt_token.size:
                    prompt_token = prompt_token[: prompt_feat.shape[0] // ratio]
                cond_tokens = np.asarray(enc["s3tok"].tokens(ref16[: self._t3_prompt_seconds * S3_SR],
                                                             max_len=self._cond_prompt_len),
                                         np.int32)                 # ENC_COND_LEN (15 s; MTL 6 s), capped
                speaker_emb = np.asarray(enc["ve"].embed(ref16, threads=self._threads), np.float32)
            except EngineError as e:
                raise VoiceError(f"cannot clone this recording: {e}") from None
            if not np.all(np.isfinite(speaker_emb)) or not np.any(speaker_emb):
                raise SilentAudioError("the recording holds too little speech to clone (the voice encoder found none)")
            meta = {k: v for k, v in meta.items() if v is not None}
            meta.update(duration_s=round(duration, 3), source_sample_rate=int(sr),
                        clone_seconds=round(time.perf_counter() - t0, 3))
            if name:
                meta["name"] = name
            return Voice(speaker_emb=speaker_emb, cond_prompt_speech_tokens=cond_tokens, embedding=embedding,
                         prompt_token=prompt_token, prompt_feat=prompt_feat, variant=self.variant, meta=meta)

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
        variant); the result is cached on the voice object. IncompatibleVoiceError when
        there is no recording to re-make it from."""
        if not isinstance(voice, Voice):
            raise VoiceError(f"voice must be an engine_native.Voice; got {type(voice).__name__}")
        if voice.variant == self.variant:
            return voice
        remade = voice.__dict__.setdefault("_remade", {})  # model path -> the voice re-made from its kept clip
        key = str(self.path)
        if clip is None and key in remade:
            return remade[key]
        source = clip if clip is not None else self.voice_clip(voice)
        if source is None:
            raise IncompatibleVoiceError(
                f"{voice.where()} was made with a Chatterbox {voice.variant or 'unknown'} model; this model is "
                f"{self.variant}, and no recording is kept beside it to re-make it from. Clone the voice again "
                f"with this model.")
        if isinstance(source, (str, os.PathLike)):
            import soundfile as sf

            try:
                samples, rate = sf.read(os.fspath(source), dtype="float32", always_2d=True)
            except Exception as e:  # soundfile raises RuntimeError/LibsndfileError on unreadable files
                raise VoiceError(f"cannot read the recording {source}: {e}") from None
        else:
            samples, rate = source
        made = ("builtin", "clone_seconds", "duration_s", "created_at", "source_sample_rate")  # of the old cloning
        meta = {k: v for k, v in voice.meta.items() if k not in made}
        meta["remade_from"] = voice.variant or "unknown"
        new = self.voice_from_audio(samples, rate, **meta)
        if clip is None:
            remade[key] = new
        return new

    # ---------------------------------------------------------------- synthesis
    def _options(self, seed, opts: dict) -> tuple[int, dict]:
        if not self._mtl:
            # Multilingual options: None (the app's "model default") is fine; a value is refused.
            given = [k for k in schema.MTL if opts.get(k) is not None]
            if given:
                raise ParameterError(f"{' and '.join(given)} apply to Multilingual models only; this model is "
                                     f"{self.variant}")
            opts = {k: v for k, v in opts.items() if k not in schema.MTL}
        unknown = set(opts) - set(self.defaults)
        if unknown:
            raise ParameterError(f"unknown option(s): {', '.join(sorted(map(str, unknown)))}; the options are "
                                 f"{', '.join(sorted(self.defaults))}")
        p = {**self.defaults, **{k: v for k, v in opts.items() if v is not None}}
        for name in p:
            if name == "max_tokens":
                # T3's context holds the voice's prompt, the text (up to 300 tokens) and the speech;
                # the Multilingual T3's speech position table bounds the speech.
                upper = self._max_speech if self._mtl else self._n_ctx - self._cond_prompt_len - 1 - 300
                p[name] = schema.check(name, p[name], upper=upper)
            elif p[name] is not None:
                p[name] = schema.check(name, p[name])
        seed = secrets.randbelow(2**31) if seed is None else schema.check("seed", seed)
        return seed, p

    def _sentences(self, text, cancel, language=None) -> list[Sentence] | None:
        """The text's sentences (None when cancelled while splitting: a huge paste can be stopped).
        Multilingual: a sentence over T3's text budget in tokens (Cangjie turns a Chinese glyph
        into about 6 ids) is cut further."""
        out = []
        for i, s in enumerate(iter_sentences(text)):
            out.extend(self._fit_budget(s, language) if self._mtl else (s,))
            if i % 1024 == 1023 and cancel.is_set():
                return None
        return out

    def _fit_budget(self, s: Sentence, language) -> list[Sentence]:
        """`s`, or its pieces (cut as the splitter cuts long sentences, into ever smaller
        pieces) when its text ids exceed the Multilingual T3's text position table. Up to
        1/8 of the table in characters is taken as fitting (a Cangjie glyph is about 6 ids);
        `_t3_session` still refuses, by name, a sentence that does not."""
        if len(s.text) <= self._max_text_ids // 8 or len(self._text_ids(s.text, language)) <= self._max_text_ids:
            return [s]
        limit = len(s.text) // 2
        while limit > 1:
            pieces = [Sentence(p.text, s.start + p.start, s.start + p.end) for p in split_text(s.text, limit)]
            if all(len(self._text_ids(p.text, language)) <= self._max_text_ids for p in pieces):
                return pieces
            limit //= 2
        raise ParameterError(f"a piece of text does not fit T3's {self._max_text_ids} text tokens: {s.text[:40]!r}")

    @staticmethod
    def _check_text(text) -> None:
        if not isinstance(text, str):
            raise EmptyTextError(f"text must be a string; got {type(text).__name__}")
        if len(text) > MAX_TEXT_CHARS:
            raise ParameterError(f"the text is {len(text):,} characters long; one call takes at most "
                                 f"{MAX_TEXT_CHARS:,} (split it into parts)")
        if not has_speech(text):
            raise EmptyTextError("there is nothing to say: the text is empty or only punctuation")

    def _text_ids(self, sentence: str, language: str | None = None) -> list[int]:
        if self._mtl:  # mtl_tts.generate: punc_norm, the grapheme tokenizer, start/stop text tokens
            ids = self._tokenizer.tokenize(_core.punc_norm_mtl(sentence), language).astype(np.int32).tolist()
            return [self._text_start, *ids, self._text_stop]
        return self._tokenizer.encode(_core.punc_norm(sentence)).astype(np.int32).tolist()

    def _t3_session(self, ids, seed, p, voice, cancel):
        """A T3 token stream with a KV cache of its own (a pooled one when free)."""
        # T3's context holds [speaker, voice prompt, text, start-of-speech, speech]; say which
        # part does not fit instead of letting the cache refuse it.
        fixed = 1 + voice.cond_prompt_speech_tokens.size + len(ids) + 1
        extra = {}
        if self._mtl:
            if len(ids) > self._max_text_ids:
                raise ParameterError(f"a sentence of {len(ids)} text tokens does not fit T3's {self._max_text_ids} "
                                     f"text positions; shorten the sentence")
            extra = {"cfg_weight": p["cfg_weight"], "exaggeration": p["exaggeration"]}
        elif fixed + p["max_tokens"] > self._n_ctx:
            room = self._n_ctx - fixed
            if room < 1:
                raise ParameterError(f"a sentence of {len(ids)} text tokens does not fit T3's context of "
                                     f"{self._n_ctx} positions with this voice; shorten the sentence")
            raise ParameterError(f"max_tokens must be in [1, {room}] for this sentence and voice (T3's context "
                                 f"holds {self._n_ctx} positions: {fixed} for the voice and text); got "
                                 f"{p['max_tokens']}")
        with self._cache_lock:
            cache = self._idle_caches.pop() if self._idle_caches else None
        with self._t3_lock, cancel.armed(self._t3):  # Stop reaches the prompt's graph too
            if cache is None:
                cache = _core.T3Cache(self._t3)
            t3 = self._t3.stream(ids, p["max_tokens"], seed, temperature=p["temperature"], top_k=p["top_k"],
                                 top_p=p["top_p"], repetition_penalty=p["repetition_penalty"], min_p=p["min_p"],
                                 speaker_emb=voice.speaker_emb, prompt_tokens=voice.cond_prompt_speech_tokens,
                                 cache=cache, **extra)
        cancel.watch(t3)
        return t3, cache

    def _cancellable_session(self, ids, seed, p, voice, cancel):
        """_t3_session, or (None, None) when Stop aborted its prompt computation."""
        try:
            return self._t3_session(ids, seed, p, voice, cancel)
        except Cancelled:
            if cancel.is_set():
                return None, None
            raise

    @contextmanager
    def _s3gen_compute(self, cancel):
        """S3Gen / HiFT's turn, Stop armed; while a stream's T3 worker runs, with the threads
        it leaves free."""
        with self._lock, cancel.armed(self._file):
            beside = self._t3_workers > 0
            if beside:
                self._file.set_threads(self._s3gen_beside_threads)
            try:
                yield
            finally:
                if beside:
                    self._file.set_threads(self._n_threads)

    def _end_session(self, t3, cache, cancel) -> None:
        cancel.watch(None)
        t3.close()
        with self._cache_lock:
            if len(self._idle_caches) < _IDLE_T3_CACHES:
                self._idle_caches.append(cache)

    def _early_stop(self, tokens, n_text: int, done: bool) -> bool:
        speech = sum(1 for t in tokens if t < self._speech_codes)
        ratio = _MIN_SPEECH_PER_TEXT_TOKEN_MTL if self._mtl else _MIN_SPEECH_PER_TEXT_TOKEN
        return done and speech < max(4, ratio * n_text)

    def _speech_tokens(self, tokens, final: bool) -> list[int]:
        speech = [t for t in tokens if t < self._speech_codes]
        return speech + self._silence if final else speech

    def _s3gen_prompt(self, voice: Voice, seconds: float | None) -> tuple[np.ndarray, np.ndarray]:
        """The voice's S3Gen prompt, or only its last `seconds` (token_rate tokens, token_rate x
        token_mel_ratio mel frames a second). A shorter prompt makes every S3Gen pass cheaper
        (the encoder and the CFM attend over prompt + speech) at some cost in likeness: the
        low-latency preset's trade."""
        tokens, feat = voice.prompt_token, voice.prompt_feat
        if seconds is None or seconds * self._token_rate >= tokens.size:
            return tokens, feat
        n = max(1, int(round(seconds * self._token_rate)))
        return tokens[-n:], np.ascontiguousarray(feat[feat.shape[0] - self._token_mel_ratio * n:])

    def _mel(self, speech: list[int], voice: Voice, seed: int, final: bool, p: dict, start: int = 0,
             cached_prompt: bool = False) -> np.ndarray:
        """S3Gen's flow: [80, frames] for the speech tokens (prompt frames removed). `start` > 0
        leaves the tokens before it out of the pass (a stream's bounded left context): the
        result then begins at speech frame token_mel_ratio x start, and every frame keeps the
        noise it has in the whole pass. cached_prompt (a stream's passes, where
        _prefix_usable): the encoder and the CFM compute only the speech frames, against the
        voice prompt's cached keys and values (_stream_prefix)."""
        prompt_token, prompt_feat = self._s3gen_prompt(voice, p["prompt_seconds"])
        P, skip = prompt_feat.shape[0], self._token_mel_ratio * start
        rng = np.random.Generator(np.random.PCG64(seed))
        prefix = self._stream_prefix(prompt_token, prompt_feat, voice, p) if cached_prompt else None
        if prefix is not None:
            enc, cfm = prefix
            mu = self._encoder.encode_after_prefix(enc, np.asarray(speech[start:], np.int32)) if speech[start:] else None
            n = 0 if mu is None else mu.shape[1] - (0 if final else self._lookahead_frames)
            if n <= 0:
                return np.zeros((prompt_feat.shape[1], 0), np.float32)
            x0 = rng.standard_normal((P + skip + n, mu.shape[0]), dtype=np.float32).T  # frame by frame, as below
            return self._cfm.sample_after_prefix(cfm, np.ascontiguousarray(mu[:, :n]),
                                                 np.ascontiguousarray(x0[:, P + skip:]))
        mu = self._encoder.encode(np.concatenate([prompt_token, np.asarray(speech[start:], np.int32)]).tolist())
        if not final:  # flow.inference(finalize=False) drops the lookahead frames
            mu = mu[:, : mu.shape[1] - self._lookahead_frames]
        if mu.shape[1] <= P:
            return np.zeros((mu.shape[0], 0), np.float32)
        x0 = rng.standard_normal((mu.shape[1] + skip, mu.shape[0]), dtype=np.float32).T  # frame by frame: prefix-stable
        if skip:  # the prompt's noise, then the window's frames' own
            x0 = np.concatenate([x0[:, :P], x0[:, P + skip:]], axis=1)
        return self._cfm.sample(np.ascontiguousarray(mu), prompt_feat, voice.embedding,
                                np.ascontiguousarray(x0), n_steps=p["cfm_steps"])

    def _prefix_usable(self, p: dict) -> bool:
        """Whether a stream's passes can take the voice prompt as a cached prefix: a
        meanflow CFM at a step count whose per-step keys and values are kept, on the CPU
        (where a pass over the whole prompt is what a stream waits for; on a GPU it is a few
        milliseconds, and the prefix's graphs have not been run on one)."""
        steps = p["cfm_steps"] or self._cfm.n_timesteps
        return self.device == "cpu" and not self._cfm.guided and steps <= self._cfm.prefix_max_steps

    def _stream_prefix(self, prompt_token, prompt_feat, voice: Voice, p: dict):
        """The encoder's and the CFM's cached prefixes for this voice prompt and step count
        (made where not cached): the prompt encoded alone (its mu then depends on nothing a
        sentence says) and its CFM trajectory from its own noise (_PROMPT_NOISE_SEED: it
        depends on no sentence's seed). The last _STREAM_PREFIXES are kept, for the next
        stream with them. Called with the engine's lock held (as every S3Gen pass is). None where the prompt's frames are not token_mel_ratio per token (the
        passes then run in full)."""
        if self._token_mel_ratio * prompt_token.size != prompt_feat.shape[0]:
            return None
        digest = hashlib.blake2b(digest_size=16)
        for a in (prompt_token, prompt_feat, voice.embedding):
            digest.update(np.ascontiguousarray(a).tobytes())
        key = (digest.digest(), p["cfm_steps"] or self._cfm.n_timesteps)
        prefix = self._prefixes.pop(key, None)
        if prefix is None:
            enc = self._encoder.make_prefix(prompt_token)
            rng = np.random.Generator(np.random.PCG64(_PROMPT_NOISE_SEED))
            x0 = rng.standard_normal((enc.mu.shape[1], enc.mu.shape[0]), dtype=np.float32).T
            prefix = enc, self._cfm.make_prefix(enc.mu, prompt_feat, voice.embedding, np.ascontiguousarray(x0),
                                                n_steps=key[1])
        self._prefixes[key] = prefix  # the most recent last
        while len(self._prefixes) > _STREAM_PREFIXES:
            self._prefixes.pop(next(iter(self._prefixes)))
        return prefix

    def release_stream_prefixes(self) -> int:
        """Frees the cached stream prefixes (_stream_prefix); returns the CFM's bytes freed."""
        with self._lock:
            freed = sum(cfm.bytes for _, cfm in self._prefixes.values())
            self._prefixes.clear()
            return freed

    def _stream_pass(self, tokens, final, vocoder, voice, seed, p, context=None):
        """One streamed chunk's S3Gen + HiFT: (new samples, s3gen ms, hift ms). A bounded left
        context: the pass starts `context` (default _STREAM_CONTEXT_TOKENS) tokens before the
        vocoder's own context, so its cost stays flat as the sentence grows."""
        context = _STREAM_CONTEXT_TOKENS if context is None else context
        start = 0 if context < 0 else max(0, (vocoder.emitted - _HIFT_CONTEXT) // self._token_mel_ratio - context)
        t0 = time.perf_counter()
        mel = self._mel(self._speech_tokens(tokens, final), voice, seed, final, p, start,
                        _STREAM_CACHED_PROMPT and self._prefix_usable(p))
        s3gen_ms = (time.perf_counter() - t0) * 1e3
        wav, hift_ms = vocoder.push(mel, final, self._token_mel_ratio * start)
        return wav, s3gen_ms, hift_ms

    def _fade_in(self, wav: np.ndarray) -> np.ndarray:
        """S3Gen's trim fade: `trim` samples of silence, then a raised-cosine fade-in."""
        ramp = ((np.cos(np.linspace(np.pi, 0, self._trim)) + 1) / 2).astype(np.float32)
        fade = np.concatenate([np.zeros(self._trim, np.float32), ramp])[: wav.size]
        wav = wav.copy()
        wav[: fade.size] *= fade
        return wav

    def synthesize(self, text: str, voice: Voice | None = None, *, seed: int | None = None,
                   language: str | None = None, **options) -> np.ndarray:
        """The whole text as one float32 array at `sample_rate` (sentence by sentence).
        Multilingual models also take `language` (a code of `languages`; None: detected from
        the text, the guess logged), `exaggeration` and `cfg_weight`; Turbo and Nano refuse
        those three unless None (ParameterError)."""
        voice, seed, p = self._request(text, voice, seed, options, language)
        chunks = [c.samples for c in self._chunks(text, voice, seed, p, False, 0, 0, _CancelToken())]
        return np.concatenate(chunks)

    def stream(self, text: str, voice: Voice | None = None, *, first_chunk_tokens: int = 10, chunk_tokens: int = 25,
               seed: int | None = None, language: str | None = None, **options) -> Stream:
        """A Stream of Chunks; returns at once (the text is split as the stream runs). The
        options are synthesize's. A sentence's first chunk holds first_chunk_tokens speech
        tokens, each later one chunk_tokens or half the sentence's tokens so far when that is
        more (_CHUNK_GROWTH)."""
        first = schema.check("first_chunk_tokens", first_chunk_tokens)
        every = schema.check("chunk_tokens", chunk_tokens)
        # Validate everything now, so a bad request fails here and not at the first next().
        voice, seed, p = self._request(text, voice, seed, options, language)
        return Stream(lambda cancel: self._chunks(text, voice, seed, p, True, first, every, cancel))

    def speech_tokens(self, text: str, voice: Voice | None = None, *, seed: int | None = None,
                      language: str | None = None, **options) -> list[list[int]]:
        """T3's speech tokens for each sentence of `text`, as `synthesize` samples them at the
        first attempt (stop token and T3's other specials kept): what S3Gen would speak."""
        voice, seed, p = self._request(text, voice, seed, options, language)
        out = []
        cancel = _CancelToken()
        for si, sentence in enumerate(self._sentences(text, cancel, p["language"])):
            t3, cache = self._t3_session(self._text_ids(sentence.text, p["language"]), seed + si, p, voice, cancel)
            try:
                with self._t3_lock:
                    out.append(list(t3.next(p["max_tokens"])))
            finally:
                self._end_session(t3, cache, cancel)
        return out

    def _request(self, text, voice, seed, options, language=None):
        self._check_text(text)
        seed, p = self._options(seed, options)
        p["language"] = self._language(language, text)
        return self._usable_voice(voice), seed, p

    def _usable_voice(self, voice: Voice | None) -> Voice:
        voice = self.builtin_voice if voice is None else voice
        if isinstance(voice, Voice) and voice.variant != self.variant:
            voice = self.adapt_voice(voice)  # re-made from its kept recording, else refused
        self.check_voice(voice)
        return voice

    def prepare_stream(self, voice: Voice | None = None, *, first_chunk_tokens: int | None = None,
                       chunk_tokens: int | None = None, **options) -> Stream:
        """Readies `voice`'s cached stream prefix (_STREAM_CACHED_PROMPT) for these options (a
        preset's cfm_steps and prompt_seconds matter) ahead of a stream, so that its first
        chunk comes as soon as a later stream's: the app calls it when a voice is chosen. A
        Stream that yields no chunk: iterate it to run, cancel() to stop. Nothing to do where
        streams cannot cache the prompt (a guided CFM)."""
        _, p = self._options(0, {k: v for k, v in options.items() if k not in ("seed", "language")})
        voice = self._usable_voice(voice)
        return Stream(lambda cancel: self._prepare(voice, p, cancel))

    def _prepare(self, voice: Voice, p: dict, cancel):
        if _STREAM_CACHED_PROMPT and self._prefix_usable(p) and not cancel.is_set():
            prompt_token, prompt_feat = self._s3gen_prompt(voice, p["prompt_seconds"])
            with self._s3gen_compute(cancel):
                try:
                    self._stream_prefix(prompt_token, prompt_feat, voice, p)
                except Cancelled:
                    if not cancel.is_set():
                        raise
        yield from ()

    def _chunks(self, text, voice, seed, p, streaming, first_tokens, chunk_tokens, cancel):
        sentences = self._sentences(text, cancel, p["language"])
        if sentences is None:
            return
        index = 0
        for si, sentence in enumerate(sentences):
            s_seed = seed + si
            ids = self._text_ids(sentence.text, p["language"])
            for chunk in (self._sentence_stream if streaming else self._sentence_whole)(
                    ids, voice, s_seed, p, cancel, first_tokens, chunk_tokens):
                wav, final, timings = chunk
                if cancel.is_set():
                    return
                timings["seed"] = s_seed
                yield Chunk(samples=wav, sample_rate=self.sample_rate, index=index,
                            is_last=final and si == len(sentences) - 1, text=sentence.text,
                            span=(sentence.start, sentence.end), sentence_index=si, n_sentences=len(sentences),
                            timings=timings)
                index += 1
            if cancel.is_set():  # cancelled inside the sentence's computation: no later sentence
                return

    def _sentence_whole(self, ids, voice, seed, p, cancel, *_):
        """One sentence: T3 to the end (early stops retried, the longest kept), then S3Gen once."""
        timings = {}
        t0 = time.perf_counter()
        vocoder = _StreamVocoder(self._hift, seed)  # made first: its noise is drawn while T3 runs
        best = None
        for attempt in range(_MAX_ATTEMPTS):
            t3, cache = self._cancellable_session(ids, seed + attempt * 1_000_003, p, voice, cancel)
            if t3 is None:
                return
            try:
                with self._t3_lock:
                    tokens = t3.next(p["max_tokens"])
            finally:
                self._end_session(t3, cache, cancel)
            if best is None or len(tokens) > len(best):
                best = tokens
            if not self._early_stop(tokens, len(ids), True) or cancel.is_set():
                break
        if cancel.is_set():
            return
        timings["t3_ms"] = (time.perf_counter() - t0) * 1e3
        timings["attempts"] = attempt + 1
        speech = self._speech_tokens(best, final=True)
        self._hift.source_expect(vocoder.state, self._token_mel_ratio * len(speech))  # while S3Gen runs
        with self._s3gen_compute(cancel):
            # A batch pass is S3Gen's largest (its compute buffers): no stream prefix is held
            # beside it (the app streams; its voice is readied again when chosen).
            self._prefixes.clear()
            t0 = time.perf_counter()
            try:
                mel = self._mel(speech, voice, seed, True, p)
                timings["s3gen_ms"] = (time.perf_counter() - t0) * 1e3
                wav, timings["hift_ms"] = vocoder.push(mel, final=True)
            except Cancelled:
                if cancel.is_set():
                    return
                raise
        timings["speech_tokens"] = len(speech)
        timings["audio_s"] = wav.size / self.sample_rate
        yield self._fade_in(wav), True, timings

    def _sentence_stream(self, ids, voice, seed, p, cancel, first_tokens, chunk_tokens):
        """One sentence in chunks: S3Gen on each growing token prefix (a bounded window), new
        frames vocoded. From the first chunk out on, a _TokenWorker samples the next tokens
        while the passes run."""
        attempt = 0
        t0 = time.perf_counter()
        t3, cache = self._cancellable_session(ids, seed, p, voice, cancel)
        if t3 is None:
            return
        prompt_ms = (time.perf_counter() - t0) * 1e3
        worker = None
        try:
            vocoder = _StreamVocoder(self._hift, seed)
            tokens: list[int] = []
            started = False
            while True:
                if cancel.is_set():
                    return
                t0 = time.perf_counter()
                want = first_tokens if not (started or tokens) else max(chunk_tokens, int(_CHUNK_GROWTH * len(tokens)))
                if worker is None:
                    with self._t3_lock:
                        tokens += t3.next(want)
                    final = t3.done
                else:
                    tokens, final = worker.wait(len(tokens) + want, cancel)
                if cancel.is_set():
                    return
                if not started and self._early_stop(tokens, len(ids), t3.done) and attempt + 1 < _MAX_ATTEMPTS:
                    # Nothing has played yet: an early stop can still be retried, as synthesize() does.
                    attempt += 1
                    self._end_session(t3, cache, cancel)
                    t3 = None
                    t3, cache = self._cancellable_session(ids, seed + attempt * 1_000_003, p, voice, cancel)
                    if t3 is None:
                        return
                    tokens = []
                    continue
                t3_ms = (time.perf_counter() - t0) * 1e3 + prompt_ms
                prompt_ms = 0.0
                with self._s3gen_compute(cancel):
                    try:
                        wav, s3gen_ms, hift_ms = self._stream_pass(tokens, final, vocoder, voice, seed, p)
                    except Cancelled:  # Stop during S3Gen / HiFT: the stream ends quietly
                        if cancel.is_set():
                            return
                        raise
                if wav.size == 0 and not final:
                    continue
                if not started:
                    wav = self._fade_in(wav)
                    started = True
                if worker is None and not final and self._overlap:
                    worker = _TokenWorker(self, t3, tokens)  # samples on while this chunk plays
                yield wav, final, {"t3_ms": t3_ms, "s3gen_ms": s3gen_ms, "hift_ms": hift_ms,
                                   "attempts": attempt + 1, "speech_tokens": len(tokens),
                                   "audio_s": wav.size / self.sample_rate}
                if final:
                    return
        finally:
            if worker is not None:
                worker.stop()
            if t3 is not None:
                self._end_session(t3, cache, cancel)
