"""Reference stages: named functions (snapshot_dir, inputs) -> outputs.

REFERENCE-VENV ONLY: imports torch and chatterbox. Every stage takes and
returns `dict[str, np.ndarray]` (what fits in an .npz without pickle). Call
them from the project environment with `tests.reference.runner.run_stage`.

Model loading lives here, in one place, and follows
`ChatterboxTurboTTS.from_local` step by step.
"""
from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from . import build

Inputs = dict[str, np.ndarray]
Stage = Callable[[Path, Inputs], Inputs]
STAGES: dict[str, Stage] = {}


def stage(name: str):
    def deco(fn: Stage) -> Stage:
        STAGES[name] = fn
        return fn
    return deco


# Run between two stages by a process that serves many (__main__.py serve): each undoes a
# cache that a fresh process would not have.
RESETS: list[Callable[[], None]] = []


def reset() -> None:
    for fn in RESETS:
        fn()


# --------------------------------------------------------------------------
# Loading a snapshot exactly as ChatterboxTurboTTS.from_local does
# --------------------------------------------------------------------------

def snapshot_variant(snapshot: Path) -> str:
    snapshot = Path(snapshot)
    found = [v for v, f in build.T3_FILES.items() if (snapshot / f).exists()]
    if len(found) != 1:
        raise ValueError(f"{snapshot}: expected exactly one of {list(build.T3_FILES.values())}")
    return found[0]


@contextlib.contextmanager
def weights_loaded_after():
    """Modules built here get every weight from a strict load_state_dict right after: skip
    torch.nn.init's random draws meanwhile (5-7 s of normal_ for a full-size T3, per load).
    The loaded models are the same; the stages seed torch themselves after loading."""
    init = torch.nn.init
    saved = {n: getattr(init, n) for n in ("_no_grad_normal_", "_no_grad_uniform_", "_no_grad_trunc_normal_",
                                           "normal_", "uniform_", "trunc_normal_", "kaiming_uniform_",
                                           "kaiming_normal_", "xavier_uniform_", "xavier_normal_", "orthogonal_")
             if hasattr(init, n)}
    for n in saved:
        setattr(init, n, lambda tensor, *a, **k: tensor)
    try:
        yield
    finally:
        for n, fn in saved.items():
            setattr(init, n, fn)


def load_ve(snapshot: Path):
    from safetensors.torch import load_file
    from chatterbox.models.voice_encoder import VoiceEncoder
    with weights_loaded_after():
        ve = VoiceEncoder()
    ve.load_state_dict(load_file(Path(snapshot) / build.VE_FILE))  # strict (default)
    return ve.eval()


def load_t3(snapshot: Path, keep_wte: bool = False):
    """T3 as from_local builds it (strict load, then `del t3.tfmr.wte`)."""
    from safetensors.torch import load_file
    from chatterbox.models.t3 import T3
    variant = snapshot_variant(snapshot)
    with weights_loaded_after():
        t3 = T3(build.t3_config(variant))
    state = load_file(Path(snapshot) / build.T3_FILES[variant])
    if "model" in state.keys():
        state = state["model"][0]
    t3.load_state_dict(state)  # strict (default)
    if not keep_wte:
        del t3.tfmr.wte
    return t3.eval()


def load_s3gen(snapshot: Path):
    from safetensors.torch import load_file
    from chatterbox.models.s3gen import S3Gen
    with weights_loaded_after():
        s3gen = S3Gen(meanflow=True)
    s3gen.load_state_dict(load_file(Path(snapshot) / build.S3GEN_FILE), strict=True)
    return s3gen.eval()


def load_tokenizer(snapshot: Path):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(snapshot))
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_conds(snapshot: Path):
    from chatterbox.tts_turbo import Conditionals
    return Conditionals.load(Path(snapshot) / build.CONDS_FILE, map_location="cpu")


