"""Text -> speech with a model's built-in voice, stage by stage through the native engine.

The whole path of `ChatterboxTurboTTS.generate()` (without the watermark): punc_norm ->
GPT-2 BPE -> T3 sampling -> drop special tokens, append silence -> S3Gen encoder -> meanflow
CFM from seeded noise -> HiFT (f0, seeded excitation, decode) -> the start trim-fade.
Every random draw derives from `seed`, so a seed gives the same audio every time. The
streaming, cancellable engine API builds on these same components.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine_native import _core


@dataclass
class Synthesis:
    samples: np.ndarray            # float32, mono
    sample_rate: int
    speech_tokens: np.ndarray      # T3's tokens as S3Gen received them (silence included)
    timings: dict = field(default_factory=dict)


class Pipeline:
    """The native components of one model file, loaded once."""

    def __init__(self, model_path: str | os.PathLike, *, threads: int = 0):
        import time

        t0 = time.perf_counter()
        self.path = str(Path(model_path))
        self.file = _core.ModelFile(self.path, threads=threads)
        self.tokenizer = _core.Gpt2Tokenizer(self.path)
        self.t3 = _core.T3(self.file)
        self.encoder = _core.S3GenEncoder(self.file)
        self.cfm = _core.S3GenCfm(self.file)
        self.hift = _core.HiFT(self.file)
        get = self.file.get_int
        self.sample_rate = get("chatterbox.s3gen.sample_rate")
        self.speech_codes = get("chatterbox.s3gen.speech_vocab")  # tokens >= this are T3 specials
        self.silence = [get("chatterbox.s3gen.silence_token")] * get("chatterbox.s3gen.n_silence_tokens")
        self.trim = get("chatterbox.hift.trim_fade_samples")
        self.defaults = {k: (self.file.get_int if k == "top_k" else self.file.get_float)(f"chatterbox.sampling.{k}")
                         for k in ("temperature", "top_k", "top_p", "repetition_penalty", "min_p")}
        self.voice_prompt_tokens = self.file.tensor_f32("voice.prompt_token").astype(np.int32)
        self.voice_prompt_feat = self.file.tensor_f32("voice.prompt_feat")
        self.voice_embedding = self.file.tensor_f32("voice.embedding")
        self.load_seconds = time.perf_counter() - t0

    def trim_fade(self) -> np.ndarray:
        """S3Gen's start fade: `trim` samples of silence, then a raised-cosine fade-in."""
        ramp = (np.cos(np.linspace(np.pi, 0, self.trim, dtype=np.float32)) + 1) / 2
        return np.concatenate([np.zeros(self.trim, np.float32), ramp.astype(np.float32)])

    def synthesize(self, text: str, *, seed: int = 0, max_tokens: int = 1000, **sampling) -> Synthesis:
        import time

        params = {**self.defaults, **sampling}
        timings = {}
        t0 = time.perf_counter()
        ids = self.tokenizer.encode(_core.punc_norm(text)).astype(np.int32)
        tokens = np.asarray(self.t3.generate(ids.tolist(), int(max_tokens), int(seed), **params), np.int32)
        timings["t3_ms"] = (time.perf_counter() - t0) * 1e3
        tokens = np.concatenate([tokens[tokens < self.speech_codes], np.asarray(self.silence, np.int32)])

        t0 = time.perf_counter()
        mu = self.encoder.encode(np.concatenate([self.voice_prompt_tokens, tokens]).tolist())
        timings["encoder_ms"] = (time.perf_counter() - t0) * 1e3
        rng = np.random.default_rng(seed)
        x0 = rng.standard_normal(mu.shape, dtype=np.float32)  # i.i.d. N(0, 1), as the reference's overlay
        t0 = time.perf_counter()
        mel = self.cfm.sample(mu, self.voice_prompt_feat, self.voice_embedding, x0)
        timings["cfm_ms"] = (time.perf_counter() - t0) * 1e3
        t0 = time.perf_counter()
        wav = self.hift.inference(mel, int(seed))
        timings["hift_ms"] = (time.perf_counter() - t0) * 1e3
        fade = self.trim_fade()
        wav[: fade.size] *= fade[: wav.size]
        return Synthesis(samples=wav, sample_rate=self.sample_rate, speech_tokens=tokens, timings=timings)
