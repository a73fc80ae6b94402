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

Streaming (seed journal B1): T3 hands tokens on as it samples them; each chunk runs S3Gen
on the growing token prefix (not final: the encoder's lookahead frames are dropped, as the
reference's `finalize=False` does) and vocodes only the frames not yet played. The HiFT
excitation is one continuous, seeded signal per sentence (cached across chunks), and the
vocoder gets `_HIFT_CONTEXT` mel frames of left context and holds `_HIFT_HOLDBACK` frames
back for the next chunk, so the seams carry no clicks; the trim-fade touches only a
sentence's first chunk. The CFM noise is drawn frame by frame, so a prefix sees the same
noise as the whole. What still differs from `synthesize` is the CFM's view of tokens not
yet sampled (its attention is bidirectional), which tests bound.

Compute runs with the GIL released; one Engine serves one computation at a time (a lock
enforces it), and starting a new generation ends any unfinished stream at its next chunk.
"""

from __future__ import annotations

import itertools
import os
import secrets
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine_native import _core
from engine_native.audio import norm_loudness, resample_sinc, resample_soxr, to_mono
from engine_native.errors import (EmptyTextError, EngineError, IncompatibleVoiceError, ModelError, ParameterError,
                                  SilentAudioError, VoiceError, VoiceTooShortError)
from engine_native.text import Sentence, split_text
from engine_native.voice import Voice

# HiFT's receptive field is about 12 mel frames each way (measured: with 12 frames of
# context a cut decodes to within 5e-8 of the whole); the excitation is cached exactly,
# so 12 frames of left context make a seam inaudible. Holding back 4 frames (80 ms) of
# right context keeps the last emitted frame within ~2 % of its final value while
# adding little latency.
_HIFT_CONTEXT = 12
_HIFT_HOLDBACK = 4
# The reference's minimum recording length (prepare_conditionals asserts > 5 s).
MIN_VOICE_SECONDS = 5.0
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


def _check_range(name: str, value, lo, hi, *, integer: bool = False, lo_open: bool = False):
    try:
        v = int(value) if integer else float(value)
    except (TypeError, ValueError):
        raise ParameterError(f"{name} must be a number; got {value!r}") from None
    if integer and v != value:
        raise ParameterError(f"{name} must be a whole number; got {value!r}")
    if not np.isfinite(v) or v < lo or v > hi or (lo_open and v == lo):
        raise ParameterError(f"{name} must be in {'(' if lo_open else '['}{lo}, {hi}]; got {value!r}")
    return v


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
        self._cancel = threading.Event()
        self._gen = gen_factory(self._cancel)

    def __iter__(self):
        return self

    def __next__(self) -> Chunk:
        if self._cancel.is_set():
            self._gen.close()
            raise StopIteration
        return next(self._gen)

    def cancel(self) -> None:
        """Stop: the iterator ends before its next chunk (the running one finishes first)."""
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


class Engine:
    def __init__(self, model_path: str | os.PathLike, *, backend: str = "cpu", threads: int | None = None):
        t0 = time.perf_counter()
        self.path = Path(model_path)
        if not self.path.is_file():
            raise ModelError(f"model file not found: {self.path}")
        if threads is not None:
            _check_range("threads", threads, 1, 512, integer=True)
        try:
            self._threads = int(threads or 0)  # 0: one per core
            self._file = _core.ModelFile(str(self.path), backend=backend, threads=self._threads)
            self._tokenizer = _core.Gpt2Tokenizer(str(self.path))
            self._t3 = _core.T3(self._file)
            self._encoder = _core.S3GenEncoder(self._file)
            self._cfm = _core.S3GenCfm(self._file)
            self._hift = _core.HiFT(self._file)
        except EngineError as e:
            raise ModelError(str(e)) from None
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
            variant=self.variant, meta={"name": "Built-in", "builtin": True})
        self._lock = threading.RLock()
        self._generation = itertools.count(1)
        self._owner = 0              # the generation that may drive T3 now
        self._cloner = None
        self.load_seconds = time.perf_counter() - t0

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
                "backend": "cpu", "threads": self._threads or system["default_threads"], "ggml_version": system["ggml_version"],
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

    def speaker_embedding(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        """The VoiceEncoder's speaker embedding (L2-normalised) of any audio, made the way
        voice_from_audio makes a voice's speaker_emb: 24 kHz, loudness to -27 LUFS, 16 kHz."""
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)) \
                or not 1000 <= sample_rate <= 768000:
            raise ParameterError(f"sample_rate must be a whole number in [1000, 768000]; got {sample_rate!r}")
        sr = int(sample_rate)
        try:
            mono = to_mono(samples)
        except ValueError as e:
            raise VoiceError(str(e)) from None
        if mono.size == 0 or not np.all(np.isfinite(mono)):
            raise VoiceError("the audio is empty or holds invalid samples")
        with self._lock:
            ve = self._voice_encoders()["ve"]
            wav24 = norm_loudness(resample_soxr(mono, sr, self.sample_rate), self.sample_rate)
            ref16 = resample_soxr(wav24, self.sample_rate, getattr(self, "_tokenizer_rate", 16000))
            return np.asarray(ve.embed(ref16, threads=self._threads), np.float32).reshape(-1)

    # ---------------------------------------------------------------- voices
    def check_voice(self, voice: Voice) -> None:
        if not isinstance(voice, Voice):
            raise VoiceError(f"voice must be an engine_native.Voice; got {type(voice).__name__}")
        if voice.variant != self.variant:
            raise IncompatibleVoiceError(
                f"voice '{voice.name}' was made with a Chatterbox {voice.variant or 'unknown'} model; this model is "
                f"{self.variant}. Clone the voice again with this model.")
        f = self._file
        expect = {"speaker_emb": f.get_int("chatterbox.t3.speaker_embed_size"),
                  "embedding": self._file.tensor_info("voice.embedding")[1][0]}
        for name, n in expect.items():
            if getattr(voice, name).size != n:
                raise IncompatibleVoiceError(f"voice '{voice.name}': {name} has {getattr(voice, name).size} values; "
                                             f"this model needs {n}")
        if voice.prompt_feat.ndim != 2 or voice.prompt_feat.shape[1] != self._hift.in_channels:
            raise IncompatibleVoiceError(f"voice '{voice.name}': prompt_feat must be [frames, {self._hift.in_channels}]")
        for name in ("cond_prompt_speech_tokens", "prompt_token"):
            t = getattr(voice, name)
            if t.size and (t.min() < 0 or t.max() >= self._speech_codes):
                raise IncompatibleVoiceError(f"voice '{voice.name}': {name} holds ids outside this model's codebook")

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
        sr = _check_range("sample_rate", sample_rate, 1000, 768000, integer=True)
        try:
            mono = to_mono(samples)
        except ValueError as e:
            raise VoiceError(str(e)) from None
        if not np.all(np.isfinite(mono)):
            raise VoiceError("the recording contains invalid samples (NaN or infinity)")
        S3GEN_SR, S3_SR = self.sample_rate, 16000
        duration = mono.size / sr
        if duration <= MIN_VOICE_SECONDS:
            raise VoiceTooShortError(f"the recording is {duration:.1f} s long; cloning needs more than "
                                     f"{MIN_VOICE_SECONDS:.0f} s of audio (10 s or more is best)")
        if not np.any(np.abs(mono) > 1e-6):
            raise SilentAudioError("the recording is silent: there is no signal to clone")
        with self._lock:
            enc = self._voice_encoders()
            t0 = time.perf_counter()
            wav24 = resample_soxr(mono, sr, S3GEN_SR)            # librosa.load(path, sr=24000)
            wav24 = norm_loudness(wav24, S3GEN_SR)                # to -27 LUFS
            ref16 = resample_soxr(wav24, S3GEN_SR, S3_SR)         # librosa.resample -> T3 and the VoiceEncoder
            dec = wav24[: 10 * S3GEN_SR]                           # DEC_COND_LEN
            dec16 = resample_sinc(dec, S3GEN_SR, S3_SR)           # embed_ref's torchaudio Resample
            try:
                prompt_feat = np.asarray(enc["mel"].compute(dec), np.float32)
                embedding = np.asarray(enc["campplus"].embed(dec16), np.float32)
                prompt_token = np.asarray(enc["s3tok"].tokens(dec16), np.int32)
                if prompt_feat.shape[0] != 2 * prompt_token.size:
                    prompt_token = prompt_token[: prompt_feat.shape[0] // 2]
                cond_tokens = np.asarray(enc["s3tok"].tokens(ref16[: 15 * S3_SR], max_len=self._cond_prompt_len),
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
            raise ParameterError(f"unknown option(s): {', '.join(sorted(unknown))}")
        p = {**self.defaults, **{k: v for k, v in opts.items() if v is not None}}
        p["temperature"] = _check_range("temperature", p["temperature"], 0.0, 5.0, lo_open=True)
        p["top_k"] = _check_range("top_k", p["top_k"], 1, 100000, integer=True)
        p["top_p"] = _check_range("top_p", p["top_p"], 0.0, 1.0, lo_open=True)
        p["repetition_penalty"] = _check_range("repetition_penalty", p["repetition_penalty"], 0.0, 10.0, lo_open=True)
        p["min_p"] = _check_range("min_p", p["min_p"], 0.0, 1.0)
        p["cfm_steps"] = _check_range("cfm_steps", p["cfm_steps"], 1, 100, integer=True)
        limit = self._n_ctx - self._cond_prompt_len - 1 - 300
        p["max_tokens"] = _check_range("max_tokens", p["max_tokens"], 1, limit, integer=True)
        if p["prompt_seconds"] is not None:
            p["prompt_seconds"] = _check_range("prompt_seconds", p["prompt_seconds"], 1.0, 60.0)
        if seed is None:
            seed = secrets.randbelow(2**31)
        seed = _check_range("seed", seed, 0, 2**63 - 1000, integer=True)
        return seed, p

    def _sentences(self, text) -> list[Sentence]:
        if not isinstance(text, str):
            raise EmptyTextError(f"text must be a string; got {type(text).__name__}")
        sentences = split_text(text)
        if not sentences:
            raise EmptyTextError("there is nothing to say: the text is empty or only punctuation")
        return sentences

    def _text_ids(self, sentence: str) -> list[int]:
        return self._tokenizer.encode(_core.punc_norm(sentence)).astype(np.int32).tolist()

    def _t3_stream(self, ids, seed, p, voice):
        return self._t3.stream(ids, p["max_tokens"], seed, temperature=p["temperature"], top_k=p["top_k"],
                               top_p=p["top_p"], repetition_penalty=p["repetition_penalty"], min_p=p["min_p"],
                               speaker_emb=voice.speaker_emb, prompt_tokens=voice.cond_prompt_speech_tokens)

    def _early_stop(self, tokens, n_text: int, done: bool) -> bool:
        speech = sum(1 for t in tokens if t < self._speech_codes)
        return done and speech < max(4, _MIN_SPEECH_PER_TEXT_TOKEN * n_text)

    def _speech_tokens(self, tokens, final: bool) -> list[int]:
        speech = [t for t in tokens if t < self._speech_codes]
        return speech + self._silence if final else speech

    @staticmethod
    def _s3gen_prompt(voice: Voice, seconds: float | None) -> tuple[np.ndarray, np.ndarray]:
        """The voice's S3Gen prompt, or only its last `seconds` (25 tokens, 50 mel frames a
        second). A shorter prompt makes every S3Gen pass cheaper (the encoder and the CFM
        attend over prompt + speech) at some cost in likeness: the low-latency preset's trade."""
        tokens, feat = voice.prompt_token, voice.prompt_feat
        if seconds is None or seconds * 25 >= tokens.size:
            return tokens, feat
        n = max(1, int(round(seconds * 25)))
        return tokens[-n:], np.ascontiguousarray(feat[feat.shape[0] - 2 * n:])

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

    def _claim(self) -> int:
        """A new generation takes T3 over; any older unfinished stream ends."""
        gen = next(self._generation)
        self._owner = gen
        return gen

    def synthesize(self, text: str, voice: Voice | None = None, *, seed: int | None = None, **options) -> np.ndarray:
        """The whole text as one float32 array at `sample_rate` (sentence by sentence)."""
        return np.concatenate([c.samples for c in self._run(text, voice, seed, options, streaming=False)])

    def stream(self, text: str, voice: Voice | None = None, *, first_chunk_tokens: int = 10, chunk_tokens: int = 25,
               seed: int | None = None, **options) -> Stream:
        first = _check_range("first_chunk_tokens", first_chunk_tokens, 1, 1000, integer=True)
        every = _check_range("chunk_tokens", chunk_tokens, 1, 1000, integer=True)
        # Validate everything now, so a bad request fails here and not at the first next().
        sentences, voice, seed, p = self._request(text, voice, seed, options)
        return Stream(lambda cancel: self._chunks(text, sentences, voice, seed, p, True, first, every, cancel))

    def _request(self, text, voice, seed, options):
        sentences = self._sentences(text)
        voice = self.builtin_voice if voice is None else voice
        self.check_voice(voice)
        seed, p = self._options(seed, options)
        return sentences, voice, seed, p

    def _run(self, text, voice, seed, options, streaming):
        sentences, voice, seed, p = self._request(text, voice, seed, options)
        return self._chunks(text, sentences, voice, seed, p, streaming, 0, 0, threading.Event())

    def _chunks(self, text, sentences, voice, seed, p, streaming, first_tokens, chunk_tokens, cancel):
        with self._lock:
            gen = self._claim()
        index = 0
        for si, sentence in enumerate(sentences):
            s_seed = seed + si
            ids = self._text_ids(sentence.text)
            for chunk in (self._sentence_stream if streaming else self._sentence_whole)(
                    ids, voice, s_seed, p, gen, cancel, first_tokens, chunk_tokens):
                wav, final, timings = chunk
                if cancel.is_set() or self._owner != gen:
                    return
                timings["seed"] = s_seed
                yield Chunk(samples=wav, sample_rate=self.sample_rate, index=index,
                            is_last=final and si == len(sentences) - 1, text=sentence.text,
                            span=(sentence.start, sentence.end), sentence_index=si, n_sentences=len(sentences),
                            timings=timings)
                index += 1

    def _sentence_whole(self, ids, voice, seed, p, gen, cancel, *_):
        """One sentence: T3 to the end (early stops retried, the longest kept), then S3Gen once."""
        timings = {}
        t0 = time.perf_counter()
        best = None
        for attempt in range(_MAX_ATTEMPTS):
            with self._lock:
                tokens = self._t3_stream(ids, seed + attempt * 1_000_003, p, voice).next(p["max_tokens"])
            if best is None or len(tokens) > len(best):
                best = tokens
            if not self._early_stop(tokens, len(ids), True) or cancel.is_set():
                break
        timings["t3_ms"] = (time.perf_counter() - t0) * 1e3
        timings["attempts"] = attempt + 1
        speech = self._speech_tokens(best, final=True)
        with self._lock:
            t0 = time.perf_counter()
            mel = self._mel(speech, voice, seed, True, p)
            timings["s3gen_ms"] = (time.perf_counter() - t0) * 1e3
            wav, timings["hift_ms"] = _StreamVocoder(self._hift, seed).push(mel, final=True)
        timings["speech_tokens"] = len(speech)
        timings["audio_s"] = wav.size / self.sample_rate
        yield self._fade_in(wav), True, timings

    def _sentence_stream(self, ids, voice, seed, p, gen, cancel, first_tokens, chunk_tokens):
        """One sentence in chunks: S3Gen on each growing token prefix, new frames vocoded."""
        attempt = 0
        with self._lock:
            t0 = time.perf_counter()
            t3 = self._t3_stream(ids, seed, p, voice)
            prompt_ms = (time.perf_counter() - t0) * 1e3
        vocoder = _StreamVocoder(self._hift, seed)
        tokens: list[int] = []
        started = False
        while True:
            if cancel.is_set() or self._owner != gen:
                return
            with self._lock:
                t0 = time.perf_counter()
                tokens += t3.next(chunk_tokens if started or tokens else first_tokens)
                if not started and self._early_stop(tokens, len(ids), t3.done) and attempt + 1 < _MAX_ATTEMPTS:
                    # Nothing has played yet: an early stop can still be retried, as synthesize() does.
                    attempt += 1
                    t3 = self._t3_stream(ids, seed + attempt * 1_000_003, p, voice)
                    tokens = []
                    continue
                t3_ms = (time.perf_counter() - t0) * 1e3 + prompt_ms
                prompt_ms = 0.0
                final = t3.done
                t0 = time.perf_counter()
                mel = self._mel(self._speech_tokens(tokens, final), voice, seed, final, p)
                s3gen_ms = (time.perf_counter() - t0) * 1e3
                wav, hift_ms = vocoder.push(mel, final)
            if wav.size == 0 and not final:
                continue
            if not started:
                wav = self._fade_in(wav)
                started = True
            yield wav, final, {"t3_ms": t3_ms, "s3gen_ms": s3gen_ms, "hift_ms": hift_ms, "attempts": attempt + 1,
                               "speech_tokens": len(tokens), "audio_s": wav.size / self.sample_rate}
            if final:
                return
