"""Files the fuzz targets read besides their inputs, made from the test cache's real models:

    bpe.gguf        the tokenizer metadata of a converted Turbo model (the GPT-2 vocabulary, its
                    merges and added tokens): the vocabulary of fuzz_bpe
    grapheme.gguf   the tokenizer metadata of a converted Multilingual model (graphemes, merges,
                    languages, the Cangjie table): the vocabulary of fuzz_grapheme
    seeds/model_file/
                    the tiny Nano model (tests/fuzz/tiny_model.py) and its header alone: the
                    generated seeds of fuzz_model_file (no model is committed)

    python -m tests.fuzz.fuzz_data OUTDIR     (scripts/fuzz.sh runs it; existing files are kept)
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.fuzz import tiny_model

TOKENIZER_KEYS = ("general.", "tokenizer.", "chatterbox.variant", "chatterbox.added_tokens.", "chatterbox.tokenizer.",
                  "chatterbox.cangjie.")


def metadata_only(model: Path, out: Path, keys=TOKENIZER_KEYS) -> Path:
    """A GGUF holding only the metadata of `model` whose keys start with one of `keys`."""
    from gguf import GGUFReader, GGUFValueType, GGUFWriter

    r = GGUFReader(str(model))
    tmp = out.with_suffix(".tmp")
    w = GGUFWriter(str(tmp), "chatterbox")
    for f in r.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture" or not f.name.startswith(keys):
            continue
        name, vtype, sub, value = tiny_model.field_entry(f)
        w.add_key_value(name, value, GGUFValueType[vtype], sub_type=GGUFValueType[sub] if sub else None)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    tmp.replace(out)
    return out


def header_only(model: Path, out: Path) -> Path:
    """The model's metadata and tensor table with the data section cut off (a truncated
    download): what the loader must refuse as truncated."""
    from gguf import GGUFReader

    data_offset = GGUFReader(str(model)).data_offset
    out.write_bytes(Path(model).read_bytes()[:data_offset])
    return out


def converted_model(variant: str, quant: str, size: str = "full") -> Path:
    """A converted model of the test cache for its metadata: any converter version will do
    (the tokenizer metadata does not change with it), so one already there is used before
    tests.helpers.models converts a new one."""
    from tests.helpers.models import model_path
    from tests.reference.cache import cache_root

    have = sorted((cache_root() / "models").glob(f"{variant}-{size}-s0-*.gguf"), key=lambda p: p.stat().st_mtime)
    return have[-1] if have else model_path(variant, quant, size=size)


def prepare(outdir: Path) -> dict[str, Path]:
    outdir.mkdir(parents=True, exist_ok=True)
    seeds = outdir / "seeds" / "model_file"
    seeds.mkdir(parents=True, exist_ok=True)
    made = {"bpe": outdir / "bpe.gguf", "grapheme": outdir / "grapheme.gguf", "model_file": seeds}
    if not made["bpe"].exists():
        metadata_only(converted_model("turbo", "q4_0"), made["bpe"])
    if not made["grapheme"].exists():
        metadata_only(converted_model("mtl", "f32", size="small"), made["grapheme"])
    tiny = seeds / "tiny-nano.gguf"
    if not tiny.exists():
        tiny_model.write(tiny, "nano")
        header_only(tiny, seeds / "tiny-nano-header.gguf")
    return made


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for name, path in prepare(Path(sys.argv[1])).items():
        print(f"{name}: {path}")
