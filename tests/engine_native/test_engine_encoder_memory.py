"""The cloning encoders' weights (S3Tokenizer, CAMPPlus, VoiceEncoder) are held only while
cloning: not loaded by synthesis, loaded by the first clone, freed by
`Engine.release_voice_encoders()` (and by the idle timer after CLONER_IDLE_SECONDS), loaded
again by the next clone with the same voice as the result. Nano Q4_0 (the encoders are
full size in every variant); espeak-ng speech as the recording."""

from __future__ import annotations

import time

import numpy as np
import pytest

from engine_native import Engine
from tests.helpers import audio_fixtures as af
from tests.helpers.models import model_path

TENSORS = ("speaker_emb", "cond_prompt_speech_tokens", "embedding", "prompt_token", "prompt_feat")


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    if not af.tools_available():
        pytest.skip("espeak-ng / ffmpeg not installed")
    speech = af.speech_stream(str(tmp_path_factory.mktemp("mem")))
    return speech[: 8 * af.ESPEAK_RATE].astype(np.float32), af.ESPEAK_RATE


def test_encoders_load_on_use_and_release(recording):
    engine = Engine(model_path("nano", "q4_0"), threads=2)
    synthesis_only = engine.stages.file.buffer_bytes
    engine.synthesize("Hi.", seed=0, max_tokens=4)
    assert engine.stages.file.buffer_bytes == synthesis_only          # synthesis never loads them
    first = engine.voice_from_audio(*recording)
    loaded = engine.stages.file.buffer_bytes
    assert loaded > synthesis_only
    print(f"model buffers: {synthesis_only / 2**20:.0f} MB synthesis-only, {loaded / 2**20:.0f} MB cloning")
    assert engine.release_voice_encoders() == loaded - synthesis_only
    assert engine.stages.file.buffer_bytes == synthesis_only
    assert engine.release_voice_encoders() == 0                 # nothing left to free
    again = engine.voice_from_audio(*recording)                 # loads them again
    for name in TENSORS:
        assert np.array_equal(getattr(first, name), getattr(again, name)), name


def test_a_speaker_embedding_loads_only_the_voice_encoder(recording):
    """Likeness scores a take by the VoiceEncoder alone: its few MB, not the other encoders' 0.5 GB."""
    engine = Engine(model_path("nano", "q4_0"), threads=2)
    base = engine.stages.file.buffer_bytes
    engine.speaker_embedding(*recording)
    ve_only = engine.stages.file.buffer_bytes - base
    engine.release_voice_encoders()
    engine.voice_from_audio(*recording)
    all_four = engine.stages.file.buffer_bytes - base
    print(f"encoder weights: VoiceEncoder {ve_only / 2**20:.1f} MB, all four {all_four / 2**20:.1f} MB")
    assert 0 < ve_only < all_four / 20


def test_revoicing_loads_only_the_s3tokenizers_weights(recording):
    """Re-voicing needs the S3Tokenizer alone: CAMPPlus's and the VoiceEncoder's weights load
    with the first clone after it."""
    engine = Engine(model_path("nano", "q4_0"), threads=2, watermark=False)
    f = engine.stages.file

    def group_bytes(prefix: str) -> int:
        infos = [f.tensor_info(n) for n in f.tensor_names() if n.startswith(prefix)]
        assert infos and all(t == "f32" for t, _ in infos), prefix
        return sum(4 * int(np.prod(shape)) for _, shape in infos)

    base = f.buffer_bytes
    engine.revoice(*recording, seed=0)
    tokenizer = f.buffer_bytes - base
    others = group_bytes("campplus.") + group_bytes("ve.")
    print(f"re-voicing loads {tokenizer / 2**20:.0f} MB; CAMPPlus and the VoiceEncoder {others / 2**20:.0f} MB more")
    assert group_bytes("s3tok.") <= tokenizer < group_bytes("s3tok.") + others
    engine.voice_from_audio(*recording)
    loaded = f.buffer_bytes
    assert loaded - base >= tokenizer + others
    assert engine.release_voice_encoders() == loaded - base and f.buffer_bytes == base


def test_encoders_held_elsewhere_are_not_freed(recording):
    engine = Engine(model_path("nano", "q4_0"), threads=2)
    with engine.stages.lock:
        held = engine.stages.cloner.encoders()["s3tok"]         # a caller still holds one
    assert engine.release_voice_encoders() == 0                 # its weights must stay
    del held
    engine.voice_from_audio(*recording)
    assert engine.release_voice_encoders() > 0


def test_idle_timer_releases_them(recording):
    engine = Engine(model_path("nano", "q4_0"), threads=2)
    engine.CLONER_IDLE_SECONDS = 0.5
    base = engine.stages.file.buffer_bytes
    engine.voice_from_audio(*recording)
    assert engine.stages.file.buffer_bytes > base
    deadline = time.monotonic() + 30
    while engine.stages.file.buffer_bytes > base and time.monotonic() < deadline:
        time.sleep(0.1)
    assert engine.stages.file.buffer_bytes == base


_SYNTH_CHILD = """
import sys, numpy as np
from engine_native import Engine
e = Engine(sys.argv[1], threads=2)
wav = e.synthesize("Hello there.", seed=3, max_tokens=12)
np.save(sys.argv[2], wav)
print(e.stages.file.buffer_bytes)
"""


def test_lookup_tables_are_mapped_not_copied(tmp_path):
    """T3's embedding tables stay in the file's memory map on the CPU (only the rows a
    lookup touches become resident): they are absent from the model's buffers, and the
    synthesis is bit-identical to one with them copied (CBS_MMAP_TABLES=0)."""
    import os
    import subprocess
    import sys

    path = model_path("nano", "q4_0")
    engine = Engine(path, threads=2)
    names = [n for n in engine.stages.file.tensor_names() if n.startswith("t3.") and ("_emb." in n or n == "t3.wpe.weight")]
    assert names, "no lookup tables found"
    table_bytes = sum(4 * int(np.prod(engine.stages.file.tensor_info(n)[1])) for n in names
                      if engine.stages.file.tensor_info(n)[0] == "f32")
    assert table_bytes > 100 * 2**20                            # nano: 200 MB of f32 tables
    del engine
    result = {}
    for mode in ("1", "0"):
        out = tmp_path / f"wav{mode}.npy"
        env = dict(os.environ, CBS_MMAP_TABLES=mode)
        p = subprocess.run([sys.executable, "-c", _SYNTH_CHILD, str(path), str(out)], env=env,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stderr
        result[mode] = (int(p.stdout.split()[-1]), np.load(out))
    assert result["0"][0] - result["1"][0] >= table_bytes       # copied only with CBS_MMAP_TABLES=0
    assert np.array_equal(result["0"][1], result["1"][1])       # same numbers either way
