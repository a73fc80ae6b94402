"""The converter: snapshot -> GGUF, read back through ggml and checked against the sources.

Full-size random Turbo and Nano snapshots from the reference oracle (tests/reference).
Tolerances: unfolded tensors must be bit-identical (F32 in, F32 out); folded
weight-norm / BatchNorm must reproduce the reference module's own forward to
rel <= 1e-5; quantised tensors stay within the block format's rounding error.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader
from safetensors.numpy import load_file

import engine_native
from engine_native.convert import ConvertError, convert, inspect_model, requantize, storage_type
from tests.helpers.models import model_path, run_cli_without_torch
from tests.reference.cache import snapshot_dir
from tests.reference.runner import run_stage

T3_FILE = {"turbo": "t3_turbo_v1.safetensors", "nano": "t3_nano_v1.safetensors"}
GPT2_CONV1D = ("attn.c_attn.weight", "attn.c_proj.weight", "mlp.c_fc.weight", "mlp.c_proj.weight")


def expected_name(component: str, key: str) -> str | None:
    """The GGUF name of a source tensor, written out independently of the converter.
    None: dropped (unused by inference) or folded (checked separately)."""
    if component == "t3":
        if key in ("tfmr.wte.weight", "text_head.weight"):
            return None
        return "t3." + key.replace("tfmr.h.", "blk.").replace("tfmr.", "")
    if component == "ve":
        return "ve." + key
    prefixes = [("flow.encoder.", "s3gen.enc."), ("flow.decoder.estimator.", "s3gen.cfm."),
                ("flow.", "s3gen.flow."), ("mel2wav.", "hift."), ("speaker_encoder.", "campplus."),
                ("tokenizer.", "s3tok.")]
    if ".parametrizations.weight." in key:
        return None
    if key.startswith("speaker_encoder.") and re.search(r"\.(running_mean|running_var|num_batches_tracked)$", key):
        return None
    for src, dst in prefixes:
        if key.startswith(src):
            return dst + key[len(src):]
    raise AssertionError(f"unexpected S3Gen key {key}")


@pytest.fixture(scope="module", params=["turbo", "nano"])
def converted(request):
    variant = request.param
    path = model_path(variant, "f32")
    return variant, snapshot_dir(variant), engine_native.ModelFile(str(path))


def test_every_tensor_reads_back_equal_to_its_source(converted):
    variant, snap, model = converted
    names = set(model.tensor_names())
    seen = set()
    for component, file in (("t3", T3_FILE[variant]), ("s3gen", "s3gen_meanflow.safetensors"), ("ve", "ve.safetensors")):
        state = load_file(str(snap / file))
        bn_prefixes = {k.rsplit(".", 1)[0] for k in state if k.endswith(".running_var")}
        for key, src in state.items():
            name = expected_name(component, key)
            if name is None or (key.rsplit(".", 1)[0] in bn_prefixes and key.startswith("speaker_encoder.")):
                continue
            assert name in names, f"{key} -> {name} missing from the GGUF"
            got = model.tensor_f32(name)
            want = src.T if component == "t3" and key.endswith(GPT2_CONV1D) else src
            # ggml drops trailing unit dims of ne (leading ones of the numpy shape)
            assert got.shape == np.squeeze(want, axis=tuple(range(want.ndim - got.ndim))).shape, name
            np.testing.assert_array_equal(got, want.astype(np.float32).reshape(got.shape), err_msg=name)
            seen.add(name)
    folded = {n for n in names if n.startswith("hift.") and n not in seen} | {
        n for n in names if n.endswith((".scale", ".shift"))}
    other = {n for n in names - seen - folded if not n.startswith(("voice.", "fb."))}
    assert not other, f"GGUF tensors with no source: {sorted(other)[:10]}"
    assert len(folded) > 100


def test_shapes_and_hparams_are_those_of_the_architecture(converted):
    variant, _, model = converted
    n_layer, n_embd = {"turbo": (24, 1024), "nano": (12, 768)}[variant]
    assert model.variant == variant
    assert model.get_int("chatterbox.t3.n_layer") == n_layer
    assert model.get_int("chatterbox.t3.n_embd") == n_embd
    assert model.get_int("chatterbox.t3.text_vocab") == 50276
    assert model.get_int("chatterbox.t3.speech_vocab") == 6563
    assert model.tensor_info("t3.blk.0.attn.c_attn.weight") == ("f32", [n_embd, 3 * n_embd])
    assert model.get_int("chatterbox.s3gen.silence_token") == 4299
    assert model.get_bool("chatterbox.s3gen.cfm.meanflow") is True
    assert model.get_int("chatterbox.s3gen.cfm.n_timesteps") == 2


def test_builtin_voice_and_tokenizer_are_embedded(converted):
    variant, snap, model = converted
    ref = run_stage("conds", snap)
    for name in ("speaker_emb", "cond_prompt_speech_tokens", "embedding", "prompt_token", "prompt_feat"):
        np.testing.assert_array_equal(model.tensor_f32(f"voice.{name}"), ref[name].astype(np.float32).reshape(
            model.tensor_f32(f"voice.{name}").shape), err_msg=name)
    reader = GGUFReader(str(model.path))
    tokens = reader.get_field("tokenizer.ggml.tokens").contents()
    assert len(tokens) == 50276
    assert "[laugh]" in tokens[50257:]
    assert len(reader.get_field("tokenizer.ggml.merges").contents()) == 50000


def test_folded_weights_reproduce_the_reference_modules():
    """Weight-norm (HiFT) and BatchNorm (CAMPPlus) folds, run through the reference
    modules' own forward on random inputs beside a plain conv / affine with our tensors."""
    model = engine_native.ModelFile(str(model_path("turbo", "f32")))
    names = model.tensor_names()
    folded = {n: model.tensor_f32(n) for n in names
              if (n.startswith("hift.") and n.endswith(".weight") and model.tensor_info(n)[1].__len__() == 3)
              or n.endswith((".scale", ".shift"))}
    out = run_stage("fold_check", snapshot_dir("turbo"),
                    names=np.array(list(folded)), **{f"t{i}": v for i, v in enumerate(folded.values())})
    checked = dict(zip(out["modules"].tolist(), out["rel"].tolist()))
    assert len(checked) >= 100, f"only {len(checked)} folded modules were checked"
    worst = max(checked, key=checked.get)
    print(f"folded modules checked: {len(checked)}, worst rel {checked[worst]:.2e} ({worst})")
    assert checked[worst] <= 1e-5, worst


