"""Writes the committed seed corpora of the fuzz targets (tests/fuzz/corpus/TARGET/), small
real files of each format: the scripts and lexicons the tests use, voice files saved by
engine_native.voice, recordings written by soundfile, a torch.save archive made by PyTorch
(from the reference environment, when it is installed; the committed one stays otherwise).

    python -m tests.fuzz.make_seeds      (overwrites the seeds it makes)

Each file starts with the target's selector byte where the target has one (tests/fuzz/targets.py).
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np

from tests.fuzz.targets import corpus_dir

SCRIPTS = [
    "Hello there. [pause 0.5s] This is [PAUSE 250ms] a test!\n\n"
    "<speak>New <break time=\"1s\"/> para <break time='120ms'/> here.</speak> [pause] stays.",
    "\n\nOne.\n \n\n Two.",
    "Alice: Hello there.\nBob: Good morning. How are you?\nNote: this is narration.\nPlain line.",
    "# Chapter One\nIt was a dark night. [pause 2 sec]\n\n## Two\n<p>Second</p><break strength=\"x-strong\"/> done.",
    "<?xml version=\"1.0\"?><speak><prosody rate=\"slow\">Slow <emphasis>words</emphasis></prosody>"
    "<break/><s>A sentence.</s><say-as interpret-as=\"digits\">123</say-as></speak>",
    "Mary Ann: Well [laugh] that was odd... [pause .25s] Right?\n  Bob:   Quite — “so” it seems; 3.5 kg.",
]
LEXICONS_TSV = [
    "# word<TAB>respelling (chatterbox-studio lexicon)\nNguyen\tWin\nSQL\tsequel\nNew York\tNoo York\n",
    "\n# comment\nGIF\tjif\n  spaced word \t  say it  \n",
]
LEXICONS_JSON = [
    {"format": "chatterbox-lexicon", "version": 1,
     "entries": [{"word": "Nguyen", "say": "Win"}, {"word": "SQL", "say": "sequel"}]},
    [{"word": "Straße", "say": "Strasse"}, {"word": "naïve", "say": "nigh eve"}],
]


def write(target: str, name: str, data: bytes) -> None:
    d = corpus_dir(target)
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


def text_seeds() -> None:
    for i, text in enumerate(SCRIPTS):
        for mode in range(3):
            write("script", f"script{i}-mode{mode}", bytes([mode]) + text.encode())
    for i, text in enumerate(LEXICONS_TSV):
        write("lexicon", f"tsv{i}", b"\x00" + text.encode())
    for i, data in enumerate(LEXICONS_JSON):
        write("lexicon", f"json{i}", b"\x01" + json.dumps(data, ensure_ascii=False).encode())
    for i, text in enumerate(SCRIPTS + ["ß straße ΣΑΣ ǅ İ", "안녕하세요 世界 こんにちは", "\xe2\x80\x94"]):
        write("punc_norm", f"text{i}", text.encode())
        write("bpe", f"text{i}", text.encode())
        write("grapheme", f"text{i}", bytes([i % 23]) + text.encode())
    write("punc_norm", "invalid-utf8", b"ab\xff\xc3(\xed\xa0\x80 \xf4\x90\x80\x80 x")


def voice_seeds() -> None:
    from engine_native.voice import Voice

    rng = np.random.default_rng(0)
    for variant, n_tok in (("nano", 2), ("turbo", 3)):
        v = Voice(speaker_emb=rng.standard_normal(4).astype(np.float32),
                  cond_prompt_speech_tokens=np.arange(4, dtype=np.int32),
                  embedding=rng.standard_normal(4).astype(np.float32),
                  prompt_token=np.arange(n_tok, dtype=np.int32),
                  prompt_feat=rng.standard_normal((2 * n_tok, 8)).astype(np.float32), variant=variant)
        tmp = corpus_dir("voice") / f"{variant}.voice.gguf"
        tmp.parent.mkdir(parents=True, exist_ok=True)
        v.save(tmp, name=f"Seed {variant}", created_at="2026-01-01T00:00:00+00:00", chain=["trim", "eq"])


def wav_seeds() -> None:
    import soundfile as sf

    t = np.arange(2400) / 24000.0
    tone = (0.3 * np.sin(2 * np.pi * 220 * t)).astype(np.float32)
    for fmt, subtype, rate, channels in (("WAV", "FLOAT", 24000, 1), ("WAV", "PCM_16", 16000, 2),
                                         ("FLAC", "PCM_16", 44100, 1), ("OGG", "VORBIS", 22050, 1),
                                         ("WAV", "PCM_U8", 8000, 1), ("AIFF", "PCM_24", 48000, 1)):
        x = tone[: rate // 10]
        if channels == 2:
            x = np.stack([x, -x], axis=1)
        buf = io.BytesIO()
        sf.write(buf, x, rate, format=fmt, subtype=subtype)
        write("wav", f"{fmt.lower()}-{subtype.lower()}-{rate}-{channels}ch", buf.getvalue())


TORCH_SAVE = r"""
import collections, io, sys, torch
torch.manual_seed(0)
state = collections.OrderedDict(
    w=torch.randn(3, 4), b=torch.randn(4).to(torch.bfloat16), ids=torch.arange(5, dtype=torch.int64),
    half=torch.randn(2, 2).half(), flag=torch.tensor([True, False]), view=torch.randn(4, 4)[1:, ::2],
    p=torch.nn.Parameter(torch.randn(2)))
obj = {"t3": {"speaker_emb": torch.randn(1, 4), "cond_prompt_speech_tokens": torch.arange(3)},
       "gen": state, "meta": [1, 2.5, "x", None, (True,)]}
buf = io.BytesIO()
torch.save(obj, buf)
sys.stdout.buffer.write(buf.getvalue())
"""


def pickle_seeds(ref_python: Path | None) -> None:
    import zipfile

    archive = corpus_dir("pickle") / "torch-save"
    if ref_python and ref_python.exists():
        out = subprocess.run([str(ref_python), "-c", TORCH_SAVE], capture_output=True, check=True).stdout
        write("pickle", "torch-save", b"\x01" + out)
    data = archive.read_bytes()[1:]
    with zipfile.ZipFile(io.BytesIO(data)) as zf:
        pkl = next(n for n in zf.namelist() if n.endswith("data.pkl"))
        # Storage keys renamed to those the pickle-level archive holds (targets._STORAGE_KEYS).
        write("pickle", "data.pkl", b"\x00" + zf.read(pkl))


def model_file_seeds() -> None:
    """Small headers (the tiny whole model is generated: tests/fuzz/fuzz_data.py)."""
    from gguf import GGUFValueType, GGUFWriter

    from tests.fuzz.tiny_model import tiny_bpe_metadata

    d = corpus_dir("model_file")
    d.mkdir(parents=True, exist_ok=True)
    for name, with_tokenizer in (("variant-only.gguf", False), ("tokenizer-only.gguf", True)):
        w = GGUFWriter(str(d / name), "chatterbox")
        w.add_string("chatterbox.variant", "nano")
        if with_tokenizer:
            for key, vtype, sub, value in tiny_bpe_metadata()[0]:
                w.add_key_value(key, value, GGUFValueType[vtype], sub_type=GGUFValueType[sub] if sub else None)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()


def main() -> int:
    model_file_seeds()
    text_seeds()
    voice_seeds()
    wav_seeds()
    ref = Path(__file__).resolve().parents[2] / ".venv-ref" / "bin" / "python"
    pickle_seeds(ref if ref.exists() else Path("/work/main/.venv-ref/bin/python"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
