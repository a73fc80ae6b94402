"""The trained GE2E speaker encoder (engine_native.convert.ge2e, engine_native.speaker_encoder)
on real recordings fetched from packages (tests/helpers/real_speech.py).

Parity: our VoiceEncoder with Resemblyzer's weights against Resemblyzer's own
`VoiceEncoder.embed_utterance` (the reference venv), both fed Resemblyzer's preprocessed
audio (`preprocess_wav`: 16 kHz, -30 dBFS, pauses cut by the WebRTC VAD): cosine >= 0.999
per clip (measured 0.99983-1.000000; the residue is the centred STFT's edge padding:
reflect here, constant in librosa 0.11, and float32 sums in another order).
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import real_speech as rs

PARITY_COSINE = 0.999


@pytest.fixture(scope="module")
def harvard_parts(harvard):
    """codec2's man/woman Harvard-sentence recording, cut at its pauses: [(samples, median F0)]."""
    x, sr = rs.read(harvard)
    from voice_lab.silence import detect_silence, speech_regions

    regions = speech_regions(detect_silence(x.reshape(-1, 1), sr, -30, 0.3), x.size / sr)
    parts = [x[int(r.start * sr):int(r.end * sr)] for r in regions]
    return sr, [(p, rs.median_f0(p, sr)) for p in parts]


def _resemblyzer_available() -> bool:
    import subprocess

    from tests.reference.refenv import ref_python

    py = ref_python()
    return py.exists() and subprocess.run([str(py), "-c", "import resemblyzer, webrtcvad"], capture_output=True,
                                          check=False).returncode == 0


def test_the_file_holds_resemblyzers_encoder(speaker_encoder):
    from engine_native import _core
    from engine_native.convert.ge2e import read_weights

    state = read_weights(rs.resemblyzer_wheel())
    mf = _core.ModelFile(speaker_encoder.path)
    assert mf.variant == "speaker-encoder" and speaker_encoder.embed_dim == 256
    for name, arr in state.items():
        ours = mf.tensor_f32("ve." + name.replace("linear.", "proj."))
        np.testing.assert_array_equal(ours.reshape(arr.shape), arr)
    assert mf.get_float("chatterbox.fb.ve_mel.min_coverage") == pytest.approx(121 / 160)


@pytest.mark.skipif(not _resemblyzer_available(), reason="the reference venv lacks Resemblyzer (setup_venv.sh)")
def test_parity_with_resemblyzer(speaker_encoder, harvard_parts):
    from tests.helpers.resemblyzer_ref import embed_clips

    sr, parts = harvard_parts
    whole = np.concatenate([p for p, _ in parts])
    wav, _turns = rs.pyannote_sample()
    conv, csr = rs.read(wav)
    clips = [(whole, sr), (conv[: 15 * csr], csr), (conv[15 * csr:], csr)]
    clips += [rs.read(rs.codec2(f"wav/{n}.wav")) for n in ("hts1a", "hts2a", "mmt1")]
    for (x, rate), ref in zip(clips, embed_clips(clips)):
        ours = speaker_encoder.embed_prepared(ref["pre"])
        c = float(ours @ ref["emb"])
        rel = float(np.linalg.norm(ours - ref["emb"]) / np.linalg.norm(ref["emb"]))
        print(f"{x.size / rate:5.1f} s: cosine {c:.6f} rel {rel:.2e} max_abs {np.abs(ours - ref['emb']).max():.2e}")
        assert c >= PARITY_COSINE


def test_real_embeddings_tell_a_man_from_a_woman(speaker_encoder, harvard_parts):
    """The two men's regions and the two women's are nearer each other than any man-woman pair
    (on random weights every pair reads ~1.0)."""
    from engine_native.likeness import DIFFERENT_SPEAKER

    sr, parts = harvard_parts
    assert len(parts) == 4
    men = [speaker_encoder.embed(p, sr) for p, f0 in parts if f0 < 165]
    women = [speaker_encoder.embed(p, sr) for p, f0 in parts if f0 >= 165]
    assert len(men) == len(women) == 2
    same = [float(men[0] @ men[1]), float(women[0] @ women[1])]
    cross = [float(m @ w) for m in men for w in women]
    print("same", np.round(same, 3), "cross", np.round(cross, 3))
    assert min(same) > max(cross) + 0.15
    assert max(cross) < DIFFERENT_SPEAKER


def test_bad_input_is_refused(speaker_encoder, tmp_path):
    from engine_native.errors import ModelError, VoiceError
    from engine_native.speaker_encoder import SpeakerEncoder
    from tests.helpers.models import model_path

    with pytest.raises(VoiceError):
        speaker_encoder.embed(np.zeros(0, np.float32), 16000)
    with pytest.raises(VoiceError):
        speaker_encoder.embed(np.full(16000, np.nan, np.float32), 16000)
    with pytest.raises(ModelError, match="not a speaker encoder"):
        SpeakerEncoder(model_path("nano", "q4_0"))
    with pytest.raises(ModelError, match="not found"):
        SpeakerEncoder(tmp_path / "none.gguf")


def test_convert_refuses_other_files(tmp_path):
    from engine_native.convert import ConvertError
    from engine_native.convert.ge2e import convert_speaker_encoder

    bad = tmp_path / "x.whl"
    bad.write_bytes(b"not a wheel")
    with pytest.raises(ConvertError, match="x.whl"):
        convert_speaker_encoder(bad, tmp_path / "out.gguf", log=None)
    assert not (tmp_path / "out.gguf").exists()
