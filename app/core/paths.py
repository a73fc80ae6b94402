"""Where the desktop app keeps the user's files, found without Qt (the command line and the
server use the same folders as the app). The data folder itself is defined once, in
engine_native.paths, where the engine looks for its watermark model."""

from __future__ import annotations

import os

from engine_native.paths import APP, ORG, data_dir  # noqa: F401 - ORG and APP: app.qt.gui's names


def app_data_dir() -> str:
    return data_dir()


def library_dir() -> str:
    """The voice library folder."""
    return os.path.join(app_data_dir(), "voices")


def global_lexicon_path() -> str:
    """The pronunciation lexicon every script uses (engine_native.lexicon's format)."""
    return os.path.join(app_data_dir(), "lexicon.json")
