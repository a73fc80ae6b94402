"""A tiny Chatterbox model file (a few KB, zero weights) that loads like a real one: the
seed of the model-loader fuzz target (engine_native/fuzz/fuzz_model_file.cpp) and a small
model for the Python targets that need one.

A real converted model is a gigabyte; the fuzzer needs a file of the same structure small
enough to mutate thousands of times a second. The recipe (tests/fuzz/tiny_model_<variant>.json)
holds the real model's metadata with every network dimension shrunk, a tokenizer of the 256
byte tokens and a few merges, and the tensor table the engine's own constructors ask for at
those dimensions. `write(path, variant)` makes the file from the recipe with the gguf package.

`python -m tests.fuzz.tiny_model discover --variant nano` (re)makes a recipe: it starts from
the real converted model's metadata with the overrides below and no tensors, builds every
component through engine_native._core, and adds each tensor a constructor says is missing
or reshapes one it says has the wrong shape, until all of them load.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

# Network dimensions shrunk; feature front ends (n_fft, hops, mel counts) shrunk consistently.
OVERRIDES = {
    "chatterbox.t3.n_layer": 1, "chatterbox.t3.n_embd": 8, "chatterbox.t3.n_head": 2, "chatterbox.t3.n_ff": 16,
    "chatterbox.t3.n_ctx": 32, "chatterbox.t3.speech_vocab": 16, "chatterbox.t3.speaker_embed_size": 4,
    "chatterbox.t3.start_speech_token": 14, "chatterbox.t3.stop_speech_token": 15,
    "chatterbox.t3.speech_cond_prompt_len": 4, "chatterbox.t3.max_text_tokens": 8,
    "chatterbox.t3.max_speech_tokens": 8,
    "chatterbox.s3gen.n_mels": 8, "chatterbox.s3gen.speech_vocab": 14, "chatterbox.s3gen.silence_token": 3,
    "chatterbox.s3gen.spk_embed_dim": 4,
    "chatterbox.s3gen.enc.d_model": 8, "chatterbox.s3gen.enc.n_head": 2, "chatterbox.s3gen.enc.n_ff": 16,
    "chatterbox.s3gen.enc.n_blocks": 1, "chatterbox.s3gen.enc.n_up_blocks": 1,
    "chatterbox.s3gen.cfm.in_channels": 32, "chatterbox.s3gen.cfm.out_channels": 8,
    "chatterbox.s3gen.cfm.channels": 8, "chatterbox.s3gen.cfm.n_mid_blocks": 1,
    "chatterbox.s3gen.cfm.n_head": 2, "chatterbox.s3gen.cfm.head_dim": 4,
    "chatterbox.hift.base_channels": 8, "chatterbox.hift.nb_harmonics": 1,
    "chatterbox.campplus.embed_dim": 4,
    "chatterbox.s3tok.n_state": 8, "chatterbox.s3tok.n_layer": 1, "chatterbox.s3tok.n_head": 2,
    "chatterbox.s3tok.codebook_size": 3, "chatterbox.s3tok.n_mels": 8, "chatterbox.s3tok.fsmn_kernel": 3,
    "chatterbox.ve.n_layer": 1, "chatterbox.ve.n_hidden": 8, "chatterbox.ve.embed_dim": 4, "chatterbox.ve.n_mels": 8,
    "chatterbox.fb.mel_24k.n_mels": 8, "chatterbox.fb.ve_mel.n_mels": 8, "chatterbox.fb.kaldi_80.n_mels": 8,
}
# Repeated blocks whose count is metadata (shrunk to one above): later copies are left out.
# Blocks counted from the tensors themselves (CAMPPlus, HiFT, the CFM's transformers) stay.
EXTRA_BLOCKS = re.compile(r"^(t3\.blk|s3gen\.enc\.(up_)?encoders|s3gen\.cfm\.mid_blocks|s3tok\.encoder\.blocks)\.[1-9]"
                          r"|^ve\.lstm\.\w+_l[1-9]")
VOICE = {"voice.speaker_emb": ("float32", [4]), "voice.cond_prompt_speech_tokens": ("int32", [4]),
         "voice.embedding": ("float32", [4]), "voice.prompt_token": ("int32", [2]),
         "voice.prompt_feat": ("float32", [4, 8])}
# Shapes no constructor names in a message (checked as element counts).
# (HiFT at base_channels 8, upsample_rates [8, 5, 3], istft_n_fft 16: source strides 15, 3, 1;
# conv_post's kernel 8 makes K x channels a multiple of 8, which its kernel needs.)
FIXED = {"hift.m_source.l_linear.weight": ("float32", [1, 2]),
         "hift.source_downs.0.weight": ("float32", [4, 18, 30]),
         "hift.source_downs.1.weight": ("float32", [2, 18, 6]),
         "hift.source_downs.2.weight": ("float32", [1, 18, 1]),
         "hift.conv_post.weight": ("float32", [18, 1, 8])}
BIG_ARRAYS = ("tokenizer.ggml.", "chatterbox.added_tokens.", "chatterbox.tokenizer.", "chatterbox.cangjie.")


def bytes_to_unicode() -> list[str]:
    """GPT-2's byte -> printable character map (the byte-level BPE alphabet)."""
    out, n = [], 0
    for b in range(256):
        printable = ord("!") <= b <= ord("~") or 0xA1 <= b <= 0xAC or 0xAE <= b <= 0xFF
        out.append(chr(b if printable else 256 + n))
        n += 0 if printable else 1
    return out