# --------------------------------------------------------------------------
# Helpers for string arrays
# --------------------------------------------------------------------------

def _strings(inputs: Inputs, key: str = "texts") -> list[str]:
    arr = np.asarray(inputs[key])
    return [str(s) for s in arr.reshape(-1)]


def _shape(t) -> np.ndarray:
    return np.asarray(tuple(t.shape), dtype=np.int64)


# --------------------------------------------------------------------------
# Stages
# --------------------------------------------------------------------------

@stage("punc_norm")
def punc_norm_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """texts: unicode array -> texts: `chatterbox.tts_turbo.punc_norm` of each."""
    from chatterbox.tts_turbo import punc_norm
    return {"texts": np.array([punc_norm(s) for s in _strings(inputs)], dtype=np.str_)}


@stage("tokenize")
def tokenize_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """texts -> ids (int32, all texts concatenated) + offsets (int64, n+1).

    The snapshot's HF tokenizer `input_ids`, no normalisation. Optional input
    `truncation` (bool scalar) passes truncation=True as `generate` does.
    """
    tok = load_tokenizer(snapshot)
    trunc = bool(np.asarray(inputs.get("truncation", False)))
    ids, offsets = [], [0]
    for s in _strings(inputs):
        one = tok(s, truncation=trunc)["input_ids"]
        ids.extend(one)
        offsets.append(len(ids))
    return {"ids": np.asarray(ids, dtype=np.int32), "offsets": np.asarray(offsets, dtype=np.int64),
            "vocab_size": np.asarray(len(tok), dtype=np.int64)}


@stage("check_snapshot")
def check_snapshot_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """Load every file of a snapshot into its reference class (strict) and report shapes."""
    import gc
    snapshot = Path(snapshot)
    out: Inputs = {}
    out["variant"] = np.array(snapshot_variant(snapshot))

    ve = load_ve(snapshot)
    out["ve_n_params"] = np.asarray(sum(p.numel() for p in ve.parameters()))
    del ve

    t3 = load_t3(snapshot, keep_wte=True)
    cfg = t3.cfg
    out["t3_n_layer"] = np.asarray(cfg.n_layer)
    out["t3_n_embd"] = np.asarray(cfg.n_embd)
    out["t3_n_head"] = np.asarray(cfg.n_head)
    out["t3_n_positions"] = np.asarray(cfg.n_positions)
    out["t3_n_params"] = np.asarray(sum(p.numel() for p in t3.parameters()))
    out["t3_text_emb"] = _shape(t3.text_emb.weight)
    out["t3_speech_emb"] = _shape(t3.speech_emb.weight)
    out["t3_speech_head"] = _shape(t3.speech_head.weight)
    out["t3_speech_head_bias"] = _shape(t3.speech_head.bias)
    out["t3_text_head"] = _shape(t3.text_head.weight)
    out["t3_wte"] = _shape(t3.tfmr.wte.weight)
    out["t3_wpe"] = _shape(t3.tfmr.wpe.weight)
    out["t3_n_blocks"] = np.asarray(len(t3.tfmr.h))
    out["t3_spkr_enc"] = _shape(t3.cond_enc.spkr_enc.weight)
    out["t3_has_perceiver"] = np.asarray(t3.cond_enc.perceiver is not None)
    out["t3_has_emotion_adv_fc"] = np.asarray(t3.cond_enc.emotion_adv_fc is not None)
    out["t3_finite"] = np.asarray(all(torch.isfinite(p).all().item() for p in t3.parameters()))
    del t3
    gc.collect()

    s3 = load_s3gen(snapshot)
    sd = s3.state_dict()
    out["s3gen_n_tensors"] = np.asarray(len(sd))
    out["s3gen_n_params"] = np.asarray(sum(p.numel() for p in s3.parameters()))
    out["s3gen_n_weight_norm"] = np.asarray(sum(1 for k in sd if ".parametrizations.weight." in k))
    out["s3gen_finite"] = np.asarray(all(torch.isfinite(v).all().item()
                                         for v in sd.values() if v.is_floating_point()))
    del s3, sd
    gc.collect()

    tok = load_tokenizer(snapshot)
    out["tokenizer_len"] = np.asarray(len(tok))
    out["tokenizer_eos_id"] = np.asarray(tok.eos_token_id)
    out["tokenizer_class"] = np.array(type(tok).__name__)
    added = {t: tok.convert_tokens_to_ids(t) for t in build.PARALINGUISTIC_TAGS}
    out["added_tokens"] = np.array(list(added), dtype=np.str_)
    out["added_token_ids"] = np.asarray(list(added.values()), dtype=np.int64)

    conds = load_conds(snapshot)
    t3c, gen = conds.t3, conds.gen
    out["cond_t3_fields"] = np.array(sorted(t3c.__dict__), dtype=np.str_)
    out["cond_speaker_emb"] = _shape(t3c.speaker_emb)
    out["cond_speaker_emb_norm"] = np.asarray(float(t3c.speaker_emb.norm()))
    out["cond_prompt_speech_tokens"] = _shape(t3c.cond_prompt_speech_tokens)
    out["cond_prompt_speech_tokens_dtype"] = np.array(str(t3c.cond_prompt_speech_tokens.dtype))
    out["cond_prompt_speech_tokens_max"] = np.asarray(int(t3c.cond_prompt_speech_tokens.max()))
    out["cond_emotion_adv"] = np.asarray(float(torch.as_tensor(t3c.emotion_adv).flatten()[0]))
    out["cond_clap_emb_is_none"] = np.asarray(t3c.clap_emb is None)
    out["cond_prompt_speech_emb_is_none"] = np.asarray(t3c.cond_prompt_speech_emb is None)
    out["cond_gen_fields"] = np.array(sorted(gen), dtype=np.str_)
    out["cond_prompt_token"] = _shape(gen["prompt_token"])
    out["cond_prompt_token_len"] = gen["prompt_token_len"].numpy().astype(np.int64)
    out["cond_prompt_feat"] = _shape(gen["prompt_feat"])
    out["cond_prompt_feat_len_is_none"] = np.asarray(gen["prompt_feat_len"] is None)
    out["cond_embedding"] = _shape(gen["embedding"])
    return out


