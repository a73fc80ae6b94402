"""The loaded model: its native components on a device, the hyper-parameters the Python
side reads from the GGUF (`ModelConfig`), the built-in voice and the devices present.

Every dimension and rate comes from the file's metadata; files converted before a key
existed get the Turbo/Nano reference value where one is given below.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from engine_native import _core
from engine_native import options as schema
from engine_native.errors import DeviceError, ModelError
from engine_native.voice import Voice

# On a GPU the S3Gen encoder's compute buffers are sized at load for the built-in voice's
# prompt and this many speech tokens (20 s of audio), with its position table: a first
# sentence up to that long then allocates nothing (docs/CPU.md and docs/GPU.md give the
# first-encode figures).
S3GEN_RESERVE_SPEECH_TOKENS = 500
# The tensors of S3Gen (token encoder, CFM) and HiFT: a model decoded by another file's leaves them unread.
S3GEN_PREFIXES = ("s3gen.", "hift.")


def devices() -> list[dict]:
    """Every device present, the fastest first ("auto" takes the first): dicts of id ("cpu",
    "cuda:0", "vulkan:0"), name, backend, description, type (cpu/gpu/igpu), memory_free and
    memory_total (bytes)."""
    return _core.devices()


def core_device(name: str) -> str:
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
    found = core_device(name.lower())
    if not found:
        present = ", ".join(d["id"] for d in _core.devices())
        raise DeviceError(f"device '{name}' is not present (devices: {present})")
    return found


def _get_or(f, key: str, default: int) -> int:
    return f.get_int(key) if f.has_key(key) else default


@dataclass(frozen=True)
class ModelConfig:
    """The hyper-parameters the pipeline's Python stages need, read once at load."""
    variant: str
    sample_rate: int
    speech_codes: int              # S3Gen's codebook: T3 tokens at or above it are specials
    silence: tuple[int, ...]       # the silence tokens appended to a sentence's last pass
    lookahead_frames: int          # the encoder's lookahead, dropped from a pass not final
    token_rate: int                # speech tokens per second of audio
    token_mel_ratio: int           # mel frames per speech token
    trim_fade_samples: int
    cond_prompt_len: int           # T3's voice prompt tokens, at most
    n_ctx: int                     # T3's context (0: Multilingual, whose cache grows)
    max_text_ids: int              # Multilingual: the text position table (start/stop included)
    max_speech: int                # Multilingual: the speech position table
    text_start: int
    text_stop: int
    tokenizer_rate: int            # the cloning encoders' rate (16 kHz)
    s3gen_prompt_seconds: int      # the voice recipe's DEC_COND_LEN
    t3_prompt_seconds: int         # the voice recipe's ENC_COND_LEN
    norm_loudness: bool            # the voice recipe's loudness step (not Multilingual's)
    speaker_embed_size: int
    xvector_size: int
    n_mels: int
    defaults: dict = field(default_factory=dict)

    @property
    def mtl(self) -> bool:
        return self.variant == "mtl"

    @classmethod
    def read(cls, f, *, cfm_steps: int, n_mels: int) -> ModelConfig:
        mtl = f.get_string("chatterbox.variant") == "mtl"
        t3 = (lambda k: f.get_int(f"chatterbox.t3.{k}"))
        defaults = {
            "temperature": f.get_float("chatterbox.sampling.temperature"),
            "top_k": f.get_int("chatterbox.sampling.top_k"),
            "top_p": f.get_float("chatterbox.sampling.top_p"),
            "repetition_penalty": f.get_float("chatterbox.sampling.repetition_penalty"),
            "min_p": f.get_float("chatterbox.sampling.min_p"),
            "cfm_steps": cfm_steps,
            "max_tokens": f.get_int("chatterbox.sampling.max_gen_len"),
            "prompt_seconds": None,   # None: the voice's whole S3Gen prompt (the reference)
        }
        if mtl:
            # The reference's generate(): no top-k (None: off; 1..100000 may still be set).
            defaults["top_k"] = None
            for name in schema.MTL:
                defaults[name] = f.get_float(f"chatterbox.sampling.{name}")
        return cls(
            variant=f.get_string("chatterbox.variant"),
            sample_rate=f.get_int("chatterbox.s3gen.sample_rate"),
            speech_codes=f.get_int("chatterbox.s3gen.speech_vocab"),
            silence=(f.get_int("chatterbox.s3gen.silence_token"),) * f.get_int("chatterbox.s3gen.n_silence_tokens"),
            lookahead_frames=f.get_int("chatterbox.s3gen.enc.pre_lookahead_len") * f.get_int("chatterbox.s3gen.token_mel_ratio"),
            token_rate=f.get_int("chatterbox.s3gen.token_rate"),
            token_mel_ratio=f.get_int("chatterbox.s3gen.token_mel_ratio"),
            trim_fade_samples=f.get_int("chatterbox.hift.trim_fade_samples"),
            cond_prompt_len=t3("speech_cond_prompt_len"),
            # Llama T3: learned position tables bound the text and the speech; its cache grows.
            n_ctx=0 if mtl else t3("n_ctx"),
            max_text_ids=t3("text_pos_len") if mtl else 0,
            max_speech=t3("max_speech_tokens") if mtl else 0,
            text_start=t3("start_text_token") if mtl else 0,
            text_stop=t3("stop_text_token") if mtl else 0,
            tokenizer_rate=f.get_int("chatterbox.s3tok.sample_rate"),
            s3gen_prompt_seconds=_get_or(f, "chatterbox.s3gen.prompt_seconds", 10),
            t3_prompt_seconds=_get_or(f, "chatterbox.t3.prompt_seconds", 15),
            norm_loudness=f.get_bool("chatterbox.voice.norm_loudness") if f.has_key("chatterbox.voice.norm_loudness")
            else True,
            speaker_embed_size=t3("speaker_embed_size"),
            xvector_size=f.tensor_info("voice.embedding")[1][0],
            n_mels=n_mels,
            defaults=defaults,
        )


