"""Where the app keeps the user's files (app.core.paths): the data folder named once, an earlier
version's doubled folder moved into it, and the resources found in a source checkout."""

from __future__ import annotations

import os

from app.core import paths


def test_the_data_folder_has_the_apps_name_once(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert paths.app_data_dir() == str(tmp_path / "chatterbox-studio")
    assert paths.library_dir() == str(tmp_path / "chatterbox-studio" / "voices")
    assert paths.models_dir() == str(tmp_path / "chatterbox-studio" / "models")


def test_an_earlier_versions_doubled_folder_is_moved_up_once(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    old = tmp_path / "chatterbox-studio" / "chatterbox-studio"
    (old / "voices").mkdir(parents=True)
    (old / "voices" / "me.voice.gguf").write_bytes(b"GGUF")
    (old / "models").mkdir()
    (old / "lexicon.json").write_text("{}", encoding="utf-8")
    (tmp_path / "chatterbox-studio" / "models").mkdir()  # already there: the old one stays put
    moved = paths.migrate_legacy_data_dir()
    assert moved == ["lexicon.json", "voices"]
    assert (tmp_path / "chatterbox-studio" / "voices" / "me.voice.gguf").read_bytes() == b"GGUF"
    assert (old / "models").is_dir()  # not lost: left where it was
    (old / "models").rmdir()
    assert paths.migrate_legacy_data_dir() == [] and not old.exists()  # the empty old folder goes
    assert paths.migrate_legacy_data_dir() == []


def test_resources_are_found_in_a_source_checkout(monkeypatch):
    monkeypatch.delenv("CHATTERBOX_STUDIO_RESOURCES", raising=False)
    assert os.path.isfile(paths.app_icon())
    assert os.path.isfile(os.path.join(paths.resources_dir(), "chatterbox-studio.desktop"))