@stage("from_local")
def from_local_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """Load a Turbo snapshot with the official `ChatterboxTurboTTS.from_local`.

    (Nano cannot go through it: from_local hard-codes t3_turbo_v1.safetensors.)
    """
    from chatterbox.tts_turbo import ChatterboxTurboTTS
    if snapshot_variant(snapshot) != "turbo":
        raise ValueError("from_local only reads Turbo snapshots (t3_turbo_v1.safetensors)")
    m = ChatterboxTurboTTS.from_local(str(snapshot), "cpu")
    return {"tokenizer_len": np.asarray(len(m.tokenizer)),
            "has_wte": np.asarray(hasattr(m.t3.tfmr, "wte")),
            "n_layer": np.asarray(len(m.t3.tfmr.h)),
            "conds_speaker_emb": _shape(m.conds.t3.speaker_emb),
            "conds_prompt_feat": _shape(m.conds.gen["prompt_feat"])}


# Stages of later issues live in their own modules and register themselves here.
from . import stages_convert, stages_t3, stages_s3gen, stages_hift, stages_features, stages_cfm  # noqa: E402,F401
from . import stages_s3tok  # noqa: E402,F401
from . import stages_campplus  # noqa: E402,F401
from . import stages_voice, stages_bench  # noqa: E402,F401
from . import stages_mtl, stages_mtl_t3  # noqa: E402,F401
from . import stages_mtl_cfm  # noqa: E402,F401
from . import stages_perth  # noqa: E402,F401
from . import stages_vc  # noqa: E402,F401
