"""Reference stages for the Multilingual (MTL) model. REFERENCE-VENV ONLY (imports torch).

Loading follows `ChatterboxMultilingualTTS.from_local`. Two offline adjustments, both the
reference's own fallbacks:
- `spacy_pkuseg` is hidden (`sys.modules["spacy_pkuseg"] = None`) before the tokenizer is
  built: its segmenter downloads a model at construction and only ImportError is caught;
  hidden, `ChineseCangjieConverter.segmenter` is None (no extra spaces).
- `pykakasi` is hidden too when a stage is asked for `kakasi=False` (the ImportError branch of
  `hiragana_normalize`: Japanese text unchanged).
A "small" snapshot (reference_snapshot.json "size") registers its reduced Llama config as
`Llama_520M` in this process before anything builds a T3.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

from . import build_mtl
from .stages import RESETS, Inputs, _shape, _strings, stage, weights_loaded_after


def snapshot_size(snapshot: Path) -> str:
    info = Path(snapshot) / "reference_snapshot.json"
    if info.exists():
        return json.loads(info.read_text()).get("size", "full")
    return "full"


def prepare(snapshot: Path, kakasi: bool = True) -> None:
    if (Path(snapshot) / build_mtl.T3_FILE).exists() is False:
        raise ValueError(f"{snapshot}: not an MTL snapshot (no {build_mtl.T3_FILE})")
    sys.modules["spacy_pkuseg"] = None          # -> ImportError -> segmenter None
    if not kakasi:
        sys.modules["pykakasi"] = None
    build_mtl.use_size(snapshot_size(snapshot))


def _forget_converters() -> None:
    """The tokenizer keeps its language converters (pykakasi, ...) in module globals: a later
    stage asked for kakasi=False must find none, as in a fresh process."""
    tok = sys.modules.get("chatterbox.models.tokenizers.tokenizer")
    if tok is not None:
        tok._kakasi = tok._dicta = tok._russian_stresser = None


RESETS.append(_forget_converters)


def load_tokenizer(snapshot: Path, kakasi: bool = True):
    from chatterbox.models.tokenizers import MTLTokenizer
    prepare(snapshot, kakasi)
    return MTLTokenizer(str(Path(snapshot) / build_mtl.TOKENIZER_FILE))


def load_t3(snapshot: Path):
    from safetensors.torch import load_file
    from chatterbox.models.t3 import T3
    from chatterbox.models.t3.modules.t3_config import T3Config
    prepare(snapshot)
    with weights_loaded_after():
        t3 = T3(T3Config.multilingual())
    state = load_file(Path(snapshot) / build_mtl.T3_FILE)
    if "model" in state.keys():
        state = state["model"][0]
    t3.load_state_dict(state)
    return t3.eval()


def load_conds(snapshot: Path):
    from chatterbox.mtl_tts import Conditionals
    return Conditionals.load(Path(snapshot) / build_mtl.CONDS_FILE, map_location="cpu")


def _kakasi(inputs: Inputs) -> bool:
    return bool(np.asarray(inputs.get("kakasi", True)))


@stage("mtl_from_local")
def mtl_from_local_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """Load an MTL snapshot with the official `ChatterboxMultilingualTTS.from_local` (offline)."""
    from chatterbox.mtl_tts import ChatterboxMultilingualTTS
    prepare(snapshot)
    m = ChatterboxMultilingualTTS.from_local(str(snapshot), "cpu")
    cj = m.tokenizer.cangjie_converter
    hp = m.t3.cfg
    return {
        "tokenizer_len": np.asarray(m.tokenizer.tokenizer.get_vocab_size()),
        "cangjie_glyphs": np.asarray(len(cj.word2cj)),
        "cangjie_codes": np.asarray(len(cj.cj2word)),
        "segmenter_is_none": np.asarray(cj.segmenter is None),
        "is_multilingual": np.asarray(m.t3.hp.is_multilingual),
        "n_layer": np.asarray(hp.num_hidden_layers),
        "n_embd": np.asarray(hp.hidden_size),
        "n_ff": np.asarray(hp.intermediate_size),
        "n_head": np.asarray(hp.num_attention_heads),
        "t3_n_params": np.asarray(sum(p.numel() for p in m.t3.parameters())),
        "s3gen_meanflow": np.asarray(bool(getattr(m.s3gen, "meanflow", False))),
        "conds_speaker_emb": _shape(m.conds.t3.speaker_emb),
        "conds_prompt_tokens": _shape(m.conds.t3.cond_prompt_speech_tokens),
        "conds_emotion_adv": np.asarray(float(m.conds.t3.emotion_adv.flatten()[0])),
        "conds_prompt_feat": _shape(m.conds.gen["prompt_feat"]),
        "languages": np.array(sorted(m.get_supported_languages()), dtype=np.str_),
    }


@stage("mtl_punc_norm")
def mtl_punc_norm_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """texts -> texts: `chatterbox.mtl_tts.punc_norm` of each."""
    from chatterbox.mtl_tts import punc_norm
    return {"texts": np.array([punc_norm(s) for s in _strings(inputs)], dtype=np.str_)}


@stage("mtl_tokenize")
def mtl_tokenize_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """texts, langs ("" = no language) [, kakasi] -> ids (int32, concatenated) + offsets:
    `MTLTokenizer.text_to_tokens(text, language_id=lang)` (no punc_norm, no SOT/EOT)."""
    tok = load_tokenizer(snapshot, _kakasi(inputs))
    texts, langs = _strings(inputs), _strings(inputs, "langs")
    ids, offsets = [], [0]
    for s, lang in zip(texts, langs, strict=True):
        one = tok.text_to_tokens(s, language_id=lang or None)[0].tolist()
        ids.extend(one)
        offsets.append(len(ids))
    return {"ids": np.asarray(ids, dtype=np.int32), "offsets": np.asarray(offsets, dtype=np.int64)}


@stage("mtl_normalize")
def mtl_normalize_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """texts, langs [, kakasi] -> texts: lower + NFKD + the language step (what `encode` feeds
    the tag / [SPACE] / BPE steps with)."""
    from chatterbox.models.tokenizers import tokenizer as tk
    tok = load_tokenizer(snapshot, _kakasi(inputs))
    out = []
    for s, lang in zip(_strings(inputs), _strings(inputs, "langs"), strict=True):
        txt = tok.preprocess_text(s, language_id=lang or None)
        if lang == "zh":
            txt = tok.cangjie_converter(txt)
        elif lang == "ja":
            txt = tk.hiragana_normalize(txt)
        elif lang == "he":
            txt = tk.add_hebrew_diacritics(txt)
        elif lang == "ko":
            txt = tk.korean_normalize(txt)
        elif lang == "ru":
            txt = tk.add_russian_stress(txt)
        out.append(txt)
    return {"texts": np.array(out, dtype=np.str_)}


@stage("mtl_check_snapshot")
def mtl_check_snapshot_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """The T3 state dict's shapes and names, as the converter will see them."""
    t3 = load_t3(snapshot)
    sd = t3.state_dict()
    return {"names": np.array(list(sd), dtype=np.str_),
            "n_params": np.asarray(sum(v.numel() for v in sd.values())),
            "finite": np.asarray(all(bool(torch.isfinite(v).all()) for v in sd.values()))}


