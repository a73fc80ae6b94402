"""The snapshot's GPT-2 byte-level BPE tokenizer files -> GGUF metadata arrays."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from engine_native.convert.errors import ConvertError

TOKEN_NORMAL, TOKEN_CONTROL, TOKEN_USER_DEFINED = 1, 3, 4  # gguf token types


@dataclass
class AddedToken:
    content: str
    id: int
    special: bool = False
    lstrip: bool = False
    rstrip: bool = False
    normalized: bool = True
    single_word: bool = False


@dataclass
class Tokenizer:
    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    added: list[AddedToken] = field(default_factory=list)
    bos_id: int = 50256
    eos_id: int = 50256


def _read_json(path: Path):
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConvertError(f"{path}: missing (the snapshot's tokenizer needs it)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ConvertError(f"{path}: not valid JSON ({e})") from None


def read_tokenizer(snapshot: Path) -> Tokenizer:
    vocab: dict[str, int] = _read_json(snapshot / "vocab.json")
    merges_path = snapshot / "merges.txt"
    if not merges_path.exists():
        raise ConvertError(f"{merges_path}: missing (the snapshot's tokenizer needs it)")
    merges = [
        line for line in merges_path.read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#version")
    ]

    added: dict[int, AddedToken] = {}
    added_json = snapshot / "added_tokens.json"
    if added_json.exists():
        for content, idx in _read_json(added_json).items():
            added[int(idx)] = AddedToken(content, int(idx))
    config_path = snapshot / "tokenizer_config.json"
    if config_path.exists():
        for idx, spec in (_read_json(config_path).get("added_tokens_decoder") or {}).items():
            tok = AddedToken(spec["content"], int(idx))
            for flag in ("special", "lstrip", "rstrip", "normalized", "single_word"):
                if flag in spec:
                    setattr(tok, flag, bool(spec[flag]))
            added[int(idx)] = tok

    size = max([*vocab.values(), *added.keys()]) + 1
    tokens: list[str | None] = [None] * size
    types = [TOKEN_NORMAL] * size
    for text, idx in vocab.items():
        tokens[idx] = text
    for idx, tok in added.items():
        if tokens[idx] is not None and tokens[idx] != tok.content:
            raise ConvertError(f"{snapshot}: added token {tok.content!r} reuses id {idx} of {tokens[idx]!r}")
        tokens[idx] = tok.content
        types[idx] = TOKEN_CONTROL if tok.special else TOKEN_USER_DEFINED
    holes = [i for i, t in enumerate(tokens) if t is None]
    if holes:
        raise ConvertError(f"{snapshot}: tokenizer ids are not contiguous (first missing id {holes[0]})")

    eos = vocab.get("<|endoftext|>", size - 1)
    return Tokenizer(tokens=tokens, token_types=types, merges=merges,
                     added=sorted(added.values(), key=lambda t: t.id), bos_id=eos, eos_id=eos)