def tiny_bpe_metadata() -> list:
    """The 256 byte tokens, a few merges, the end-of-text token and one expression tag."""
    tokens = bytes_to_unicode()
    merges = ["Ġ t", "h e", "Ġt he", "i n", "e r", "Ġ a", "o n", "Ġ w", "o r", "l l"]
    for m in merges:
        tokens.append(m.replace(" ", ""))
    added = [("<|endoftext|>", True, False), ("[laugh]", False, True)]
    ids = []
    for content, _special, _norm in added:
        ids.append(len(tokens))
        tokens.append(content)
    types = [1] * (len(tokens) - len(added)) + [3, 4]
    A, S, B, I = "ARRAY", "STRING", "BOOL", "INT32"
    return [
        ["tokenizer.ggml.model", "STRING", None, "gpt2"],
        ["tokenizer.ggml.tokens", A, S, tokens],
        ["tokenizer.ggml.token_type", A, I, types],
        ["tokenizer.ggml.merges", A, S, merges],
        ["tokenizer.ggml.bos_token_id", "UINT32", None, ids[0]],
        ["tokenizer.ggml.eos_token_id", "UINT32", None, ids[0]],
        ["chatterbox.added_tokens.id", A, I, ids],
        ["chatterbox.added_tokens.special", A, B, [a[1] for a in added]],
        ["chatterbox.added_tokens.lstrip", A, B, [False, False]],
        ["chatterbox.added_tokens.rstrip", A, B, [False, False]],
        ["chatterbox.added_tokens.normalized", A, B, [a[2] for a in added]],
        ["chatterbox.added_tokens.single_word", A, B, [False, False]],
    ], len(tokens)


def field_entry(field) -> list:
    from gguf import GGUFValueType

    vtype = field.types[0]
    sub = field.types[-1] if vtype == GGUFValueType.ARRAY else None
    value = field.contents()
    return [field.name, vtype.name, sub.name if sub else None, value]


def metadata_from(model: Path) -> list:
    """The real model's metadata (its own types), big tokenizer arrays left out, dims shrunk."""
    from gguf import GGUFReader

    r = GGUFReader(str(model))
    out = []
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture" or f.name.startswith(BIG_ARRAYS):
            continue
        entry = field_entry(f)
        if f.name in OVERRIDES:
            entry[3] = OVERRIDES[f.name]
        out.append(entry)
    return out


