"""A well-formed model file whose tensor shapes disagree with its metadata is a ModelError
naming the tensor (expected and found shape), never a ggml assertion that aborts the
process: one damaged copy per component, all loaded in one process, which then still
synthesises with the good model."""

from __future__ import annotations

import contextlib
import shutil

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader

from engine_native import Engine, ModelError, _core
from tests.helpers.models import model_path

TEXT = "Hello there."

# component -> (an F32 tensor given a wrong shape, how the component is loaded)
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


class DamagedCopy:
    """A copy of a model whose header can give one tensor a wrong shape: the file stays
    well-formed (the same bytes per tensor, offsets and data unchanged: ggml's reader checks
    those), only the shape disagrees with the metadata. A matrix gets its two dimensions
    swapped; a vector loses its last element (within the 32-byte padding, so its stored size
    is unchanged). Patched in place, so one copy serves every case."""

    def __init__(self, src, dst):
        shutil.copyfile(src, dst)
        self.path = dst
        self.reader = GGUFReader(str(dst), "r+")
        self.tensors = {t.name: t for t in self.reader.tensors}

    @contextlib.contextmanager
    def metadata(self, values: dict):
        """Integer metadata keys set to other values (in place: same type, same size)."""
        fields = {k: self.reader.get_field(k) for k in values}
        old = {k: f.parts[f.data[0]].copy() for k, f in fields.items()}
        for k, f in fields.items():
            f.parts[f.data[0]][:] = values[k]
        self.reader.data.flush()
        try:
            yield
        finally:
            for k, f in fields.items():
                f.parts[f.data[0]][:] = old[k]
            self.reader.data.flush()

    @contextlib.contextmanager
    def wrong_shape(self, name: str):
        t = self.tensors[name]
        assert t.tensor_type == GGMLQuantizationType.F32, f"{name} must be an F32 tensor for this test"
        dims = t.field.parts[3]          # the tensor info's dimensions, ggml order
        good = dims.copy()
        if len(dims) >= 2:
            assert dims[0] != dims[1], f"{name}: a square matrix cannot be damaged by a swap"
            dims[0], dims[1] = good[1], good[0]
        else:
            assert dims[0] % 8 != 1, f"{name}: one element less would change its padded size"
            dims[0] -= 1
        self.reader.data.flush()
        try:
            yield
        finally:
            dims[:] = good
            self.reader.data.flush()


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
    damaged = DamagedCopy(good_model, tmp_path / "damaged.gguf")
    for component, (name, how) in CASES.items():
        with damaged.wrong_shape(name), pytest.raises(ModelError) as err:
            _load(damaged.path, how)
        message = str(err.value)
        assert name in message, f"{component}: {message}"
        assert "expected" in message and "shape" in message, f"{component}: {message}"
        print(f"{component}: {message.split(': ', 1)[1]}")
    _load(damaged.path, "engine")   # restored: the copy loads again

    engine = Engine(good_model)
    audio = engine.synthesize(TEXT, seed=1, max_tokens=8)
    assert audio.size > 0 and np.isfinite(audio).all()


# The STFT front ends divide by their hop: a copy with every hop 0, each a ModelError at load.
HOPS = {"Mel24k": "chatterbox.fb.mel_24k.hop", "KaldiFbank": "chatterbox.fb.kaldi_80.hop",
        "VoiceEncoder": "chatterbox.fb.ve_mel.hop", "S3TokLogMel": "chatterbox.s3tok.hop"}


def test_a_zero_hop_is_a_model_error(good_model, tmp_path):
    damaged = DamagedCopy(good_model, tmp_path / "hop0.gguf")
    with damaged.metadata({key: 0 for key in HOPS.values()}):
        for how in HOPS:
            with pytest.raises(ModelError) as err:
                _load(damaged.path, how)
            print(f"{how}: {err.value}")
