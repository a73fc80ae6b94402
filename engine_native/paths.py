"""The one definition of the app's data folder, where the engine finds the files it needs
beside the models (the watermark model, perth.gguf) and the app keeps the user's (voices,
the lexicon, downloaded models: app.core.paths builds on this). Without Qt, so the engine, the
command line and the server agree with the desktop app.

The data folder is ~/.local/share/chatterbox-studio on Linux (XDG_DATA_HOME honoured),
%APPDATA%\\chatterbox-studio on Windows, ~/Library/Application Support/chatterbox-studio on
macOS. Versions that let Qt name it had the name twice (.../chatterbox-studio/chatterbox-studio,
`legacy_data_dir`); app.core.paths.migrate_legacy_data_dir moves such a folder's contents up.
"""

from __future__ import annotations

import os
import sys

ORG = APP = "chatterbox-studio"  # also the settings file: ~/.config/ORG/APP.ini (app.qt.gui)


def user_data_base() -> str:
    """The platform's folder for applications' data (above the app's own)."""
    if sys.platform == "win32":
        return os.environ.get("APPDATA") or os.path.expanduser("~/AppData/Roaming")
    if sys.platform == "darwin":
        return os.path.expanduser("~/Library/Application Support")
    return os.environ.get("XDG_DATA_HOME") or os.path.expanduser("~/.local/share")


def data_dir() -> str:
    """The app's data folder (it may not exist yet)."""
    return os.path.join(user_data_base(), APP)


def legacy_data_dir() -> str:
    """Where earlier versions kept the data (Qt's AppDataLocation for ORG/APP: the name twice)."""
    return os.path.join(user_data_base(), ORG, APP)
