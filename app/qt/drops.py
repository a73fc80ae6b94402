"""Files dropped anywhere on the main window open for what they are (app.qt.file_opener): a
model, a voice, a recording (the Voice Lab) or a script."""

from __future__ import annotations

import os

from PySide6.QtCore import QEvent, QObject
from PySide6.QtWidgets import QWidget

from app.core.open_files import kind_by_name


def dropped_files(mime) -> list[str]:
    """The local files in a drag's data that the app opens (by their names; the opener reads them)."""
    if not mime.hasUrls():
        return []
    return [u.toLocalFile() for u in mime.urls()
            if u.isLocalFile() and kind_by_name(u.toLocalFile()) and os.path.isfile(u.toLocalFile())]


class DropFilter(QObject):
    """Catches file drops on the window's widgets that take drops themselves (the editor would
    insert the path). Installed on those widgets only, never on the application: an
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
            paths = dropped_files(e.mimeData())
            if paths:
                e.acceptProposedAction()
                if t == QEvent.Drop:
                    self.window.open_files(paths)
                return True
        return False
