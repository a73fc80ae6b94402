"""`Engine.stages`: the loaded model's pipeline, stage by stage, and the locks they share.

    stages.text     text_frontend.TextFrontEnd   text -> sentences -> T3's text ids
    stages.t3       t3_session.T3Sessions        text ids + voice -> speech tokens
    stages.flow     s3gen_flow.S3GenFlow         speech tokens -> mel (S3Gen's encoder, the CFM)
    stages.vocoder  vocoder_stream.Vocoder       mel -> samples (HiFT)
    stages.marking  watermark_stream.Marking     samples -> watermarked samples (Perth)
    stages.cloner   cloning.VoiceCloner          a recording -> a Voice
    stages.config   model.ModelConfig            the hyper-parameters from the GGUF
    stages.decoder  model.DecoderParts or None   another file's S3Gen and HiFT (flow, vocoder)
    stages.profiler profile.Profiler             stage timings and hooks

The scheduler (`scheduler`) drives them per sentence. On the CPU, T3 has a backend of its own
(and, beside S3Gen, a lock of its own); S3Gen, HiFT and cloning take turns on the model's
lock (`lock`), served in arrival order; so does the watermark.
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager

from engine_native import _core
from engine_native.errors import DeviceError, EngineError, ModelError
from engine_native.pipeline.cloning import VoiceCloner
from engine_native.pipeline.concurrency import FairLock
from engine_native.pipeline.model import (Components, DecoderParts, ModelConfig, builtin_voice, check_decoder,
                                          check_device, core_device)
from engine_native.pipeline.profile import Profiler
from engine_native.pipeline.s3gen_flow import S3GenFlow
from engine_native.pipeline.t3_session import T3Sessions
from engine_native.pipeline.text_frontend import TextFrontEnd
from engine_native.pipeline.vocoder_stream import Vocoder
from engine_native.pipeline.watermark_stream import Marking

# While a stream's T3 worker samples beside S3Gen, the S3Gen / HiFT passes run with this
# many threads fewer than the engine's (at least one), instead of the two taking turns on
# all the cores. T3 keeps its thread count: ggml's flash attention splits the KV cache by
# thread, so another count samples other tokens (docs/CPU.md); the chunk boundaries stay
# the same, so the audio does.
S3GEN_BESIDE_T3_FEWER_THREADS = 1


def _load_components(path, requested: str, threads: int, s3gen: bool = True) -> tuple[Components, str]:
    """The model's components on the requested device, else (a device that fails to start or
    to hold the model) on the CPU with a note saying why. `s3gen`: Components.load's."""
    check_device(requested)
    try:
        return Components.load(path, requested, threads, s3gen), ""
    except DeviceError:
        raise
    except EngineError as e:
        if requested == "cpu" or core_device(requested) == "cpu":
            raise ModelError(str(e)) from None
        note = f"{requested} failed ({e}); running on the CPU"
        warnings.warn(f"chatterbox-studio: {note}", RuntimeWarning, stacklevel=4)  # at Engine(...)'s caller
        try:
            return Components.load(path, "cpu", threads, s3gen), note
        except EngineError as e2:
            raise ModelError(str(e2)) from None


def _load_decoder(path, device: str, threads: int) -> tuple[DecoderParts, ModelConfig]:
    """Another model file's S3Gen and HiFT on the model's device, with that file's config;
    ModelError naming it when it cannot be read."""
    try:
        parts = DecoderParts.load(path, device, threads)
        config = ModelConfig.read(parts.file, cfm_steps=parts.cfm.n_timesteps, n_mels=parts.hift.in_channels)
    except EngineError as e:
        raise ModelError(f"decoder {path}: {e}") from None
    return parts, config


