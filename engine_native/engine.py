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
on the growing token prefix (not final: the encoder's lookahead frames are dropped, as the
reference's `finalize=False` does) and vocodes only the frames not yet played. The HiFT
excitation is one continuous, seeded signal per sentence (cached across chunks), and the
vocoder gets `_HIFT_CONTEXT` mel frames of left context and holds `_HIFT_HOLDBACK` frames
back for the next chunk, so the seams carry no clicks; the trim-fade touches only a
sentence's first chunk. The CFM noise is drawn frame by frame, so a prefix sees the same
noise as the whole. What still differs from `synthesize` is the CFM's view of tokens not
yet sampled (its attention is bidirectional), which tests bound.

Concurrency: any number of threads may call one Engine. Native computations run with the
GIL released, one at a time, served in arrival order (a fair lock); every generation has
its own T3 session (its own KV cache, taken from a small pool so the voice's conditioning
prefix is reused), so concurrent streams interleave chunk by chunk and each caller gets its
whole result, never a truncated one. `Stream.cancel()` ends a stream: its consumer's loop
ends quietly, the T3 loop in flight stops at its next token and an S3Gen / HiFT computation
in flight at its next graph node (ggml's abort callback), so the engine is free at once.
"""

from __future__ import annotations

import os
import secrets
import threading
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine_native import _core
from engine_native.audio import norm_loudness, resample_sinc, resample_soxr, to_mono
from engine_native import options as schema
from engine_native.errors import (Cancelled, DeviceError, EmptyTextError, EngineError, IncompatibleVoiceError, ModelError,
                                  ParameterError, SilentAudioError, VoiceError, VoiceTooShortError)
from engine_native.speech import check_speech
from engine_native.text import MAX_TEXT_CHARS, Sentence, has_speech, iter_sentences, split_text
from engine_native.voice import Voice

# HiFT's receptive field is about 12 mel frames each way (measured: with 12 frames of
# context a cut decodes to within 5e-8 of the whole); the excitation is cached exactly,
# so 12 frames of left context make a seam inaudible. Holding back 4 frames (80 ms) of
# right context keeps the last emitted frame within ~2 % of its final value while
# adding little latency.
_HIFT_CONTEXT = 12
_HIFT_HOLDBACK = 4
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
_MAX_ATTEMPTS = 3

# Stream settings by what matters most. "quality" is the reference model exactly (only the
# chunking differs); "low-latency" starts speaking sooner: a small first chunk, one CFM
# step (meanflow models are trained to allow it; a little less detail) and the last 4 s
# of the voice's S3Gen prompt (cheaper S3Gen passes; a little less likeness).
PRESETS = {
    "quality": {},
    "low-latency": {"first_chunk_tokens": 10, "chunk_tokens": 25, "cfm_steps": 1, "prompt_seconds": 4.0},
}


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

    def push(self, mel: np.ndarray, final: bool) -> tuple[np.ndarray, float]:
        """mel: [n_mels, M] for every speech frame so far. Returns (new samples, ms)."""
        t0 = time.perf_counter()
        M = mel.shape[1]
        end = M if final else M - _HIFT_HOLDBACK
        if end <= self.emitted:
            return np.zeros(0, np.float32), 0.0
        start = max(0, self.emitted - _HIFT_CONTEXT)
        f0 = self.hift.f0(np.ascontiguousarray(mel[:, start:]))
        new = self.hift.excitation_continue(f0[self.emitted - start:end - start], self.state)
        ahead = self.hift.excitation_continue(f0[end - start:], self.state.copy()) if end < M else new[:0]
        context = self.source_tail[len(self.source_tail) - (self.emitted - start) * self.spf:]
        wav = self.hift.decode(np.ascontiguousarray(mel[:, start:]), np.concatenate([context, new, ahead]))
        out = wav[(self.emitted - start) * self.spf:(end - start) * self.spf]
        self.source_tail = np.concatenate([context, new])[-_HIFT_CONTEXT * self.spf:]
        self.emitted = end
        return out, (time.perf_counter() - t0) * 1e3


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
        self._n_ctx = f.get_int("chatterbox.t3.n_ctx")
        self._cond_prompt_len = f.get_int("chatterbox.t3.speech_cond_prompt_len")
        # The voice recipe's rates and lengths (prepare_conditionals): from the GGUF; files
        # converted before these keys existed get the Turbo/Nano reference values.
        self._token_rate = f.get_int("chatterbox.s3gen.token_rate")
        self._token_mel_ratio = f.get_int("chatterbox.s3gen.token_mel_ratio")
        self._tokenizer_rate = f.get_int("chatterbox.s3tok.sample_rate")
        self._s3gen_prompt_seconds = _get_or(f, "chatterbox.s3gen.prompt_seconds", 10)   # DEC_COND_LEN
        self._t3_prompt_seconds = _get_or(f, "chatterbox.t3.prompt_seconds", 15)         # ENC_COND_LEN
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
        self._idle_caches = []       # T3 KV caches of finished sessions, for reuse
        self._cache_lock = threading.Lock()
        self._cloner = None
        self.load_seconds = time.perf_counter() - t0

    def _load(self, device: str) -> None:
        self._file = _core.ModelFile(str(self.path), device=device, threads=self._threads)
        self._tokenizer = _core.Gpt2Tokenizer(str(self.path))
        self._t3 = _core.T3(self._file)
        self._encoder = _core.S3GenEncoder(self._file)
        self._cfm = _core.S3GenCfm(self._file)
        self._hift = _core.HiFT(self._file)  # on the model's device (a GPU: ggml ops; a device OOM: the CPU)
        self.device = self._file.device

    @property
    def token_rate(self) -> int:
        """Speech tokens per second of audio (from the GGUF)."""
        return self._token_rate

    # ---------------------------------------------------------------- information
    @property
    def info(self) -> dict:
        f = self._file
        hp = {k: f.get_int(f"chatterbox.t3.{k}") for k in ("n_layer", "n_embd", "n_head", "n_ctx", "text_vocab",
                                                            "speech_vocab", "speech_cond_prompt_len")}
        hp["cfm_steps"] = self._cfm.n_timesteps
        hp["meanflow"] = f.get_bool("chatterbox.s3gen.cfm.meanflow")
        system = _core.system_info()
        return {"path": str(self.path), "variant": self.variant, "quantization": f.get_string("chatterbox.quant"),
                "backend": self.device, "device": self.device, "device_note": self.device_note,
                "hift_device": "cpu" if self._hift.device == "CPU" else self.device, "cpu_variant": system["cpu_variant"],
                "threads": self._threads or system["default_threads"], "ggml_version": system["ggml_version"],
                "sample_rate": self.sample_rate, "hparams": hp, "defaults": dict(self.defaults),
                "load_seconds": self.load_seconds}

    @staticmethod
    def split_text(text: str) -> list[Sentence]:
        return split_text(text)

    # ---------------------------------------------------------------- text and likeness (engine_native.script)
    @property
    def expression_tags(self) -> list[str]:
        """The paralinguistic tags this model's tokenizer holds ("[laugh]", ...; see engine_native.tags)."""
        if getattr(self, "_expression_tags", None) is None:
            from engine_native.tags import read_expression_tags

            self._expression_tags = read_expression_tags(self._file, self._tokenizer)
        return list(self._expression_tags)

    def text_tokens(self, text: str) -> list[int]:
        """T3's text token ids for one sentence, as synthesis makes them (punc_norm, then the tokenizer)."""
        if not isinstance(text, str) or not text.strip():
            raise EmptyTextError("there is nothing to tokenize: the text is empty")
        return self._text_ids(text)

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
        voice_from_audio makes a voice's speaker_emb: 24 kHz, loudness to -27 LUFS, 16 kHz."""
        mono, sr = self._audio(samples, sample_rate)
        with self._lock:
            ve = self._voice_encoders()["ve"]
            wav24 = norm_loudness(resample_soxr(mono, sr, self.sample_rate), self.sample_rate)
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
                f"{self.variant}. Clone the voice again with this model.")
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
        if self._cloner is None:
            missing = [c for c in ("Mel24k", "VoiceEncoder", "CampPlus", "S3Tokenizer") if not hasattr(_core, c)]
            if missing:
                raise EngineError(f"this build of the engine lacks {', '.join(missing)}; voice cloning is unavailable")
            self._cloner = {"mel": _core.Mel24k(self._file), "ve": _core.VoiceEncoder(self._file),
                            "campplus": _core.CampPlus(self._file), "s3tok": _core.S3Tokenizer(self._file)}
        return self._cloner

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
        if duration <= MIN_VOICE_SECONDS:
            raise VoiceTooShortError(f"the recording is {duration:.1f} s long; cloning needs more than "
                                     f"{MIN_VOICE_SECONDS:.0f} s of audio (10 s or more is best)")
        if not np.any(np.abs(mono) > 1e-6):
            raise SilentAudioError("the recording is silent: there is no signal to clone")
        # The Voice Lab's speech detection, before loudness normalisation lifts noise to speech level.
        check_speech(mono, sr, MIN_SPEECH_SECONDS)
        with self._lock:
            enc = self._voice_encoders()
            t0 = time.perf_counter()
            wav24 = resample_soxr(mono, sr, S3GEN_SR)            # librosa.load(path, sr=24000)
            wav24 = norm_loudness(wav24, S3GEN_SR)                # to -27 LUFS
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
                                         np.int32)                 # ENC_COND_LEN, capped to the prompt length
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

    # ---------------------------------------------------------------- synthesis
    def _options(self, seed, opts: dict) -> tuple[int, dict]:
        unknown = set(opts) - set(self.defaults)
        if unknown:
            raise ParameterError(f"unknown option(s): {', '.join(sorted(map(str, unknown)))}; the options are "
                                 f"{', '.join(sorted(self.defaults))}")
        p = {**self.defaults, **{k: v for k, v in opts.items() if v is not None}}
        for name in p:
            if name == "max_tokens":
                # T3's context holds the voice's prompt, the text (up to 300 tokens) and the speech.
                p[name] = schema.check(name, p[name], upper=self._n_ctx - self._cond_prompt_len - 1 - 300)
            elif p[name] is not None:
                p[name] = schema.check(name, p[name])
        seed = secrets.randbelow(2**31) if seed is None else schema.check("seed", seed)
        return seed, p

    def _sentences(self, text, cancel) -> list[Sentence] | None:
        """The text's sentences (None when cancelled while splitting: a huge paste can be stopped)."""
        out = []
        for i, s in enumerate(iter_sentences(text)):
            out.append(s)
            if i % 1024 == 1023 and cancel.is_set():
                return None
        return out

    @staticmethod
    def _check_text(text) -> None:
        if not isinstance(text, str):
            raise EmptyTextError(f"text must be a string; got {type(text).__name__}")
        if len(text) > MAX_TEXT_CHARS:
            raise ParameterError(f"the text is {len(text):,} characters long; one call takes at most "
                                 f"{MAX_TEXT_CHARS:,} (split it into parts)")
        if not has_speech(text):
            raise EmptyTextError("there is nothing to say: the text is empty or only punctuation")

    def _text_ids(self, sentence: str) -> list[int]:
        return self._tokenizer.encode(_core.punc_norm(sentence)).astype(np.int32).tolist()

    def _t3_session(self, ids, seed, p, voice, cancel):
        """A T3 token stream with a KV cache of its own (a pooled one when free)."""
        # T3's context holds [speaker, voice prompt, text, start-of-speech, speech]; say which
        # part does not fit instead of letting the cache refuse it.
        fixed = 1 + voice.cond_prompt_speech_tokens.size + len(ids) + 1
        if fixed + p["max_tokens"] > self._n_ctx:
            room = self._n_ctx - fixed
            if room < 1:
                raise ParameterError(f"a sentence of {len(ids)} text tokens does not fit T3's context of "
                                     f"{self._n_ctx} positions with this voice; shorten the sentence")
            raise ParameterError(f"max_tokens must be in [1, {room}] for this sentence and voice (T3's context "
                                 f"holds {self._n_ctx} positions: {fixed} for the voice and text); got "
                                 f"{p['max_tokens']}")
        with self._cache_lock:
            cache = self._idle_caches.pop() if self._idle_caches else None
        with self._lock:
            if cache is None:
                cache = _core.T3Cache(self._t3)
            t3 = self._t3.stream(ids, p["max_tokens"], seed, temperature=p["temperature"], top_k=p["top_k"],
                                 top_p=p["top_p"], repetition_penalty=p["repetition_penalty"], min_p=p["min_p"],
                                 speaker_emb=voice.speaker_emb, prompt_tokens=voice.cond_prompt_speech_tokens,
                                 cache=cache)
        cancel.watch(t3)
        return t3, cache

    def _end_session(self, t3, cache, cancel) -> None:
        cancel.watch(None)
        t3.close()
        with self._cache_lock:
            if len(self._idle_caches) < _IDLE_T3_CACHES:
                self._idle_caches.append(cache)

    def _early_stop(self, tokens, n_text: int, done: bool) -> bool:
        speech = sum(1 for t in tokens if t < self._speech_codes)
        return done and speech < max(4, _MIN_SPEECH_PER_TEXT_TOKEN * n_text)

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

    def _mel(self, speech: list[int], voice: Voice, seed: int, final: bool, p: dict) -> np.ndarray:
        """S3Gen's flow: [80, frames] for the speech tokens (prompt frames removed)."""
        prompt_token, prompt_feat = self._s3gen_prompt(voice, p["prompt_seconds"])
        mu = self._encoder.encode(np.concatenate([prompt_token, np.asarray(speech, np.int32)]).tolist())
        if not final:  # flow.inference(finalize=False) drops the lookahead frames
            mu = mu[:, : mu.shape[1] - self._lookahead_frames]
        if mu.shape[1] <= prompt_feat.shape[0]:
            return np.zeros((mu.shape[0], 0), np.float32)
        rng = np.random.Generator(np.random.PCG64(seed))
        x0 = rng.standard_normal((mu.shape[1], mu.shape[0]), dtype=np.float32).T  # frame by frame: prefix-stable
        return self._cfm.sample(np.ascontiguousarray(mu), prompt_feat, voice.embedding,
                                np.ascontiguousarray(x0), n_steps=p["cfm_steps"])

    def _fade_in(self, wav: np.ndarray) -> np.ndarray:
        """S3Gen's trim fade: `trim` samples of silence, then a raised-cosine fade-in."""
        ramp = ((np.cos(np.linspace(np.pi, 0, self._trim)) + 1) / 2).astype(np.float32)
        fade = np.concatenate([np.zeros(self._trim, np.float32), ramp])[: wav.size]
        wav = wav.copy()
        wav[: fade.size] *= fade
        return wav

    def synthesize(self, text: str, voice: Voice | None = None, *, seed: int | None = None, **options) -> np.ndarray:
        """The whole text as one float32 array at `sample_rate` (sentence by sentence)."""
        voice, seed, p = self._request(text, voice, seed, options)
        chunks = [c.samples for c in self._chunks(text, voice, seed, p, False, 0, 0, _CancelToken())]
        return np.concatenate(chunks)

    def stream(self, text: str, voice: Voice | None = None, *, first_chunk_tokens: int = 10, chunk_tokens: int = 25,
               seed: int | None = None, **options) -> Stream:
        """A Stream of Chunks; returns at once (the text is split as the stream runs)."""
        first = schema.check("first_chunk_tokens", first_chunk_tokens)
        every = schema.check("chunk_tokens", chunk_tokens)
        # Validate everything now, so a bad request fails here and not at the first next().
        voice, seed, p = self._request(text, voice, seed, options)
        return Stream(lambda cancel: self._chunks(text, voice, seed, p, True, first, every, cancel))

    def _request(self, text, voice, seed, options):
        self._check_text(text)
        voice = self.builtin_voice if voice is None else voice
        self.check_voice(voice)
        seed, p = self._options(seed, options)
        return voice, seed, p

    def _chunks(self, text, voice, seed, p, streaming, first_tokens, chunk_tokens, cancel):
        sentences = self._sentences(text, cancel)
        if sentences is None:
            return
        index = 0
        for si, sentence in enumerate(sentences):
            s_seed = seed + si
            ids = self._text_ids(sentence.text)
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
        best = None
        for attempt in range(_MAX_ATTEMPTS):
            t3, cache = self._t3_session(ids, seed + attempt * 1_000_003, p, voice, cancel)
            try:
                with self._lock:
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
        with self._lock, cancel.armed(self._file):
            t0 = time.perf_counter()
            try:
                mel = self._mel(speech, voice, seed, True, p)
                timings["s3gen_ms"] = (time.perf_counter() - t0) * 1e3
                wav, timings["hift_ms"] = _StreamVocoder(self._hift, seed).push(mel, final=True)
            except Cancelled:
                if cancel.is_set():
                    return
                raise
        timings["speech_tokens"] = len(speech)
        timings["audio_s"] = wav.size / self.sample_rate
        yield self._fade_in(wav), True, timings

    def _sentence_stream(self, ids, voice, seed, p, cancel, first_tokens, chunk_tokens):
        """One sentence in chunks: S3Gen on each growing token prefix, new frames vocoded."""
        attempt = 0
        t0 = time.perf_counter()
        t3, cache = self._t3_session(ids, seed, p, voice, cancel)
        prompt_ms = (time.perf_counter() - t0) * 1e3
        try:
            vocoder = _StreamVocoder(self._hift, seed)
            tokens: list[int] = []
            started = False
            while True:
                if cancel.is_set():
                    return
                with self._lock:
                    t0 = time.perf_counter()
                    tokens += t3.next(chunk_tokens if started or tokens else first_tokens)
                if cancel.is_set():
                    return
                if not started and self._early_stop(tokens, len(ids), t3.done) and attempt + 1 < _MAX_ATTEMPTS:
                    # Nothing has played yet: an early stop can still be retried, as synthesize() does.
                    attempt += 1
                    self._end_session(t3, cache, cancel)
                    t3 = None
                    t3, cache = self._t3_session(ids, seed + attempt * 1_000_003, p, voice, cancel)
                    tokens = []
                    continue
                t3_ms = (time.perf_counter() - t0) * 1e3 + prompt_ms
                prompt_ms = 0.0
                final = t3.done
                with self._lock, cancel.armed(self._file):
                    t0 = time.perf_counter()
                    try:
                        mel = self._mel(self._speech_tokens(tokens, final), voice, seed, final, p)
                        s3gen_ms = (time.perf_counter() - t0) * 1e3
                        wav, hift_ms = vocoder.push(mel, final)
                    except Cancelled:  # Stop during S3Gen / HiFT: the stream ends quietly
                        if cancel.is_set():
                            return
                        raise
                if wav.size == 0 and not final:
                    continue
                if not started:
                    wav = self._fade_in(wav)
                    started = True
                yield wav, final, {"t3_ms": t3_ms, "s3gen_ms": s3gen_ms, "hift_ms": hift_ms,
                                   "attempts": attempt + 1, "speech_tokens": len(tokens),
                                   "audio_s": wav.size / self.sample_rate}
                if final:
                    return
        finally:
            if t3 is not None:
                self._end_session(t3, cache, cancel)
