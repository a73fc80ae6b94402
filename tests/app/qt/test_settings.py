"""The typed settings (app.qt.settings): stored paths follow the data folder when it moves."""

from __future__ import annotations

import os

from PySide6.QtCore import QSettings

from app.qt.settings import Settings


def test_paths_under_a_moved_folder_are_rewritten(tmp_path):
    s = Settings(QSettings(str(tmp_path / "s.ini"), QSettings.IniFormat))
    old, new = str(tmp_path / "app" / "app"), str(tmp_path / "app")
    s.model_path = os.path.join(old, "models", "chatterbox-turbo-q4_0.gguf")
    s.voice = os.path.join(old, "voices", "me.voice.gguf")
    s.casts = '{"k": {"Alice": "' + os.path.join(old, "voices", "alice.voice.gguf") + '"}}'
    s.last_open_dir = str(tmp_path / "elsewhere")
    assert s.replace_prefix(old, new) == 3
    assert s.model_path == os.path.join(new, "models", "chatterbox-turbo-q4_0.gguf")
    assert s.voice == os.path.join(new, "voices", "me.voice.gguf")
    assert os.path.join(new, "voices", "alice.voice.gguf") in s.casts and old + os.sep not in s.casts
    assert s.last_open_dir == str(tmp_path / "elsewhere")
    assert s.replace_prefix(old, new) == 0
