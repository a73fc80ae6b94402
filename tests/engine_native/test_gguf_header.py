"""engine_native.gguf_header: a GGUF file's header read without its data, and one line for a file
cut short (in its header or in its data) or not GGUF at all; the messages `info` (the converter's
reader) and Voice.load give for such files instead of numpy's."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFWriter

from engine_native import Voice, VoiceError
from engine_native.convert import ConvertError, inspect_model
from engine_native.gguf_header import GGUFFileError, NotGGUFError, is_gguf, read_complete_header, read_header

NUMPY_WORDS = ("reshape", "divisor", "out of bounds", "buffer is smaller")


@pytest.fixture
def small(tmp_path):
    """A small GGUF: strings, numbers and arrays in its metadata; f32, f16 and q8_0 tensors."""
    from gguf import quants

    path = tmp_path / "small.gguf"
    w = GGUFWriter(str(path), "chatterbox")
    w.add_string("chatterbox.variant", "nano")
    w.add_array("chatterbox.tokenizer.languages", ["en", "fr"])
    w.add_array("tokenizer.ggml.tokens", [f"t{i}" for i in range(3000)])
    w.add_float32("chatterbox.x", 0.5)
    w.add_tensor("a", np.arange(12, dtype=np.float32).reshape(3, 4))
    w.add_tensor("b", np.ones((2, 64), np.float16))
    w.add_tensor("c", quants.quantize(np.ones((4, 64), np.float32), GGMLQuantizationType.Q8_0),
                 raw_dtype=GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_the_header_matches_ggufs_own_reader(small):
    h = read_complete_header(small)
    r = GGUFReader(str(small))
    assert h.architecture == "chatterbox" and h.kv["chatterbox.variant"] == "nano"
    assert h.kv["chatterbox.tokenizer.languages"] == ["en", "fr"] and len(h.kv["tokenizer.ggml.tokens"]) == 3000
    assert h.kv["chatterbox.x"] == 0.5
    assert [(t.name, t.type, t.nbytes) for t in h.tensors] == [(t.name, int(t.tensor_type), int(t.n_bytes))
                                                                 for t in r.tensors]
    assert h.data_offset == r.data_offset and h.data_bytes <= small.stat().st_size < h.data_bytes + 32  # + padding


@pytest.mark.parametrize("keep", [0.5, 0.97])
def test_a_file_cut_in_its_data_names_the_first_tensor_missing(small, tmp_path, keep):
    data = small.read_bytes()
    cut = tmp_path / "cut.gguf"
    h = read_header(small)
    n = h.data_offset + int((len(data) - h.data_offset) * keep)
    cut.write_bytes(data[:n])
    with pytest.raises(GGUFFileError) as e:
        read_complete_header(cut)
    msg = str(e.value)
    print(msg)
    assert msg.startswith(f"{cut}: truncated: tensor ") and "runs past the end" in msg and "again" in msg


def test_a_file_cut_in_its_header_says_so(small, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(small.read_bytes()[:5000])  # inside the token list
    with pytest.raises(GGUFFileError) as e:
        read_header(cut)
    assert str(e.value) == f"{cut}: truncated: the file ends inside its header (it has 5,000 bytes); " \
                           "download or convert it again"


def test_not_a_gguf_file(tmp_path):
    wav = tmp_path / "a.wav"
    wav.write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt ")
    assert not is_gguf(wav) and not is_gguf(tmp_path / "missing")
    with pytest.raises(NotGGUFError):
        read_header(wav)


def test_inspect_and_voice_load_say_what_is_wrong_with_a_cut_file(small, tmp_path):
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(small.read_bytes()[:-100])
    with pytest.raises(ConvertError) as e:
        inspect_model(cut)
    assert "truncated: tensor c runs past the end" in str(e.value)
    assert not any(w in str(e.value) for w in NUMPY_WORDS)
    with pytest.raises(VoiceError) as e:
        Voice.load(cut)
    assert "truncated: tensor c runs past the end" in str(e.value)
    wav = tmp_path / "talk.wav"
    wav.write_bytes(b"RIFF\x24\x00\x00\x00WAVEfmt " + bytes(100))
    with pytest.raises(VoiceError) as e:
        Voice.load(wav)
    assert str(e.value) == f"{wav}: not a voice file (a voice is a .voice.gguf file made by cloning a recording)"
