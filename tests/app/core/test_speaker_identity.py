"""The one choice of speaker encoder (app.core.speaker_identity) the app and `lab` share: the
trained GE2E encoder where installed (or given), else the model's x-vectors, else none; and
`equip` giving an engine the trained encoder for likeness."""

from __future__ import annotations

import pytest

NOWHERE = "/nonexistent/speaker-encoder.gguf"


@pytest.fixture(scope="module")
def engine():
    from engine_native import Engine
    from tests.helpers.models import model_path

    return Engine(str(model_path("nano", "q4_0")))


def test_the_installed_trained_encoder_is_chosen(speaker_encoder, monkeypatch):
    from app.core.speaker_identity import installed_path, speaker_embedder

    monkeypatch.setenv("CBS_SPEAKER_ENCODER", speaker_encoder.path)
    assert installed_path() == speaker_encoder.path
    by = speaker_embedder(engine=lambda: pytest.fail("the model is not needed with a trained encoder"))
    assert by.trained and by.description == f"the GE2E speaker encoder ({speaker_encoder.path})"
    assert by.embed.__self__.path == speaker_encoder.path


def test_without_one_the_models_xvectors_else_nothing(engine, monkeypatch):
    from app.core.speaker_identity import installed_path, speaker_embedder

    monkeypatch.setenv("CBS_SPEAKER_ENCODER", NOWHERE)
    assert installed_path() is None
    assert speaker_embedder() is None and speaker_embedder(engine=lambda: None) is None
    by = speaker_embedder(engine=engine)
    assert not by.trained and by.embed == engine.speaker_xvector
    assert by.description.startswith("the model's CAMPPlus x-vectors (")
    assert speaker_embedder(engine=lambda: engine).description == by.description


def test_a_file_given_must_be_a_speaker_encoder(engine, tmp_path):
    from app.core.speaker_identity import speaker_embedder
    from engine_native.errors import ModelError

    with pytest.raises(ModelError, match="not found"):
        speaker_embedder(str(tmp_path / "missing.gguf"), engine=engine)
    with pytest.raises(ModelError, match="not a speaker encoder"):
        speaker_embedder(str(engine.path), engine=engine)


def test_equip_gives_the_engine_the_trained_encoder_for_likeness(engine, speaker_encoder, monkeypatch):
    from app.core.speaker_identity import equip

    try:
        monkeypatch.setenv("CBS_SPEAKER_ENCODER", speaker_encoder.path)
        assert equip(engine) is engine and engine.likeness_encoder.path == speaker_encoder.path
        monkeypatch.setenv("CBS_SPEAKER_ENCODER", NOWHERE)
        assert equip(engine).likeness_encoder is None
        assert equip(engine, str(engine.path)).likeness_encoder is None   # a broken file: the model's own scale
    finally:
        engine.likeness_encoder = None
