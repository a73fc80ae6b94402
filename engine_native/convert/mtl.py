"""The Multilingual (MTL) pieces of the converter: the Llama T3, the grapheme tokenizer
and the Cangjie table. See ../shared/MULTILINGUAL.md (sections 1, 2, 6, 10).

Reference: `chatterbox-tts` 0.1.7 `ChatterboxMultilingualTTS.from_local`:
    t3_mtl23ls_v2.safetensors  T3(T3Config.multilingual())  (LlamaModel, 30 x 1024, SwiGLU 4096)
    s3gen.pt, ve.pt            torch.save state dicts (read by torch_pickle.load_pt)
    grapheme_mtl_merged_expanded_v1.json   tokenizers.Tokenizer JSON (character BPE)
    Cangjie5_TC.json           ["glyph\\tcode[\\t...]", ...] (root of the snapshot, or the
                               hf_hub_download cache layout the reference reads it from)
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from engine_native.convert.errors import ConvertError
from engine_native.language import LANGUAGES  # mtl_tts.SUPPORTED_LANGUAGES

T3_FILE = "t3_mtl23ls_v2.safetensors"
S3GEN_FILE = "s3gen.pt"
VE_FILE = "ve.pt"
TOKENIZER_FILE = "grapheme_mtl_merged_expanded_v1.json"
CANGJIE_FILE = "Cangjie5_TC.json"
HF_CACHE_REPO = "models--ResembleAI--chatterbox"

# alignment_stream_analyzer.LLAMA_ALIGNED_HEADS, flattened (layer, head, layer, head, ...)
ALIGNED_HEADS = (12, 15, 13, 11, 9, 2)
TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED = 1, 3, 4


def _count(state: dict, pattern: str) -> int:
    rx = re.compile(pattern)
    return len({m.group(1) for k in state if (m := rx.match(k))})


# --- T3 (Llama) ------------------------------------------------------------------------------

def t3_llama_hparams(t3: dict[str, np.ndarray], source: str) -> dict:
    """Dimensions from the tensors; the rest are LLAMA_520M_CONFIG_DICT / T3Config constants."""
    try:
        n_embd = t3["text_emb.weight"].shape[1]
        q = t3["tfmr.layers.0.self_attn.q_proj.weight"]
        k = t3["tfmr.layers.0.self_attn.k_proj.weight"]
        head_dim = 64                                    # LLAMA_520M_CONFIG_DICT["head_dim"]
        hp = {
            "t3.arch": "llama",
            "t3.n_layer": _count(t3, r"tfmr\.layers\.(\d+)\."),
            "t3.n_embd": n_embd,
            "t3.n_head": q.shape[0] // head_dim,
            "t3.n_kv_head": k.shape[0] // head_dim,
            "t3.head_dim": head_dim,
            "t3.n_ff": t3["tfmr.layers.0.mlp.gate_proj.weight"].shape[0],
            "t3.rms_eps": 1e-5,
            "t3.activation": "silu",
            "t3.rope.theta": 500000.0,
            "t3.rope.type": "llama3",
            "t3.rope.factor": 8.0,
            "t3.rope.low_freq_factor": 1.0,
            "t3.rope.high_freq_factor": 4.0,
            "t3.rope.orig_max_pos": 8192,
            "t3.text_vocab": t3["text_emb.weight"].shape[0],
            "t3.speech_vocab": t3["speech_emb.weight"].shape[0],
            "t3.text_pos_len": t3["text_pos_emb.emb.weight"].shape[0],
            "t3.speech_pos_len": t3["speech_pos_emb.emb.weight"].shape[0],
            "t3.speaker_embed_size": t3["cond_enc.spkr_enc.weight"].shape[1],
            "t3.perceiver.n_query": t3["cond_enc.perceiver.pre_attention_query"].shape[1],
            "t3.perceiver.n_head": 4,                    # Perceiver(num_attn_heads=4)
            "t3.perceiver.ln_eps": 1e-5,
            "t3.emotion_adv": "cond_enc.emotion_adv_fc.weight" in t3,
        }
    except KeyError as e:
        raise ConvertError(f"{source}: not a Llama (Multilingual) T3 checkpoint (missing {e.args[0]})") from None
    if q.shape[0] % head_dim or k.shape[0] % head_dim:
        raise ConvertError(f"{source}: attention width {q.shape[0]} is not a multiple of {head_dim}")
    if not hp["t3.emotion_adv"]:
        raise ConvertError(f"{source}: no emotion_adv_fc: not the Multilingual T3 this converter knows")
    if hp["t3.n_head"] != hp["t3.n_kv_head"]:
        raise ConvertError(f"{source}: grouped-query attention ({hp['t3.n_head']} / {hp['t3.n_kv_head']} heads) "
                           "is not the Multilingual T3 this converter knows")
    heads = ALIGNED_HEADS
    if max(heads[0::2]) >= hp["t3.n_layer"] or max(heads[1::2]) >= hp["t3.n_head"]:
        raise ConvertError(f"{source}: {hp['t3.n_layer']} layers x {hp['t3.n_head']} heads cannot hold the "
                           f"alignment analyzer's heads {list(zip(heads[0::2], heads[1::2]))}")
    hp.update({
        "t3.start_text_token": 255,
        "t3.stop_text_token": 0,
        "t3.start_speech_token": 6561,
        "t3.stop_speech_token": 6562,
        "t3.speech_cond_prompt_len": 150,
        "t3.prompt_seconds": 6,          # ChatterboxMultilingualTTS.ENC_COND_LEN = 6 * S3_SR
        "t3.max_text_tokens": hp["t3.text_pos_len"] - 2,
        "t3.max_speech_tokens": hp["t3.speech_pos_len"] - 4,
        # AlignmentStreamAnalyzer
        "t3.align.heads": list(ALIGNED_HEADS),
        "t3.align.window_lo": -4,        # -4 < cur - text_position < 7
        "t3.align.window_hi": 7,
        "t3.align.complete_margin": 3,   # text_position >= S - 3
        "t3.align.long_tail": 5.0,
        "t3.align.repetition": 5.0,
        "t3.align.min_text": 5,          # EOS suppressed only when S > 5
        "t3.align.force_value": 32768.0,
        # ChatterboxMultilingualTTS.generate() defaults
        "sampling.temperature": 0.8,
        "sampling.top_k": 0,
        "sampling.top_p": 1.0,
        "sampling.repetition_penalty": 2.0,
        "sampling.min_p": 0.05,
        "sampling.cfg_weight": 0.5,
        "sampling.exaggeration": 0.5,
        "sampling.max_gen_len": 1000,
        # prepare_conditionals
        "voice.enc_cond_seconds": 6,
        "voice.dec_cond_seconds": 10,
        "voice.norm_loudness": False,
    })
    return hp


_LLAMA_LAYER = re.compile(r"^tfmr\.layers\.(\d+)\.(.+)$")


def t3_llama_tensors(state: dict[str, np.ndarray], source: str):
    """T3 (Llama). `tfmr.embed_tokens` and `text_head` are unused by inference and dropped.
    nn.Linear weights are (out, in), already ggml's layout: no transposes."""
    for key, arr in state.items():
        if key in ("tfmr.embed_tokens.weight", "text_head.weight", "text_head.bias"):
            continue
        if m := _LLAMA_LAYER.match(key):
            name = f"t3.blk.{m.group(1)}.{m.group(2)}"
        elif key.startswith("tfmr."):
            name = "t3." + key[len("tfmr."):]
        else:
            name = "t3." + key
        yield name, arr