@stage("mtl_unicode")
def mtl_unicode_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """texts -> lower (str.lower), nfkd (unicodedata.normalize("NFKD")) of each, as Python 3.11
    (Unicode 14) computes them; `snapshot` is unused."""
    import unicodedata
    texts = _strings(inputs)
    return {"lower": np.array([s.lower() for s in texts], dtype=np.str_),
            "nfkd": np.array([unicodedata.normalize("NFKD", s) for s in texts], dtype=np.str_)}


@stage("mtl_text")
def mtl_text_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """Every text seam in one process (the torch import dominates a stage's cost):
    texts, langs [, kakasi] [, punc_texts] [, unicode_texts] -> normalized, ids + offsets,
    punc_norm (of punc_texts), lower / nfkd (of unicode_texts)."""
    out: Inputs = {}
    out.update(mtl_normalize_stage(snapshot, inputs))
    out["normalized"] = out.pop("texts")
    out.update(mtl_tokenize_stage(snapshot, inputs))
    if "punc_texts" in inputs:
        out["punc_norm"] = mtl_punc_norm_stage(snapshot, {"texts": inputs["punc_texts"]})["texts"]
    if "unicode_texts" in inputs:
        out.update(mtl_unicode_stage(snapshot, {"texts": inputs["unicode_texts"]}))
    return out


