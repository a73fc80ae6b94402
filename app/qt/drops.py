"""Audio and video files dropped anywhere on the main window open in the Voice Lab."""

from __future__ import annotations

import os

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QWidget

from app.qt.voice_actions import AUDIO_EXTENSIONS


def dropped_media(mime) -> str | None:
    """The first local audio/video file in a drag's data, if any."""
    if not mime.hasUrls():
        return None
    for url in mime.urls():
        if url.isLocalFile():
            path = url.toLocalFile()
            if os.path.splitext(path)[1].lower() in AUDIO_EXTENSIONS and os.path.isfile(path):
                return path
    return None


class DropFilter(QObject):
    """Catches audio/video drops on the window's widgets that take drops themselves (the editor
    would insert the path). Installed on those widgets only, never on the application: an
    application-wide Python filter sees every event of the app (paints, timers), measured as a
    quarter of the GUI thread's CPU time. Drops elsewhere reach MainWindow.dropEvent."""

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        for w in window.findChildren(QWidget):
            if w.acceptDrops():
                w.installEventFilter(self)

    def eventFilter(self, obj, e):
        t = e.type()
        if t in (QEvent.DragEnter, QEvent.DragMove, QEvent.Drop) and isinstance(obj, QWidget) \
                and obj.window() is self.window:
            path = dropped_media(e.mimeData())
            if path:
                e.acceptProposedAction()
                if t == QEvent.Drop:
                    self.window.open_voice_lab(path)
                return True
        return False
