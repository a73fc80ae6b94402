"""S3Gen's flow: speech tokens -> mel frames, through S3Gen's token encoder (a conformer
over the voice prompt's and the sentence's speech tokens; not the cloning encoders) and
the CFM from seeded noise.

The noise is drawn frame by frame from the sentence's seed, so a pass over a prefix of the
tokens, or a window of them (a stream's bounded left context, `start`), sees the same noise
per frame as the whole. A stream's passes may take the voice prompt as a cached prefix
(`cached_prompt`): the prompt's encoder output and CFM trajectory are computed once per
voice and step count and each pass computes only its own frames.
"""

from __future__ import annotations

import hashlib

import numpy as np

# A stream's CFM passes take the voice prompt as a cached prefix: the
# prompt's frames attend only to themselves, the chunk-causal mask of CosyVoice2's streaming
# mode with the prompt as its first chunk (the U-Net's convolutions are causal already), so
# the prompt's trajectory is integrated once per voice and step count and a pass computes
# only its own frames (tests/engine_native/src/s3gen/test_s3gen_cfm.py checks that against the reference under that mask).
# The price: the audio departs from the batch synthesis, whose prompt frames also attend to
# the speech (docs/CPU.md gives the figures). False: every pass runs the reference's
# full-context CFM over the prompt again (benchmarks/bench_stream_context.py compares).
STREAM_CACHED_PROMPT = True
# The cached prompt's own noise: fixed, so that one prefix serves every sentence and seed.
PROMPT_NOISE_SEED = 0
# Cached prompts kept (Turbo: about 72 MB for a 10 s prompt at 2 CFM steps, 18 MB for the
# low-latency preset's 4 s at 1; Multilingual, two guidance rows: 582 MB for 10 s at its 10
# steps, ~160 MB for 4 s at 7): the voice and preset in use (docs/CPU.md: two took the
# bench's peak RSS past 1.0 GB). A batch synthesis frees it.
STREAM_PREFIXES = 1


def initial_noise(seed: int, frames: int, n_mels: int) -> np.ndarray:
    """The CFM's initial noise [n_mels, frames] of a pass from `seed`, drawn frame by frame (so
    a prefix of the frames is the same draw whatever follows): what the estimator first gets."""
    rng = np.random.Generator(np.random.PCG64(seed))
    return rng.standard_normal((frames, n_mels), dtype=np.float32).T


