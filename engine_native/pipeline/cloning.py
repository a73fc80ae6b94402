"""Cloning: a recording -> a `Voice` (the reference's `prepare_conditionals`), the speaker
embeddings of any audio, whether a voice fits this model, and a voice of another variant
re-made from the recording kept beside its file.

The cloning encoders (S3Tokenizer, CAMPPlus, VoiceEncoder, the 24 kHz mel) are built on
first use, so a synthesis-only session never holds their weights, and released after
`idle_seconds` unused. (S3Gen's own encoder, over speech tokens, is the flow's:
`s3gen_flow.S3GenFlow.token_encoder`.)
"""

from __future__ import annotations

import os
import threading
import time
import weakref

import numpy as np

from engine_native import _core
from engine_native import options as schema
from engine_native.audio import norm_loudness, resample_sinc, resample_soxr, to_mono, usable_mono
from engine_native.errors import (EngineError, IncompatibleVoiceError, SilentAudioError, VoiceError,
                                  VoiceTooShortError)
from engine_native.speech import check_speech
from engine_native.voice import Voice, clip_path

# The reference's minimum recording length (prepare_conditionals asserts > 5 s).
MIN_VOICE_SECONDS = 5.0
# The Multilingual recipe has no minimum length (the reference asserts none); below 2 s the
# VoiceEncoder sees less than one of its 1.6 s windows.
MIN_VOICE_SECONDS_MTL = 2.0
# Speech (above -30 dBFS, ffmpeg silencedetect's sense) a recording must hold to be cloned:
# -80 dBFS hiss is refused instead of being normalised into a "voice".
MIN_SPEECH_SECONDS = 1.0
# Seconds the cloning encoders (about 0.5 GB in F32) stay loaded after their last use: a
# burst of clones reuses them, an idle session frees them.
CLONER_IDLE_SECONDS = 60.0
_SAMPLE_RATE = schema.Option("sample_rate", int, 1000, 768000, False, False, "a recording's sample rate in Hz")
_ENCODERS = {"mel": "Mel24k", "ve": "VoiceEncoder", "campplus": "CampPlus", "s3tok": "S3Tokenizer"}
# Metadata of the old cloning, dropped from a re-made voice.
_MADE_BY_CLONING = ("builtin", "clone_seconds", "duration_s", "created_at", "source_sample_rate")


def _audio(samples: np.ndarray, sample_rate: int) -> tuple[np.ndarray, int]:
    """Any audio an embedding is asked of, as (mono float32, rate); VoiceError if unusable."""
    sr = _SAMPLE_RATE.check(sample_rate)
    return usable_mono(samples), sr