def write(path: str | Path, variant: str = "nano", recipe: dict | None = None) -> Path:
    """The tiny model of `variant` (from its recipe) at `path`."""
    from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter

    recipe = recipe or json.loads((HERE / f"tiny_model_{variant}.json").read_text())
    w = GGUFWriter(str(path), "chatterbox")
    for name, vtype, sub, value in recipe["metadata"]:
        w.add_key_value(name, value, GGUFValueType[vtype], sub_type=GGUFValueType[sub] if sub else None)
    for name, dtype, shape in recipe["tensors"]:
        w.add_tensor(name, np.zeros(shape, dtype=dtype),
                     raw_dtype=GGMLQuantizationType.I32 if dtype == "int32" else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return Path(path)


COMPONENTS = ("Gpt2Tokenizer", "T3", "S3GenEncoder", "S3GenCfm", "HiFT", "Mel24k", "KaldiFbank", "S3TokLogMel",
              "VoiceEncoder", "CampPlus", "S3Tokenizer")
_MISSING = re.compile(r"tensor '([^']+)' is missing")
_SHAPE = re.compile(r"tensor '([^']+)' has shape \[[^\]]*\], expected \[([^\]]*)\]")
_BIAS = re.compile(r"([\w.]+)\.bias has the wrong size")
_ROWS = re.compile(r"([\w.]+) has fewer positions than ([\w.]+)")


def load_all(path: Path, done: set | None = None) -> None:
    """Builds every component (those in `done` are skipped; each one built is added)."""
    from engine_native import _core

    done = set() if done is None else done
    mf = _core.ModelFile(str(path), device="cpu", threads=1)
    for name in COMPONENTS:
        if name in done:
            continue
        cls = getattr(_core, name)
        if name == "Gpt2Tokenizer":
            cls(str(path))
        elif name == "T3":
            cls(mf, threads=1)
        else:
            cls(mf)
        done.add(name)


def discover(variant: str, source: Path, out: Path, limit: int = 5000) -> dict:
    meta = metadata_from(source)
    tok, n_tokens = tiny_bpe_metadata()
    meta = [m for m in meta if m[0] != "chatterbox.t3.text_vocab"] + tok
    meta.append(["chatterbox.t3.text_vocab", "INT32", None, n_tokens])
    from gguf import GGUFReader

    tensors: dict[str, tuple[str, list[int]]] = {}
    for t in GGUFReader(str(source)).tensors:
        if not EXTRA_BLOCKS.search(t.name):
            tensors[t.name] = VOICE.get(t.name, None) or FIXED.get(t.name) or (
                "int32" if t.tensor_type.name == "I32" else "float32", [1])
    tmp = out.with_suffix(".tmp.gguf")
    partial = out.with_suffix(".partial.json")  # progress, so that an interrupted run resumes
    if partial.exists():
        tensors.update({n: (d, s) for n, d, s in json.loads(partial.read_text())})
    tensors.update({n: v for n, v in FIXED.items() if n in tensors})
    done: set = set()  # components that load (a later fix never breaks one)
    last_msg, before_last = "", {}
    for step in range(limit):
        if step % 20 == 0:
            partial.write_text(json.dumps([[n, d, s] for n, (d, s) in tensors.items()]))
        recipe = {"metadata": meta, "tensors": [[n, d, s] for n, (d, s) in tensors.items()]}
        write(tmp, recipe=recipe)
        before = dict(tensors)
        try:
            load_all(tmp, done)
        except Exception as e:  # noqa: BLE001 - the message says what to add
            msg = str(e)
            if step and msg == last_msg and tensors == before_last:
                raise RuntimeError(f"no progress at: {msg}") from None
            last_msg, before_last = msg, before
            if m := _MISSING.search(msg):
                tensors[m.group(1)] = ("float32", [1])
                continue
            if m := _SHAPE.search(msg):
                ne = [1 if d.strip() == "*" else int(d) for d in m.group(2).split(",")]
                tensors[m.group(1)] = (tensors.get(m.group(1), ("float32",))[0], list(reversed(ne)))
                continue
            if m := _BIAS.search(msg):
                name = m.group(1) if m.group(1).startswith("hift.") else "hift." + m.group(1)
                w = tensors[name + ".weight"][1]  # numpy order: conv [Cout, Cin, K], transposed [Cin, Cout, K]
                tensors[name + ".bias"] = ("float32", [w[1] if ".ups." in name else w[0]])
                continue
            if m := _ROWS.search(msg):
                dtype, shape = tensors[m.group(1)]
                tensors[m.group(1)] = (dtype, [next(v[3] for v in meta if v[0] == m.group(2))] + shape[1:])
                continue
            tmp.unlink(missing_ok=True)
            raise RuntimeError(f"stuck at: {type(e).__name__}: {msg}") from None
        tmp.unlink(missing_ok=True)
        load_all(write(tmp, recipe=recipe))  # all of them at once, as the fuzz target does
        tmp.unlink(missing_ok=True)
        out.write_text(json.dumps(recipe, ensure_ascii=False, indent=0) + "\n")
        partial.unlink(missing_ok=True)
        return recipe
    raise RuntimeError("no fixed point")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.fuzz.tiny_model")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("discover", help="remake a recipe from a real converted model")
    d.add_argument("--variant", default="nano")
    d.add_argument("--source", type=Path, help="a converted model of that variant (default: the test cache's)")
    w = sub.add_parser("write", help="write the tiny model")
    w.add_argument("--variant", default="nano")
    w.add_argument("out", type=Path)
    a = p.parse_args(argv)
    if a.cmd == "discover":
        source = a.source
        if source is None:
            from tests.helpers.models import model_path

            source = model_path(a.variant, "f32")
        recipe = discover(a.variant, source, HERE / f"tiny_model_{a.variant}.json")
        print(f"{len(recipe['tensors'])} tensors")
    else:
        print(write(a.out, a.variant))
    return 0


if __name__ == "__main__":
    sys.exit(main())
