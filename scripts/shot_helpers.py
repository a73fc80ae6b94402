"""What the screenshot scripts share (scripts/screenshots.py, screenshot_script.py, first_hour.py):
running the app's event loop until something shows, and a main window with throw-away
settings and data."""

from __future__ import annotations

import os
import sys
import time


def pump(app, seconds: float, until=None) -> bool:
    """Runs the event loop for at most `seconds`, returning as soon as `until()` is true."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        app.processEvents()
        if until is not None and until():
            return True
        time.sleep(0.01)
    return bool(until()) if until else True


def throwaway_window(work: str, size=(1360, 820)):
    """(app, main window) in the dark theme, its settings and data under `work`."""
    from PySide6.QtCore import QSettings

    from app.qt import theme
    from app.qt.gui import make_app
    from app.qt.main_window import MainWindow
    from app.qt.settings import Settings

    app = make_app([sys.argv[0]])
    settings = Settings(QSettings(os.path.join(work, "settings.ini"), QSettings.IniFormat))
    theme.apply(app, "dark")
    w = MainWindow(settings, os.path.join(work, "data"))
    w.resize(*size)
    return app, w


def open_window(model: str, work: str, size=(1360, 820)):
    """(app, a shown throw-away window with `model` loaded); the window is None (and the reason
    on stderr) when the model did not load."""
    app, w = throwaway_window(work, size)
    w.show()
    loaded = []
    w.client.modelChanged.connect(loaded.append)
    w.load_model(model)
    if not pump(app, 300, lambda: loaded) or not loaded[-1]:
        print(f"the model did not load: {w.last_error or 'not in time'}", file=sys.stderr)
        return app, None
    return app, w

