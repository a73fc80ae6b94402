"""A well-formed model file whose tensor shapes disagree with its metadata is a ModelError
naming the tensor (expected and found shape), never a ggml assertion that aborts the
process: one damaged copy per component, all loaded in one process, which then still
synthesises with the good model."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGUFReader, GGUFValueType, GGUFWriter

from engine_native import Engine, ModelError, _core
from tests.models import model_path

TEXT = "Hello there."

# component -> (an F32 tensor to shorten by one row, how the component is loaded)
CASES = {
    "t3": ("t3.blk.1.mlp.c_fc.bias", "engine"),
    "s3gen_encoder": ("s3gen.enc.encoders.0.self_attn.pos_bias_u", "engine"),
    "cfm": ("s3gen.cfm.up_blocks.0.1.0.norm3.bias", "engine"),
    "hift": ("hift.resblocks.0.activations1.0.alpha", "engine"),
    "voice_encoder": ("ve.lstm.bias_hh_l1", "VoiceEncoder"),
    "campplus": ("campplus.xvector.block1.tdnnd1.cam_layer.linear1.bias", "CampPlus"),
    "s3tokenizer": ("s3tok.encoder.blocks.0.mlp_ln.bias", "S3Tokenizer"),
    "mel_filterbank": ("fb.mel_24k", "Mel24k"),
    "voice": ("voice.speaker_emb", "T3.generate"),
}


@pytest.fixture(scope="module")
def good_model():
    return model_path("nano", "q4_0")


def _write_damaged(src, dst, name: str | None = None, keys: dict | None = None) -> None:
    """A copy of src with tensor `name` one row (outermost numpy axis) shorter and the
    metadata `keys` set to the values given."""
    keys = keys or {}
    reader = GGUFReader(str(src))
    writer = GGUFWriter(str(dst), arch="chatterbox")
    for f in reader.fields.values():
        if f.name.startswith("GGUF.") or f.name == "general.architecture":
            continue
        vtype = GGUFValueType(f.types[0])
        sub = GGUFValueType(f.types[-1]) if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(f.name, keys.get(f.name, f.contents()), vtype, sub_type=sub)
    found = False
    for t in reader.tensors:
        data = np.array(t.data)
        if t.name == name:
            assert data.dtype == np.float32, f"{name} must be an F32 tensor for this test"
            data = data[:-1].copy()
            found = True
        writer.add_tensor(t.name, data, raw_dtype=t.tensor_type)
    assert found or name is None, f"{name} not in the model"
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _load(path, how: str) -> None:
    if how == "engine":
        Engine(path)
        return
    model = _core.ModelFile(str(path))
    if how == "T3.generate":
        _core.T3(model).generate([100, 101], 2)
        return
    getattr(_core, how)(model)


def test_each_wrong_shape_is_a_model_error_and_the_good_model_still_works(good_model, tmp_path):
    damaged = tmp_path / "damaged.gguf"
    for component, (name, how) in CASES.items():
        _write_damaged(good_model, damaged, name)
        with pytest.raises(ModelError) as err:
            _load(damaged, how)
        message = str(err.value)
        assert name in message, f"{component}: {message}"
        assert "expected" in message and "shape" in message, f"{component}: {message}"
        print(f"{component}: {message.split(': ', 1)[1]}")
        damaged.unlink()

    engine = Engine(good_model)
    audio = engine.synthesize(TEXT, seed=1, max_tokens=8)
    assert audio.size > 0 and np.isfinite(audio).all()


# The STFT front ends divide by their hop: one copy with every hop 0, each a ModelError.
HOPS = {"Mel24k": "chatterbox.fb.mel_24k.hop", "KaldiFbank": "chatterbox.fb.kaldi_80.hop",
        "VoiceEncoder": "chatterbox.fb.ve_mel.hop", "S3TokLogMel": "chatterbox.s3tok.hop"}


def test_a_zero_hop_is_a_model_error(good_model, tmp_path):
    damaged = tmp_path / "hop0.gguf"
    _write_damaged(good_model, damaged, keys={key: 0 for key in HOPS.values()})
    for how in HOPS:
        with pytest.raises(ModelError) as err:
            _load(damaged, how)
        print(f"{how}: {err.value}")