def test_metadata_constants_match_the_reference_modules():
    model = engine_native.ModelFile(str(model_path("turbo", "f32")))
    ref = run_stage("hparams", snapshot_dir("turbo"))
    for key, value in ref.items():
        meta = f"chatterbox.{key}"
        if value.ndim:
            assert model.get_int_array(meta) == value.tolist(), key
        elif value.dtype.kind == "f":
            assert model.get_float(meta) == pytest.approx(float(value), rel=1e-6), key
        elif value.dtype.kind == "b":
            assert model.get_bool(meta) == bool(value), key
        else:
            assert model.get_int(meta) == int(value), key


QUANT_TOL = {"f16": 1e-3, "q8_0": 1e-2, "q5_0": 6e-2, "q4_0": 1.2e-1}


@pytest.mark.parametrize("quant", ["f16", "q8_0", "q5_0", "q4_0"])
def test_quantised_conversions_load(quant):
    ref = engine_native.ModelFile(str(model_path("turbo", "f32")))
    path = model_path("turbo", quant)
    model = engine_native.ModelFile(str(path))
    info = inspect_model(path)
    print(f"{quant}: {info['file_bytes'] / 2**20:.1f} MiB, types {info['types']}")
    n_quant = 0
    for name in model.tensor_names():
        gtype, ne = model.tensor_info(name)
        want = storage_type(name, tuple(reversed(ne)), quant).name.lower()
        if name.startswith("voice.") and gtype == "i32":
            continue
        assert gtype == want, f"{name}: stored {gtype}, policy says {want}"
        if gtype != "f32":
            n_quant += 1
            a, b = model.tensor_f32(name), ref.tensor_f32(name)
            rel = np.linalg.norm(a - b) / np.linalg.norm(b)
            assert rel <= QUANT_TOL[quant], f"{name}: rel {rel:.3g}"
        elif name.startswith(("ve.", "campplus.", "s3tok.", "fb.", "hift.")):
            np.testing.assert_array_equal(model.tensor_f32(name), ref.tensor_f32(name))
    assert n_quant > 200
    # Never quantised: embeddings, norms, biases, voice encoders, filterbanks, the voice.
    for name in ("t3.text_emb.weight", "t3.speech_emb.weight", "t3.wpe.weight", "t3.blk.0.ln_1.weight",
                 "t3.blk.0.attn.c_attn.bias", "s3tok.encoder.blocks.0.attn.query.weight", "ve.lstm.weight_ih_l0",
                 "fb.mel_24k", "voice.prompt_feat"):
        assert model.tensor_info(name)[0] == "f32", name


def test_requantize_uses_the_same_policy(tmp_path):
    out = tmp_path / "rq.gguf"
    report = requantize(model_path("turbo", "f32"), out, "q8_0", log=None)
    direct = GGUFReader(str(model_path("turbo", "q8_0")))
    again = GGUFReader(str(out))
    assert report.n_quantised == sum(1 for t in direct.tensors if t.tensor_type.name == "Q8_0") > 0
    for a, b in zip(direct.tensors, again.tensors):
        assert a.name == b.name and a.tensor_type == b.tensor_type
        assert np.array_equal(np.asarray(a.data), np.asarray(b.data)), a.name


