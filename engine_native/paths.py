"""The one definition of the app's data folder, where the engine finds the files it needs
beside the models (the watermark model, perth.gguf) and the app keeps the user's (voices,
the lexicon: app.core.paths builds on this). Without Qt, so the engine, the command line and
the server agree with the desktop app.

On Linux it is $XDG_DATA_HOME (else ~/.local/share)/chatterbox-studio/chatterbox-studio, on
Windows %APPDATA%\\chatterbox-studio\\chatterbox-studio, on macOS ~/Library/Application
Support/chatterbox-studio/chatterbox-studio: Qt's AppDataLocation for the organisation and
application names app.qt.gui sets (both "chatterbox-studio", hence the name twice).
"""

from __future__ import annotations

import os
import sys

ORG = APP = "chatterbox-studio"


def user_data_base() -> str:
    """The platform's folder for applications' data (above the app's own)."""
    if sys.platform == "win32":
        return os.environ.get("APPDATA") or os.path.expanduser("~/AppData/Roaming")
    if sys.platform == "darwin":
        return os.path.expanduser("~/Library/Application Support")
    return os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")


def data_dir() -> str:
    """The app's data folder (it may not exist yet)."""
    return os.path.join(user_data_base(), ORG, APP)
