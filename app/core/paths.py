"""Where the desktop app keeps the user's files, found without Qt (the command line and the
server use the same folders as the app: QStandardPaths.AppDataLocation's layout)."""

from __future__ import annotations

import os
import sys

ORG = APP = "chatterbox-studio"  # as app.qt.gui names them for QStandardPaths


def app_data_dir() -> str:
    if sys.platform == "win32":
        base = os.environ.get("APPDATA") or os.path.expanduser("~/AppData/Roaming")
    elif sys.platform == "darwin":
        base = os.path.expanduser("~/Library/Application Support")
    else:
        base = os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")
    return os.path.join(base, ORG, APP)


def library_dir() -> str:
    """The voice library folder."""
    return os.path.join(app_data_dir(), "voices")


def global_lexicon_path() -> str:
    """The pronunciation lexicon every script uses (engine_native.lexicon's format)."""
    return os.path.join(app_data_dir(), "lexicon.json")
