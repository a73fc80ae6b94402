"""The Multilingual oracle snapshot and its conversion to one GGUF (variant=mtl, t3.arch=llama).

The reduced snapshot (`--size small`: 14 layers, FFN 1536, the real width, heads, vocabularies,
tokenizer, Cangjie table, S3Gen and VE) by default; `CBS_MTL_SIZE=full` for the real size.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader
from safetensors.numpy import load_file

from engine_native.convert import ConvertError, convert, storage_type
from engine_native.convert.torch_pickle import load_pt
from tests.helpers.models import model_path
from tests.reference.cache import snapshot_dir
from tests.reference.runner import run_stage

SIZE = os.environ.get("CBS_MTL_SIZE", "small")
T3_FILE = "t3_mtl23ls_v2.safetensors"


@pytest.fixture(scope="module")
def snap():
    return snapshot_dir("mtl", size=SIZE)


@pytest.fixture(scope="module")
def from_local(snap):
    return run_stage("mtl_from_local", snap)


@pytest.fixture(scope="module")
def gguf(snap):
    return GGUFReader(str(model_path("mtl", "f32", size=SIZE)))


def _field(reader, key):
    f = reader.get_field(key)
    return None if f is None else f.contents()


def test_from_local_loads_the_snapshot_offline(from_local):
    out = from_local
    assert bool(out["is_multilingual"]) and not bool(out["s3gen_meanflow"])
    assert int(out["tokenizer_len"]) == 2454
    assert int(out["cangjie_glyphs"]) > 0, "the Cangjie table was not found in the hf_hub_download layout"
    assert bool(out["segmenter_is_none"])
    assert list(out["conds_prompt_tokens"]) == [1, 150]
    assert len(out["languages"]) == 23
    if SIZE == "full":
        assert (int(out["n_layer"]), int(out["n_ff"]), int(out["t3_n_params"])) == (30, 4096, 535_989_248)


def test_metadata_is_the_reference_configuration(from_local, gguf):
    ref = from_local
    c = "chatterbox."
    assert _field(gguf, c + "variant") == "mtl"
    assert _field(gguf, c + "t3.arch") == "llama"
    assert _field(gguf, c + "t3.n_layer") == int(ref["n_layer"])
    assert _field(gguf, c + "t3.n_embd") == int(ref["n_embd"])
    assert _field(gguf, c + "t3.n_head") == int(ref["n_head"])
    assert _field(gguf, c + "t3.n_ff") == int(ref["n_ff"])
    assert _field(gguf, c + "t3.head_dim") == 64 and _field(gguf, c + "t3.n_kv_head") == int(ref["n_head"])
    assert _field(gguf, c + "t3.rope.type") == "llama3"
    assert _field(gguf, c + "t3.rope.theta") == 500000.0 and _field(gguf, c + "t3.rope.factor") == 8.0
    assert _field(gguf, c + "t3.text_vocab") == 2454 and _field(gguf, c + "t3.speech_vocab") == 8194
    assert _field(gguf, c + "t3.text_pos_len") == 2050 and _field(gguf, c + "t3.speech_pos_len") == 4100
    assert _field(gguf, c + "t3.speech_cond_prompt_len") == 150
    assert list(_field(gguf, c + "t3.align.heads")) == [12, 15, 13, 11, 9, 2]
    assert _field(gguf, c + "sampling.repetition_penalty") == 2.0
    assert abs(_field(gguf, c + "sampling.min_p") - 0.05) < 1e-7 and _field(gguf, c + "sampling.top_p") == 1.0
    assert _field(gguf, c + "sampling.cfg_weight") == 0.5 and _field(gguf, c + "sampling.exaggeration") == 0.5
    assert _field(gguf, c + "s3gen.cfm.meanflow") is False and _field(gguf, c + "s3gen.cfm.n_timesteps") == 10
    assert _field(gguf, c + "s3gen.n_silence_tokens") == 0
    assert _field(gguf, c + "voice.norm_loudness") is False and _field(gguf, c + "voice.enc_cond_seconds") == 6
    assert _field(gguf, c + "voice.builtin_exaggeration") == 0.5
    assert sorted(_field(gguf, c + "tokenizer.languages")) == sorted(ref["languages"].tolist())


def test_tokenizer_and_cangjie_are_in_the_file(snap, gguf):
    spec = json.loads((snap / "grapheme_mtl_merged_expanded_v1.json").read_text(encoding="utf-8"))
    tokens = _field(gguf, "tokenizer.ggml.tokens")
    assert len(tokens) == 2454
    for t, i in spec["model"]["vocab"].items():
        assert tokens[i] == t
    merges = list(zip(_field(gguf, "chatterbox.tokenizer.merges_a"), _field(gguf, "chatterbox.tokenizer.merges_b")))
    assert merges == [tuple(m) if not isinstance(m, str) else tuple(m.split(" ")) for m in spec["model"]["merges"]]
    assert _field(gguf, "tokenizer.ggml.bos_token_id") == 255 and _field(gguf, "tokenizer.ggml.eos_token_id") == 0
    table = json.loads((snap / "Cangjie5_TC.json").read_text(encoding="utf-8"))
    assert _field(gguf, "chatterbox.cangjie.glyphs") == [e.split("\t")[0] for e in table]
    assert _field(gguf, "chatterbox.cangjie.codes") == [e.split("\t")[1] for e in table]


def test_every_t3_tensor_reads_back_equal_to_its_source(snap, gguf):
    src = load_file(str(snap / T3_FILE))
    stored = {t.name: t for t in gguf.tensors}
    seen = 0
    for key, arr in src.items():
        if key in ("tfmr.embed_tokens.weight", "text_head.weight"):
            assert not any(n.endswith(key.split(".", 1)[1]) and "embed_tokens" in n for n in stored)
            continue
        name = "t3." + key.replace("tfmr.layers.", "blk.").replace("tfmr.", "")
        t = stored[name]
        got = np.asarray(t.data).reshape(arr.shape)
        assert got.dtype == np.float32 and np.array_equal(got, arr), name
        seen += 1
    assert seen == len(src) - 2
    assert all(len(n) <= 63 for n in stored)


def test_s3gen_and_ve_come_from_the_pt_files(snap, gguf):
    stored = {t.name: t for t in gguf.tensors}
    s3 = load_pt(snap / "s3gen.pt")
    for key in ("flow.input_embedding.weight", "flow.decoder.estimator.final_proj.weight",
                "flow.encoder.after_norm.weight", "tokenizer._mel_filters"):
        name = {"flow.input_embedding.weight": "s3gen.flow.input_embedding.weight",
                "flow.decoder.estimator.final_proj.weight": "s3gen.cfm.final_proj.weight",
                "flow.encoder.after_norm.weight": "s3gen.enc.after_norm.weight",
                "tokenizer._mel_filters": "s3tok._mel_filters"}[key]
        assert np.array_equal(np.asarray(stored[name].data).reshape(s3[key].shape), s3[key]), key
    assert not any("time_embed_mixer" in n for n in stored)       # meanflow=False
    ve = load_pt(snap / "ve.pt")
    assert np.array_equal(np.asarray(stored["ve.proj.weight"].data).reshape(ve["proj.weight"].shape), ve["proj.weight"])


def test_quantisation_policy_covers_the_llama_names():
    assert storage_type("t3.blk.0.self_attn.q_proj.weight", (1024, 1024), "q4_0").name == "Q4_0"
    assert storage_type("t3.blk.0.mlp.down_proj.weight", (1024, 4096), "q8_0").name == "Q8_0"
    assert storage_type("t3.cond_enc.perceiver.attn.to_q.weight", (1024, 1024), "q5_0").name == "Q5_0"
    assert storage_type("t3.speech_head.weight", (8194, 1024), "f16").name == "F16"
    for name, shape in (("t3.blk.0.input_layernorm.weight", (1024,)), ("t3.norm.weight", (1024,)),
                        ("t3.text_emb.weight", (2454, 1024)), ("t3.speech_pos_emb.emb.weight", (4100, 1024)),
                        ("t3.cond_enc.emotion_adv_fc.weight", (1024, 1)),
                        ("t3.cond_enc.perceiver.pre_attention_query", (1, 32, 1024)),
                        ("t3.cond_enc.perceiver.attn.norm.weight", (1024,))):
        assert storage_type(name, shape, "q4_0").name == "F32", name


def _partial_snapshot(tmp_path: Path, snap: Path, files) -> Path:
    d = tmp_path / "snap"
    d.mkdir()
    for f in files:
        os.symlink(snap / f, d / f)
    return d


def test_other_kinds_of_snapshot_are_refused_by_name(snap, tmp_path):
    english = tmp_path / "english"
    english.mkdir()
    (english / "t3_cfg.safetensors").write_bytes(b"")
    (english / "tokenizer.json").write_text("{}")
    with pytest.raises(ConvertError, match="English"):
        convert(english, tmp_path / "x.gguf", log=None)
    no_t3 = _partial_snapshot(tmp_path, snap, ["grapheme_mtl_merged_expanded_v1.json"])
    with pytest.raises(ConvertError, match="t3_mtl23ls_v2"):
        convert(no_t3, tmp_path / "y.gguf", log=None)
    with pytest.raises(ConvertError, match="mtl checkpoint, not turbo"):
        convert(snap, tmp_path / "z.gguf", variant="turbo", log=None)
    assert not list(tmp_path.glob("*.gguf"))


def test_a_tokenizer_the_native_side_cannot_read_is_refused(snap, tmp_path):
    d = tmp_path / "bad"
    shutil.copytree(snap, d, symlinks=True, ignore=shutil.ignore_patterns("*.safetensors", "*.pt"))
    for f in ("t3_mtl23ls_v2.safetensors", "s3gen.pt", "ve.pt", "conds.pt"):
        os.symlink(snap / f, d / f)
    path = d / "grapheme_mtl_merged_expanded_v1.json"
    spec = json.loads(path.read_text(encoding="utf-8"))
    spec["pre_tokenizer"] = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                             "use_regex": True}
    path.write_text(json.dumps(spec), encoding="utf-8")
    with pytest.raises(ConvertError, match="pre-tokenizer"):
        convert(d, tmp_path / "bad.gguf", log=None)