# --- the grapheme tokenizer ------------------------------------------------------------------

@dataclass
class GraphemeTokenizer:
    tokens: list[str]
    token_types: list[int]
    merges_a: list[str]
    merges_b: list[str]
    added: list[dict] = field(default_factory=list)
    unk_id: int = 1
    space_id: int = 2
    start_id: int = 255
    stop_id: int = 0


def _refuse(path: Path, what: str) -> ConvertError:
    return ConvertError(f"{path}: {what}; the native grapheme tokenizer reads only a character BPE "
                        "with the Whitespace pre-tokenizer and no normalizer (MULTILINGUAL.md 6.3)")


def read_grapheme_tokenizer(snapshot: Path) -> GraphemeTokenizer:
    path = snapshot / TOKENIZER_FILE
    try:
        spec = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConvertError(f"{path}: missing (the Multilingual tokenizer)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConvertError(f"{path}: not valid JSON ({e})") from None
    model = spec.get("model") or {}
    if model.get("type") != "BPE":
        raise _refuse(path, f"model type {model.get('type')!r} is not BPE")
    for key in ("dropout", "continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(key) not in (None, ""):
            raise _refuse(path, f"model.{key} = {model.get(key)!r}")
    for key in ("fuse_unk", "byte_fallback", "ignore_merges"):
        if model.get(key):
            raise _refuse(path, f"model.{key} = {model.get(key)!r}")
    if spec.get("normalizer") is not None:
        raise _refuse(path, f"normalizer {spec['normalizer'].get('type')!r}")
    if (spec.get("pre_tokenizer") or {}).get("type") != "Whitespace":
        raise _refuse(path, f"pre-tokenizer {spec.get('pre_tokenizer')!r}")
    if spec.get("post_processor") is not None:
        raise _refuse(path, f"post-processor {spec['post_processor'].get('type')!r}")

    vocab: dict[str, int] = model.get("vocab") or {}
    added = spec.get("added_tokens") or []
    size = max([*vocab.values(), *(a["id"] for a in added)], default=-1) + 1
    tokens: list[str | None] = [None] * size
    types = [TOKEN_NORMAL] * size
    for text, idx in vocab.items():
        tokens[idx] = text
    for a in added:
        for flag in ("single_word", "lstrip", "rstrip"):
            if a.get(flag):
                raise _refuse(path, f"added token {a['content']!r} has {flag}=true")
        if tokens[a["id"]] is not None and tokens[a["id"]] != a["content"]:
            raise ConvertError(f"{path}: added token {a['content']!r} reuses id {a['id']} of {tokens[a['id']]!r}")
        tokens[a["id"]] = a["content"]
        types[a["id"]] = TOKEN_CONTROL if a.get("special") else TOKEN_USER_DEFINED
    holes = [i for i, t in enumerate(tokens) if t is None]
    if holes:
        raise ConvertError(f"{path}: token ids are not contiguous (first missing id {holes[0]})")

    merges_a, merges_b = [], []
    for m in model.get("merges") or []:
        if isinstance(m, str):
            parts = m.split(" ")
            if len(parts) != 2:
                raise ConvertError(f"{path}: merge {m!r} is not two symbols")
        else:
            parts = list(m)
            if len(parts) != 2:
                raise ConvertError(f"{path}: merge {m!r} is not two symbols")
        merges_a.append(parts[0])
        merges_b.append(parts[1])
    ids = {t: i for i, t in enumerate(tokens)}
    for name in ("[UNK]", "[SPACE]", "[START]", "[STOP]"):
        if name not in ids:
            raise ConvertError(f"{path}: no {name} token")
    if model.get("unk_token") != "[UNK]":
        raise _refuse(path, f"unk_token {model.get('unk_token')!r}")
    missing = [f"[{lang}]" for lang in LANGUAGES if f"[{lang}]" not in ids]
    if missing:
        raise ConvertError(f"{path}: language tags missing: {', '.join(missing)}")
    return GraphemeTokenizer(tokens=tokens, token_types=types, merges_a=merges_a, merges_b=merges_b,
                             added=sorted(added, key=lambda a: a["id"]), unk_id=ids["[UNK]"],
                             space_id=ids["[SPACE]"], start_id=ids["[START]"], stop_id=ids["[STOP]"])


def find_cangjie(snapshot: Path) -> Path | None:
    """Where the table is: the snapshot root (what `--download` fetches), else the
    hf_hub_download cache layout under the snapshot (what the reference reads)."""
    direct = snapshot / CANGJIE_FILE
    if direct.is_file():
        return direct
    ref = snapshot / HF_CACHE_REPO / "refs" / "main"
    if ref.is_file():
        cached = snapshot / HF_CACHE_REPO / "snapshots" / ref.read_text() / CANGJIE_FILE
        if cached.is_file():
            return cached
    return None


def read_cangjie(snapshot: Path) -> tuple[list[str], list[str]]:
    """(glyphs, codes) in file order (the native side rebuilds word2cj / cj2word from them)."""
    path = find_cangjie(snapshot)
    if path is None:
        return [], []
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConvertError(f"{path}: not valid JSON ({e})") from None
    glyphs, codes = [], []
    for i, entry in enumerate(data if isinstance(data, list) else []):
        parts = entry.split("\t") if isinstance(entry, str) else []
        if len(parts) < 2:
            raise ConvertError(f"{path}: entry {i} is not 'glyph<TAB>code' ({entry!r})")
        glyphs.append(parts[0])
        codes.append(parts[1])
    if not isinstance(data, list):
        raise ConvertError(f"{path}: not a JSON list of 'glyph<TAB>code' strings")
    return glyphs, codes


def tokenizer_metadata(tok: GraphemeTokenizer, glyphs: list[str], codes: list[str]) -> dict:
    """Metadata under `chatterbox.` (besides the gguf tokenizer.ggml.* keys)."""
    meta = {
        "tokenizer.model": "chatterbox-grapheme",
        "tokenizer.pre_tokenizer": "Whitespace",
        "tokenizer.merges_a": tok.merges_a,
        "tokenizer.merges_b": tok.merges_b,
        "tokenizer.unk_id": tok.unk_id,
        "tokenizer.space_id": tok.space_id,
        "tokenizer.languages": list(LANGUAGES),
        "added_tokens.id": [a["id"] for a in tok.added],
        "added_tokens.special": [bool(a.get("special")) for a in tok.added],
        "added_tokens.normalized": [bool(a.get("normalized")) for a in tok.added],
        "added_tokens.lstrip": [bool(a.get("lstrip")) for a in tok.added],
        "added_tokens.rstrip": [bool(a.get("rstrip")) for a in tok.added],
        "added_tokens.single_word": [bool(a.get("single_word")) for a in tok.added],
        "cangjie.n_entries": len(glyphs),
    }
    if glyphs:                      # gguf cannot type an empty array: absent = no table
        meta["cangjie.glyphs"] = glyphs
        meta["cangjie.codes"] = codes
    if not tok.merges_a:
        del meta["tokenizer.merges_a"], meta["tokenizer.merges_b"]
    return meta