class S3GenFlow:
    def __init__(self, token_encoder, cfm, config, device: str, lock, profiler):
        self.token_encoder = token_encoder   # _core.S3GenEncoder
        self.cfm = cfm                       # _core.S3GenCfm
        self._config, self._device, self._lock, self._profiler = config, device, lock, profiler
        self._prefixes: dict = {}            # (voice prompt digest, CFM steps) -> (encoder, CFM) prefixes

    def speech_input(self, tokens, final: bool) -> list[int]:
        """T3's tokens as S3Gen takes them: its specials (the stop token) left out, the
        silence tokens after a sentence's last pass."""
        speech = [t for t in tokens if t < self._config.speech_codes]
        return speech + list(self._config.silence) if final else speech

    def prompt(self, voice, seconds: float | None) -> tuple[np.ndarray, np.ndarray]:
        """The voice's S3Gen prompt, or only its last `seconds` (token_rate tokens, token_rate x
        token_mel_ratio mel frames a second). A shorter prompt makes every S3Gen pass cheaper
        (the encoder and the CFM attend over prompt + speech) at some cost in likeness: the
        low-latency preset's trade."""
        tokens, feat = voice.prompt_token, voice.prompt_feat
        rate = self._config.token_rate
        if seconds is None or seconds * rate >= tokens.size:
            return tokens, feat
        n = max(1, int(round(seconds * rate)))
        return tokens[-n:], np.ascontiguousarray(feat[feat.shape[0] - self._config.token_mel_ratio * n:])

    def prefix_usable(self, cfm_steps: int | None = None) -> bool:
        """Whether a stream's passes take the voice prompt as a cached prefix: a step count
        whose per-step keys and values are kept (a guided CFM keeps both rows'), on the CPU
        (where a pass over the whole prompt is what a stream waits for). On a GPU the prefix
        runs (test_backend_gpu_mtl.py) but did not shorten the first audio (docs/GPU.md): a
        prefix's guided steps are two evaluations each, the full pass one batch of two."""
        steps = cfm_steps or self.cfm.n_timesteps
        return STREAM_CACHED_PROMPT and self._device == "cpu" and steps <= self.cfm.prefix_max_steps

    def mel(self, speech: list[int], voice, seed: int, *, final: bool, cfm_steps: int | None = None,
            prompt_seconds: float | None = None, start: int = 0, cached_prompt: bool = False,
            times=None) -> np.ndarray:
        """[n_mels, frames] for the speech tokens (prompt frames removed). Not `final`: the
        encoder's lookahead frames are dropped (the reference's finalize=False). `start` > 0
        leaves the tokens before it out of the pass (a stream's bounded left context): the
        result then begins at speech frame token_mel_ratio x start, and every frame keeps the
        noise it has in the whole pass. `cached_prompt` (a stream's passes, where
        prefix_usable): the encoder and the CFM compute only the speech frames, against the
        voice prompt's cached keys and values. `times`: a StageTimes the stages add to."""
        steps = cfm_steps or self.cfm.n_timesteps
        stage = self._profiler.stage
        with self._lock, stage("s3gen", times):
            prompt_token, prompt_feat = self.prompt(voice, prompt_seconds)
            P, skip = prompt_feat.shape[0], self._config.token_mel_ratio * start
            prefix = self._prefix(prompt_token, prompt_feat, voice, steps, times) if cached_prompt else None
            if prefix is not None:
                enc, cfm = prefix
                with stage("encoder", times):
                    mu = (self.token_encoder.encode_after_prefix(enc, np.asarray(speech[start:], np.int32))
                          if speech[start:] else None)
                n = 0 if mu is None else mu.shape[1] - (0 if final else self._config.lookahead_frames)
                if n <= 0:
                    return np.zeros((prompt_feat.shape[1], 0), np.float32)
                with stage("cfm", times):
                    x0 = initial_noise(seed, P + skip + n, mu.shape[0])
                    return self.cfm.sample_after_prefix(cfm, np.ascontiguousarray(mu[:, :n]),
                                                        np.ascontiguousarray(x0[:, P + skip:]))
            with stage("encoder", times):
                mu = self.token_encoder.encode(np.concatenate([prompt_token, np.asarray(speech[start:], np.int32)]).tolist())
            if not final:  # flow.inference(finalize=False) drops the lookahead frames
                mu = mu[:, : mu.shape[1] - self._config.lookahead_frames]
            if mu.shape[1] <= P:
                return np.zeros((mu.shape[0], 0), np.float32)
            with stage("cfm", times):
                x0 = initial_noise(seed, mu.shape[1] + skip, mu.shape[0])
                if skip:  # the prompt's noise, then the window's frames' own
                    x0 = np.concatenate([x0[:, :P], x0[:, P + skip:]], axis=1)
                return self.cfm.sample(np.ascontiguousarray(mu), prompt_feat, voice.embedding,
                                       np.ascontiguousarray(x0), n_steps=steps)

    def prepare(self, voice, cfm_steps: int | None = None, prompt_seconds: float | None = None) -> None:
        """Makes the voice's cached stream prefix for these settings, where streams use one."""
        if self.prefix_usable(cfm_steps):
            with self._lock:
                prompt_token, prompt_feat = self.prompt(voice, prompt_seconds)
                self._prefix(prompt_token, prompt_feat, voice, cfm_steps or self.cfm.n_timesteps)

    def _prefix(self, prompt_token, prompt_feat, voice, steps: int, times=None):
        """The encoder's and the CFM's cached prefixes for this voice prompt and step count
        (made where not cached): the prompt encoded alone (its mu then depends on nothing a
        sentence says) and its CFM trajectory from its own noise (PROMPT_NOISE_SEED: it
        depends on no sentence's seed). The last STREAM_PREFIXES are kept. None where the
        prompt's frames are not token_mel_ratio per token (the passes then run in full)."""
        if self._config.token_mel_ratio * prompt_token.size != prompt_feat.shape[0]:
            return None
        digest = hashlib.blake2b(digest_size=16)
        for a in (prompt_token, prompt_feat, voice.embedding):
            digest.update(np.ascontiguousarray(a).tobytes())
        key = (digest.digest(), steps)
        prefix = self._prefixes.pop(key, None)
        if prefix is None:
            with self._profiler.stage("encoder", times):
                enc = self.token_encoder.make_prefix(prompt_token)
            with self._profiler.stage("cfm", times):
                x0 = initial_noise(PROMPT_NOISE_SEED, enc.mu.shape[1], enc.mu.shape[0])
                prefix = enc, self.cfm.make_prefix(enc.mu, prompt_feat, voice.embedding, np.ascontiguousarray(x0),
                                                   n_steps=steps)
        self._prefixes[key] = prefix  # the most recent last
        while len(self._prefixes) > STREAM_PREFIXES:
            self._prefixes.pop(next(iter(self._prefixes)))
        return prefix

    @property
    def cached_prefixes(self) -> dict:
        """The cached stream prefixes: (voice prompt digest, CFM steps) -> (encoder prefix, CFM prefix)."""
        with self._lock:
            return dict(self._prefixes)

    def release_prefixes(self) -> int:
        """Frees the cached stream prefixes; returns the CFM's bytes freed."""
        with self._lock:
            freed = sum(cfm.bytes for _, cfm in self._prefixes.values())
            self._prefixes.clear()
            return freed
