"""Where the app keeps the user's files and finds its own, without Qt (the command line, the
server and the desktop app use the same folders).

The data folder itself is defined once, in engine_native.paths (where the engine also looks
for its watermark model): ~/.local/share/chatterbox-studio on Linux and the like on Windows and
macOS. Versions that let Qt name it had the name twice (.../chatterbox-studio/chatterbox-studio);
`migrate_legacy_data_dir` moves such a folder's contents up once.
"""

from __future__ import annotations

import os

from engine_native.paths import APP, ORG, legacy_data_dir  # noqa: F401 - ORG and APP: app.qt.gui's names
from engine_native.paths import data_dir as app_data_dir


def migrate_legacy_data_dir() -> list[str]:
    """Moves what an earlier version left in the doubled folder up into the data folder (each
    entry the new folder does not have already; renames, so instant on one disk) and removes
    the old folder once empty. Returns the names moved. Cheap when there is nothing to move."""
    old, new = legacy_data_dir(), app_data_dir()
    if not os.path.isdir(old):
        return []
    moved = []
    for name in sorted(os.listdir(old)):
        target = os.path.join(new, name)
        if os.path.exists(target):
            continue
        try:
            os.replace(os.path.join(old, name), target)
            moved.append(name)
        except OSError:
            pass
    try:
        os.rmdir(old)
    except OSError:  # something was left (a name both folders have): kept where it is
        pass
    return moved


def library_dir() -> str:
    """The voice library folder."""
    return os.path.join(app_data_dir(), "voices")


def models_dir() -> str:
    """The models the app downloads and converts (app.core.model_manager)."""
    return os.path.join(app_data_dir(), "models")


def global_lexicon_path() -> str:
    """The pronunciation lexicon every script uses (engine_native.lexicon's format)."""
    return os.path.join(app_data_dir(), "lexicon.json")


def resources_dir() -> str:
    """The app's icon, desktop entry and MIME type: app/resources in an installed package (the
    wheel carries them there), the frozen app's bundle (CHATTERBOX_STUDIO_RESOURCES, set by its
    start-up hook), or resources/ at the top of a source checkout."""
    bundled = os.environ.get("CHATTERBOX_STUDIO_RESOURCES")
    if bundled and os.path.isdir(bundled):
        return bundled
    app_dir = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
    installed = os.path.join(app_dir, "resources")
    if os.path.isdir(installed):
        return installed
    return os.path.join(os.path.dirname(app_dir), "resources")


def app_icon() -> str:
    return os.path.join(resources_dir(), "chatterbox-studio.svg")