class VoiceCloner:
    def __init__(self, file, config, lock, threads: int):
        self._file, self._config, self._lock, self._threads = file, config, lock, threads
        self.idle_seconds = CLONER_IDLE_SECONDS
        self._encoders = None          # the cloning encoders, while loaded
        self._used = 0.0
        self._encoder_refs = []        # every encoder built on the loaded weights (release only when all are gone)
        self._remade = {}              # id(voice) -> (weak ref to the voice, the voice re-made for this model)
        self._remade_lock = threading.Lock()

    # ------------------------------------------------------------ the encoders' lifetime
    def encoders(self, *names: str) -> dict:
        """The cloning encoders by name (mel, ve, campplus, s3tok), those in `names` (none: all)
        built on first use, so that one caller's need (re-voicing's S3Tokenizer, a likeness
        score's VoiceEncoder) loads only that encoder's weights. Call with the engine's lock held."""
        self._used = time.monotonic()
        names = names or tuple(_ENCODERS)
        missing = [_ENCODERS[n] for n in names if not hasattr(_core, _ENCODERS[n])]
        if missing:
            raise EngineError(f"this build of the engine lacks {', '.join(missing)}; voice cloning is unavailable")
        if self._encoders is None:
            self._encoders = {}
            self._schedule_release(self.idle_seconds)
        for name in names:
            if name not in self._encoders:
                self._encoders[name] = getattr(_core, _ENCODERS[name])(self._file)
                self._encoder_refs.append(weakref.ref(self._encoders[name]))
        return self._encoders

    def _schedule_release(self, delay: float) -> None:
        me = weakref.ref(self)  # the timer must not keep the engine alive
        timer = threading.Timer(delay, lambda: (c := me()) is not None and c.release(idle_only=True))
        timer.daemon = True
        timer.start()

    def release(self, idle_only: bool = False) -> int:
        """Frees the encoders' weights (they load again on the next clone); the bytes freed.
        idle_only: only when unused for idle_seconds (else re-checked later)."""
        with self._lock:
            if self._encoders is None:
                return 0
            idle = time.monotonic() - self._used
            if idle_only and idle < self.idle_seconds:
                self._schedule_release(self.idle_seconds - idle)
                return 0
            self._encoders = None
            if any(r() is not None for r in self._encoder_refs):
                return 0  # someone still holds an encoder built on these weights: they stay
            self._encoder_refs = []
            return self._file.release_lazy() if hasattr(self._file, "release_lazy") else 0

    # ------------------------------------------------------------ embeddings and the recipe
    def speaker_embedding(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        c = self._config
        mono, sr = _audio(samples, sample_rate)
        with self._lock:
            ve = self.encoders("ve")["ve"]
            wav24 = resample_soxr(mono, sr, c.sample_rate)
            if c.norm_loudness:  # Turbo/Nano; the Multilingual recipe has no loudness step
                wav24 = norm_loudness(wav24, c.sample_rate)
            ref16 = resample_soxr(wav24, c.sample_rate, c.tokenizer_rate)
            return np.asarray(ve.embed(ref16, threads=self._threads), np.float32).reshape(-1)

    def speaker_xvector(self, samples: np.ndarray, sample_rate: int) -> np.ndarray:
        mono, sr = _audio(samples, sample_rate)
        with self._lock:
            campplus = self.encoders("campplus")["campplus"]
            x = np.asarray(campplus.embed(resample_soxr(mono, sr, self._config.tokenizer_rate)), np.float32).reshape(-1)
        return x / (np.linalg.norm(x) or 1.0)

    def voice_from_audio(self, samples: np.ndarray, sample_rate: int, *, name: str | None = None, **meta) -> Voice:
        c = self._config
        sr = _SAMPLE_RATE.check(sample_rate)
        try:
            mono = to_mono(samples)
        except ValueError as e:
            raise VoiceError(str(e)) from None
        if not np.all(np.isfinite(mono)):
            raise VoiceError("the recording contains invalid samples (NaN or infinity)")
        S3GEN_SR, S3_SR = c.sample_rate, c.tokenizer_rate
        duration = mono.size / sr
        shortest = MIN_VOICE_SECONDS_MTL if c.mtl else MIN_VOICE_SECONDS
        if duration <= shortest:
            raise VoiceTooShortError(f"the recording is {duration:.1f} s long; cloning needs more than "
                                     f"{shortest:.0f} s of audio (10 s or more is best)")
        if not np.any(np.abs(mono) > 1e-6):
            raise SilentAudioError("the recording is silent: there is no signal to clone")
        # The Voice Lab's speech detection, before loudness normalisation lifts noise to speech level.
        check_speech(mono, sr, MIN_SPEECH_SECONDS)
        with self._lock:
            enc = self.encoders()
            t0 = time.perf_counter()
            wav24 = resample_soxr(mono, sr, S3GEN_SR)            # librosa.load(path, sr=24000)
            if c.norm_loudness:                                   # to -27 LUFS (Turbo/Nano; not MTL)
                wav24 = norm_loudness(wav24, S3GEN_SR)
            ref16 = resample_soxr(wav24, S3GEN_SR, S3_SR)         # librosa.resample -> T3 and the VoiceEncoder
            dec = wav24[: c.s3gen_prompt_seconds * S3GEN_SR]      # DEC_COND_LEN
            dec16 = resample_sinc(dec, S3GEN_SR, S3_SR)           # embed_ref's torchaudio Resample
            try:
                prompt_feat = np.asarray(enc["mel"].compute(dec), np.float32)
                embedding = np.asarray(enc["campplus"].embed(dec16), np.float32)
                prompt_token = np.asarray(enc["s3tok"].tokens(dec16), np.int32)
                ratio = c.token_mel_ratio
                if prompt_feat.shape[0] != ratio * prompt_token.size:
                    prompt_token = prompt_token[: prompt_feat.shape[0] // ratio]
                cond_tokens = np.asarray(enc["s3tok"].tokens(ref16[: c.t3_prompt_seconds * S3_SR],
                                                             max_len=c.cond_prompt_len),
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
                         prompt_token=prompt_token, prompt_feat=prompt_feat, variant=c.variant, meta=meta)

    # ------------------------------------------------------------ voices and this model
    def check(self, voice: Voice) -> None:
        """VoiceError (naming the file) when `voice` does not fit this model."""
        c = self._config
        if not isinstance(voice, Voice):
            raise VoiceError(f"voice must be an engine_native.Voice; got {type(voice).__name__}")
        if voice.variant != c.variant:
            raise IncompatibleVoiceError(
                f"{voice.where()} was made with a Chatterbox {voice.variant or 'unknown'} model; this model is "
                f"{c.variant}. Clone the voice again with this model (Engine.adapt_voice does so from the "
                f"recording kept beside the voice file, where there is one).")
        voice.validate()
        for name, n in {"speaker_emb": c.speaker_embed_size, "embedding": c.xvector_size}.items():
            if getattr(voice, name).size != n:
                raise IncompatibleVoiceError(f"{voice.where()}: {name} has {getattr(voice, name).size} values; "
                                             f"this model needs {n}")
        if voice.prompt_feat.shape[1] != c.n_mels:
            raise IncompatibleVoiceError(f"{voice.where()}: prompt_feat must be [frames, {c.n_mels}]")
        for name in ("cond_prompt_speech_tokens", "prompt_token"):
            if getattr(voice, name).max() >= c.speech_codes:
                raise IncompatibleVoiceError(f"{voice.where()}: {name} holds ids outside this model's codebook")
        if voice.cond_prompt_speech_tokens.size > c.cond_prompt_len:
            raise VoiceError(f"{voice.where()}: {voice.cond_prompt_speech_tokens.size} T3 prompt tokens; this model "
                             f"takes at most {c.cond_prompt_len}")
        # S3Gen's prompt: mel frames = token_mel_ratio x tokens, and no longer than the recipe makes.
        n_tok, n_frames = voice.prompt_token.size, voice.prompt_feat.shape[0]
        if n_frames // c.token_mel_ratio != n_tok:  # (the reference keeps an odd last frame)
            raise VoiceError(f"{voice.where()}: its S3Gen prompt is inconsistent ({n_tok} tokens but {n_frames} "
                             f"mel frames; {c.token_mel_ratio} frames per token expected)")
        if n_tok > c.s3gen_prompt_seconds * c.token_rate:
            raise VoiceError(f"{voice.where()}: its S3Gen prompt holds {n_tok} tokens; at most "
                             f"{c.s3gen_prompt_seconds * c.token_rate} expected")

    def adapt(self, voice: Voice, clip=None) -> Voice:
        """`voice`, or a voice re-made from its recording for this model's variant (cached per
        voice object while it lives, when re-made from the clip kept beside its file)."""
        if not isinstance(voice, Voice):
            raise VoiceError(f"voice must be an engine_native.Voice; got {type(voice).__name__}")
        if voice.variant == self._config.variant:
            return voice
        if clip is None and (remade := self._remade_for(voice)) is not None:
            return remade
        source = clip if clip is not None else clip_path(voice.path)
        if source is None:
            raise IncompatibleVoiceError(
                f"{voice.where()} was made with a Chatterbox {voice.variant or 'unknown'} model; this model is "
                f"{self._config.variant}, and no recording is kept beside it to re-make it from. Clone the voice "
                f"again with this model.")
        if isinstance(source, (str, os.PathLike)):
            import soundfile as sf

            try:
                samples, rate = sf.read(os.fspath(source), dtype="float32", always_2d=True)
            except Exception as e:  # soundfile raises RuntimeError/LibsndfileError on unreadable files
                raise VoiceError(f"cannot read the recording {source}: {e}") from None
        else:
            samples, rate = source
        meta = {k: v for k, v in voice.meta.items() if k not in _MADE_BY_CLONING}
        meta["remade_from"] = voice.variant or "unknown"
        new = self.voice_from_audio(samples, rate, **meta)
        if clip is None:
            self._keep_remade(voice, new)
        return new

    def _remade_for(self, voice: Voice) -> Voice | None:
        with self._remade_lock:
            ref, remade = self._remade.get(id(voice), (None, None))
            return remade if ref is not None and ref() is voice else None

    def _keep_remade(self, voice: Voice, remade: Voice) -> None:
        key = id(voice)
        table, lock = self._remade, self._remade_lock

        def forget(_ref):  # the voice is gone: so is its re-made one
            with lock:
                if table.get(key, (None,))[0] is _ref:
                    del table[key]

        with lock:
            table[key] = (weakref.ref(voice, forget), remade)