def test_conversion_reports_what_it_quantised_and_never_imports_torch(tmp_path):
    # model_path() converted through the same torch-blocking CLI; here we read its log.
    res = run_cli_without_torch("requantize", str(model_path("nano", "f32")), "-o", str(tmp_path / "n.gguf"),
                                "--quant", "q4_0")
    assert res.returncode == 0, res.stderr
    assert re.search(r"quantised \d+ of \d+ tensors", res.stdout)
    res = run_cli_without_torch("info", str(tmp_path / "n.gguf"))
    assert res.returncode == 0 and "variant           nano" in res.stdout and "q4_0" in res.stdout


# --- bad input --------------------------------------------------------------------------

@pytest.fixture
def turbo_copy(tmp_path):
    """A snapshot folder of symlinks (no GB copies) that tests can damage."""
    snap = snapshot_dir("turbo")
    copy = tmp_path / "snap"
    copy.mkdir()
    for f in snap.iterdir():
        (copy / f.name).symlink_to(f)
    return copy


def _assert_fails_cleanly(snapshot: Path, out: Path, needle: str):
    with pytest.raises(ConvertError) as e:
        convert(snapshot, out, log=None)
    assert needle in str(e.value), str(e.value)
    assert not out.exists()
    assert not list(out.parent.glob(f".{out.name}.*")), "a partial file was left behind"
    return str(e.value)


def test_missing_file_is_named(turbo_copy, tmp_path):
    (turbo_copy / "ve.safetensors").unlink()
    msg = _assert_fails_cleanly(turbo_copy, tmp_path / "out" / "m.gguf", "ve.safetensors")
    assert "missing" in msg


def test_truncated_safetensors_is_named(turbo_copy, tmp_path):
    src = (turbo_copy / "ve.safetensors").resolve()
    (turbo_copy / "ve.safetensors").unlink()
    (turbo_copy / "ve.safetensors").write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    _assert_fails_cleanly(turbo_copy, tmp_path / "m.gguf", "ve.safetensors")


def test_wrong_safetensors_layout_is_named(turbo_copy, tmp_path):
    (turbo_copy / "t3_turbo_v1.safetensors").unlink()
    (turbo_copy / "t3_turbo_v1.safetensors").symlink_to((turbo_copy / "ve.safetensors").resolve())
    _assert_fails_cleanly(turbo_copy, tmp_path / "m.gguf", "t3_turbo_v1.safetensors")


def test_unknown_layout(tmp_path):
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 16)
    _assert_fails_cleanly(tmp_path, tmp_path / "m.gguf", "no Chatterbox T3 checkpoint")


def test_unreadable_pickle_is_named(turbo_copy, tmp_path):
    (turbo_copy / "conds.pt").unlink()
    (turbo_copy / "conds.pt").write_bytes(b"this is not a torch file")
    _assert_fails_cleanly(turbo_copy, tmp_path / "m.gguf", "conds.pt")


def test_existing_output_survives_a_failed_conversion(turbo_copy, tmp_path):
    out = tmp_path / "m.gguf"
    out.write_bytes(b"precious")
    (turbo_copy / "merges.txt").unlink()
    with pytest.raises(ConvertError, match="merges.txt"):
        convert(turbo_copy, out, log=None)
    assert out.read_bytes() == b"precious"


def test_cli_reports_errors_without_traceback(tmp_path):
    res = run_cli_without_torch("convert", str(tmp_path / "nowhere"), "-o", str(tmp_path / "m.gguf"))
    assert res.returncode == 1
    assert "error:" in res.stderr and "Traceback" not in res.stderr


def test_download_without_network_fails_clearly(tmp_path):
    res = run_cli_without_torch("convert", "--download", "ResembleAI/chatterbox-turbo", "-o", str(tmp_path / "m.gguf"))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "error:" in res.stderr and "could not download ResembleAI/chatterbox-turbo" in res.stderr
    assert not (tmp_path / "m.gguf").exists()


@pytest.mark.parametrize("damage", ["truncate", "garbage", "foreign"])
def test_corrupt_model_files_raise_engine_error(tmp_path, damage):
    src = model_path("nano", "f32")
    bad = tmp_path / "bad.gguf"
    if damage == "truncate":
        with open(src, "rb") as f:
            bad.write_bytes(f.read(50_000_000))
    elif damage == "garbage":
        bad.write_bytes(b"GGUF" + os.urandom(4096))
    else:
        bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\0" * 32)
    with pytest.raises(engine_native.EngineError) as e:
        engine_native.ModelFile(str(bad))
    assert str(bad) in str(e.value)
    with pytest.raises(ConvertError):
        inspect_model(bad)
    with pytest.raises(engine_native.EngineError, match="not found"):
        engine_native.ModelFile(str(tmp_path / "absent.gguf"))