class _StopAtS3Gen(Exception):
    """Raised by the patched S3Gen: generate() is followed only up to its speech tokens."""


@stage("mtl_engine")
def mtl_engine_stage(snapshot: Path, inputs: Inputs) -> Inputs:
    """What Engine tests compare with, in one process (one model load):
    - paths [, exaggeration]: `ChatterboxMultilingualTTS.prepare_conditionals(path, exaggeration)`
      of each; outputs "voice{i}.{tensor}" (the five voice tensors and emotion_adv);
    - texts, langs ("" = none), n [, voices (per text: an index into paths; -1: conds.pt),
      exaggerations, cfg_weights (per text)]: `generate(text, lang, exaggeration=...,
      cfg_weight=...)` up to its speech tokens with `torch.multinomial`
      -> the first maximum (greedy) and `max_new_tokens=n`; outputs "tokens{j}" (row 0,
      the stop token kept, before drop_invalid_tokens) and "text_ids{j}" (as T3 gets them)."""
    from chatterbox.mtl_tts import ChatterboxMultilingualTTS
    prepare(snapshot)
    torch.set_num_threads(int(np.asarray(inputs.get("threads", 2))))
    tts = ChatterboxMultilingualTTS.from_local(str(snapshot), "cpu")
    builtin = tts.conds
    exaggeration = float(np.asarray(inputs.get("exaggeration", 0.5)))
    out: Inputs = {}
    voices = []
    for i, path in enumerate(_strings(inputs, "paths") if "paths" in inputs else []):
        tts.prepare_conditionals(path, exaggeration=exaggeration)
        t3, gen = tts.conds.t3, tts.conds.gen
        v = {"speaker_emb": t3.speaker_emb, "cond_prompt_speech_tokens": t3.cond_prompt_speech_tokens,
             "emotion_adv": t3.emotion_adv, "embedding": gen["embedding"], "prompt_token": gen["prompt_token"],
             "prompt_feat": gen["prompt_feat"][0]}
        for k, t in v.items():
            a = t.detach().numpy()
            out[f"voice{i}.{k}"] = (a.reshape(-1) if k != "prompt_feat" else a).astype(
                np.int32 if "token" in k else np.float32)
        voices.append(tts.conds)
    if "texts" not in inputs:
        return out
    n = int(np.asarray(inputs["n"]))
    texts = _strings(inputs)
    per = {k: np.broadcast_to(np.asarray(inputs.get(k, d)), (len(texts),))
           for k, d in (("voices", -1), ("exaggerations", 0.5), ("cfg_weights", 0.5))}
    rec = {}
    t3_inference, s3gen_inference, multinomial = tts.t3.inference, tts.s3gen.inference, torch.multinomial

    def t3_spy(**kw):
        rec["text_ids"] = kw["text_tokens"][0].clone()
        kw["max_new_tokens"] = n
        return t3_inference(**kw)

    def s3gen_spy(speech_tokens, **kw):
        rec["tokens"] = speech_tokens.clone()
        raise _StopAtS3Gen

    tts.t3.inference, tts.s3gen.inference = t3_spy, s3gen_spy
    torch.multinomial = lambda probs, num_samples=1, *a, **k: torch.argmax(probs, dim=-1, keepdim=True)
    import chatterbox.mtl_tts as mtl
    drop = mtl.drop_invalid_tokens
    mtl.drop_invalid_tokens = lambda x: x          # keep what T3 said (stop token included)
    try:
        for j, (text, lang) in enumerate(zip(texts, _strings(inputs, "langs"), strict=True)):
            which = int(per["voices"][j])
            tts.conds = builtin if which < 0 else voices[which]
            try:
                tts.generate(text, lang or None, exaggeration=float(per["exaggerations"][j]),
                             cfg_weight=float(per["cfg_weights"][j]))
            except _StopAtS3Gen:
                pass
            out[f"tokens{j}"] = rec["tokens"].reshape(-1).numpy().astype(np.int32)
            out[f"text_ids{j}"] = rec["text_ids"].reshape(-1).numpy().astype(np.int32)
    finally:
        tts.t3.inference, tts.s3gen.inference, torch.multinomial = t3_inference, s3gen_inference, multinomial
        mtl.drop_invalid_tokens = drop
    return out