def builtin_voice(f, config: ModelConfig) -> Voice:
    """The voice stored in the model file (a baked voice's name where it has one)."""
    return Voice(
        speaker_emb=f.tensor_f32("voice.speaker_emb").reshape(-1),
        cond_prompt_speech_tokens=f.tensor_f32("voice.cond_prompt_speech_tokens").astype(np.int32).reshape(-1),
        embedding=f.tensor_f32("voice.embedding").reshape(-1),
        prompt_token=f.tensor_f32("voice.prompt_token").astype(np.int32).reshape(-1),
        prompt_feat=f.tensor_f32("voice.prompt_feat").reshape(-1, config.n_mels),
        variant=config.variant,
        meta={"name": f.get_string("chatterbox.builtin_voice.name") if f.has_key("chatterbox.builtin_voice.name")
              else "Built-in", "builtin": True})


def s3gen_encoder(f):
    """S3Gen's token encoder of model file `f`; on a GPU with its compute buffers sized for the
    built-in voice's prompt and S3GEN_RESERVE_SPEECH_TOKENS."""
    encoder = _core.S3GenEncoder(f)
    if f.device != "cpu":
        has_voice = "voice.prompt_token" in f.tensor_names()
        prompt = f.tensor_f32("voice.prompt_token").size if has_voice else 0
        encoder.reserve(prompt + S3GEN_RESERVE_SPEECH_TOKENS)
    return encoder


@dataclass
class Components:
    """The native objects of one loaded model file."""
    file: object                   # _core.ModelFile
    tokenizer: object              # _core.Gpt2Tokenizer, or text_mtl.MtlTokenizer
    t3: object                     # _core.T3 (on a backend of its own: it runs beside S3Gen)
    token_encoder: object          # _core.S3GenEncoder: S3Gen's conformer over speech tokens (None: a decoder's)
    cfm: object                    # _core.S3GenCfm (None: a decoder's)
    hift: object                   # _core.HiFT, on the model's device (a device OOM: the CPU; None: a decoder's)
    n_threads: int

    @classmethod
    def load(cls, path, device: str, threads: int, s3gen: bool = True) -> Components:
        """`s3gen` False (another file decodes): S3Gen's and HiFT's weights are left unread and
        their components not made (token_encoder, cfm and hift None)."""
        f = _core.ModelFile(str(path), device=device, threads=threads, lazy=[] if s3gen else list(S3GEN_PREFIXES))
        if f.get_string("chatterbox.variant") == "mtl":
            from engine_native.text_mtl import MtlTokenizer

            tokenizer = MtlTokenizer(path)
        else:
            tokenizer = _core.Gpt2Tokenizer(str(path))
        n_threads = threads or _core.system_info()["default_threads"]
        t3 = _core.T3(f, threads=n_threads)
        if not s3gen:
            return cls(f, tokenizer, t3, None, None, None, n_threads)
        return cls(f, tokenizer, t3, s3gen_encoder(f), _core.S3GenCfm(f), _core.HiFT(f), n_threads)


@dataclass
class DecoderParts:
    """Another model file's S3Gen and HiFT, decoding this model's speech tokens (`Engine(...,
    decoder=)`): a Turbo or Nano file gives the Multilingual model its one- or two-step meanflow
    decoder. Its T3, tokenizer and cloning encoders are never loaded."""
    file: object                   # _core.ModelFile
    token_encoder: object          # _core.S3GenEncoder
    cfm: object                    # _core.S3GenCfm
    hift: object                   # _core.HiFT

    @classmethod
    def load(cls, path, device: str, threads: int) -> DecoderParts:
        f = _core.ModelFile(str(path), device=device, threads=threads, lazy=["t3."])  # its T3 never runs
        return cls(f, s3gen_encoder(f), _core.S3GenCfm(f), _core.HiFT(f))


# What a decoder's S3Gen must share with the model whose tokens and voices it takes.
DECODER_MUST_MATCH = ("speech_codes", "token_rate", "token_mel_ratio", "sample_rate", "tokenizer_rate",
                      "xvector_size", "n_mels")


def check_decoder(model: ModelConfig, decoder: ModelConfig, path) -> None:
    """ModelError naming what differs when the decoder cannot read the model's speech tokens
    or its voices' S3Gen conditioning (a codebook, rate or size of its own)."""
    differ = [f"{k} {getattr(decoder, k)} (the model's {getattr(model, k)})" for k in DECODER_MUST_MATCH
              if getattr(decoder, k) != getattr(model, k)]
    if differ:
        raise ModelError(f"{path} cannot decode this {model.variant} model's speech: its S3Gen has " + ", ".join(differ))
