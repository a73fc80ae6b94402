"""app/core/voice_library.py: VoiceFolder (the one reader of a folder of voices) and VoiceStore
(the app's library: add, rename, delete, each recording moving with its voice), on real
.voice.gguf files written by engine_native.Voice."""

from __future__ import annotations

import os

import numpy as np
import pytest

from app.core.voice_library import VoiceFolder, VoiceStore, slug
from engine_native import Voice
from engine_native.voice import clip_path


def a_voice(seed: int = 0) -> Voice:
    rng = np.random.default_rng(seed)
    return Voice(speaker_emb=rng.standard_normal(256).astype(np.float32),
                 cond_prompt_speech_tokens=rng.integers(0, 6000, 40).astype(np.int32),
                 embedding=rng.standard_normal(192).astype(np.float32),
                 prompt_token=rng.integers(0, 6000, 25).astype(np.int32),
                 prompt_feat=rng.standard_normal((50, 80)).astype(np.float32), variant="nano")


def test_add_keeps_the_recording_beside_the_voice_and_names_never_collide(tmp_path):
    store = VoiceStore(str(tmp_path / "voices"))
    clip = (np.sin(np.arange(24000) / 10).astype(np.float32) * 0.1, 24000)
    first = store.add(a_voice(1), "Ada Lovelace", clip=clip, source="ada.wav")
    second = store.add(a_voice(2), "Ada Lovelace")
    assert os.path.basename(first) == "Ada-Lovelace.voice.gguf"
    assert os.path.basename(second) == "Ada-Lovelace-2.voice.gguf"
    assert clip_path(first) and clip_path(second) is None
    names = [(e.name, e.variant, e.error) for e in store.entries()]
    assert names == [("Ada Lovelace", "nano", ""), ("Ada Lovelace", "nano", "")]
    loaded = Voice.load(first)
    np.testing.assert_array_equal(loaded.prompt_feat, a_voice(1).prompt_feat)
    assert loaded.meta.get("source") == "ada.wav"


def test_rename_moves_the_recording_and_delete_removes_both(tmp_path):
    store = VoiceStore(str(tmp_path))
    path = store.add(a_voice(), "Narrator", clip=(np.zeros(2400, np.float32) + 0.01, 24000))
    renamed = store.rename(path, "Old Narrator")
    assert not os.path.exists(path) and clip_path(path) is None
    assert os.path.basename(renamed) == "Old-Narrator.voice.gguf" and clip_path(renamed)
    assert [e.name for e in store.entries()] == ["Old Narrator"]
    assert store.rename(renamed, "Old Narrator") == renamed          # the same name: the same file
    store.delete(renamed)
    assert os.listdir(tmp_path) == []


def test_add_file_copies_a_voice_from_elsewhere_under_its_own_name(tmp_path):
    outside = a_voice(3).save(tmp_path / "download.voice.gguf", name="Guest")
    store = VoiceStore(str(tmp_path / "lib"))
    path = store.add_file(str(outside))
    assert os.path.basename(path) == "Guest.voice.gguf" and outside.exists()


def test_folder_lists_a_damaged_file_with_its_error_and_rereads_a_changed_one(tmp_path):
    folder = VoiceFolder(str(tmp_path))
    good = a_voice().save(tmp_path / "a.voice.gguf", name="First")
    (tmp_path / "b.voice.gguf").write_bytes(b"GGUF\x03\x00\x00\x00 not really")
    (tmp_path / "notes.txt").write_text("not a voice")
    entries = folder.scan()
    assert [(e.stem, e.name) for e in entries] == [("a", "First"), ("b", "b")]
    assert entries[0].error == "" and "b.voice.gguf" in entries[1].error
    a_voice().save(good, name="Renamed inside")
    os.utime(good, (1, 1))                       # a different mtime: the cached header is stale
    assert folder.scan()[0].name == "Renamed inside"
    assert folder.load(str(good)) is folder.load(str(good))   # cached by mtime
    assert VoiceFolder(str(tmp_path / "missing")).scan() == [] and VoiceFolder(None).scan() == []


@pytest.mark.parametrize("name, stem", [("Ada Lovelace", "Ada-Lovelace"), ("../../etc/passwd", "etcpasswd"),
                                        ("???", "voice"), ("Zoë", "Zoë")])
def test_slug_keeps_names_inside_the_folder(name, stem):
    assert slug(name) == stem