class Stages:
    def __init__(self, path, device: str, threads: int, decoder=None):
        """Loads the model file at `path` on `device` ("auto", "cpu", "cuda:0", ...);
        `device_note` says why it runs on the CPU instead, where it does. `decoder`: another
        model file whose S3Gen and HiFT turn this model's speech tokens into audio (the flow
        and the vocoder; its CFM's steps become the default `cfm_steps`)."""
        parts, self.device_note = _load_components(path, device, threads, s3gen=decoder is None)
        f = self.file = parts.file
        self.device = f.device
        self.threads = parts.n_threads
        self.decoder = None
        if decoder is None:
            self.config = flow_config = ModelConfig.read(f, cfm_steps=parts.cfm.n_timesteps, n_mels=parts.hift.in_channels)
        else:
            self.decoder, flow_config = _load_decoder(decoder, f.device, threads)
            # The model's own values, but the decoder's CFM steps as the default cfm_steps.
            self.config = ModelConfig.read(f, cfm_steps=self.decoder.cfm.n_timesteps,
                                           n_mels=f.tensor_info("voice.prompt_feat")[1][0])
            check_decoder(self.config, flow_config, decoder)
        s3gen = self.decoder or parts
        # Every file whose computations a generation's S3Gen turn runs (cancel, threads).
        self.files = (f,) if self.decoder is None else (f, self.decoder.file)
        self.builtin_voice = builtin_voice(f, self.config)
        self.lock = FairLock()          # the model's computations (S3Gen, HiFT, cloning), in arrival order
        self.profiler = Profiler()
        self.text = TextFrontEnd(f, parts.tokenizer, self.config)
        self.t3 = T3Sessions(parts.t3, self.config, self.lock, self.profiler)
        self.flow = S3GenFlow(s3gen.token_encoder, s3gen.cfm, flow_config, f.device, self.lock, self.profiler)
        self.vocoder = Vocoder(s3gen.hift, flow_config.trim_fade_samples, self.lock, self.profiler)
        self.marking = Marking(self.config.sample_rate, self.lock, self.profiler)
        self.cloner = VoiceCloner(f, self.config, self.lock, threads)

    @contextmanager
    def s3gen_turn(self, cancel):
        """S3Gen / HiFT's (and the watermark's) turn, Stop armed; while a stream's T3 worker
        runs, with the threads it leaves free. Gives the thread count in effect."""
        with self.lock, cancel.armed(*self.files):
            beside = self.t3.workers_running > 0
            threads = max(1, self.threads - S3GEN_BESIDE_T3_FEWER_THREADS) if beside else self.threads
            if beside:
                for f in self.files:
                    f.set_threads(threads)
            try:
                yield threads
            finally:
                if beside:
                    for f in self.files:
                        f.set_threads(self.threads)

    @contextmanager
    def exclusive(self):
        """Holds the whole engine: no T3, S3Gen, HiFT or cloning computation runs while inside
        (entering waits for those in flight and queued before). How a bench or a test sees
        that a cancelled generation has freed the engine."""
        with self.t3.lock, self.lock:
            yield

    def info(self) -> dict:
        f, flow = self.file, self.flow
        hp = {k: f.get_int(f"chatterbox.t3.{k}") for k in ("n_layer", "n_embd", "n_head", "n_ctx", "text_vocab",
                                                            "speech_vocab", "speech_cond_prompt_len")
              if f.has_key(f"chatterbox.t3.{k}")}
        hp["cfm_steps"] = flow.cfm.n_timesteps
        hp["meanflow"] = not flow.cfm.guided
        system = _core.system_info()
        return {"variant": self.config.variant, "quantization": f.get_string("chatterbox.quant"),
                "backend": self.device, "device": self.device, "device_note": self.device_note,
                "hift_device": "cpu" if self.vocoder.hift.device == "CPU" else self.device,
                "cpu_variant": system["cpu_variant"], "ggml_version": system["ggml_version"],
                "sample_rate": self.config.sample_rate, "hparams": hp, "defaults": dict(self.config.defaults),
                "languages": self.text.languages,
                "decoder": None if self.decoder is None else self.decoder.file.path,
                "decoder_variant": None if self.decoder is None else self.decoder.file.variant}
