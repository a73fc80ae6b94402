"""Background operations, Anki-style: `op` runs on a pool thread and never touches the UI;
`success`, `failure` and `progress` run on the GUI thread.

    BackgroundOp(lambda report: decode(path), success=show, failure=show_error).start()

`op(report)` receives `report(value)` to send progress (any object) to `progress`. With
`owner=widget`, the callbacks are dropped once the widget is gone: a window closed while its
file was still being read must not be touched when the read ends.
Engine work does not go here: it goes through EngineClient's operations (one thread owns the
engine). Files are read and written here, never on the GUI thread.
"""

from __future__ import annotations

import traceback
from typing import Callable

import shiboken6
from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal

_live: set[BackgroundOp] = set()  # keeps running ops (and their Qt signals) alive


class _Signals(QObject):
    done = Signal(object)
    failed = Signal(object)
    progress = Signal(object)


class _Runnable(QRunnable):
    def __init__(self, op, signals):
        super().__init__()
        self.op, self.signals = op, signals

    def run(self):
        try:
            result = self.op(self.signals.progress.emit)
        except BaseException as e:  # noqa: BLE001 - every failure goes back to the GUI as a message
            e.__traceback_text__ = traceback.format_exc()
            self.signals.failed.emit(e)
        else:
            self.signals.done.emit(result)


class BackgroundOp:
    def __init__(self, op: Callable, success: Callable | None = None, failure: Callable | None = None,
                 progress: Callable | None = None, owner: QObject | None = None):
        self.op = op
        self.owner = owner
        self.signals = _Signals()  # created on the GUI thread: its slots run there
        self.signals.done.connect(lambda r: self._finish(success, r, "result"))
        self.signals.failed.connect(lambda e: self._finish(failure, e, "error"))
        if progress:
            self.signals.progress.connect(progress)
        self.running = False
        self.result = self.error = None  # what the op returned or raised, once it has finished

    def start(self, pool: QThreadPool | None = None) -> BackgroundOp:
        _live.add(self)
        self.running = True
        (pool or QThreadPool.globalInstance()).start(_Runnable(self.op, self.signals))
        return self

    def _finish(self, callback, value, outcome: str):
        self.running = False
        setattr(self, outcome, value)
        _live.discard(self)
        if callback and (self.owner is None or shiboken6.isValid(self.owner)):
            callback(value)


def error_text(e: BaseException) -> str:
    """A readable one-paragraph message for the user (no traceback)."""
    text = str(e).strip()
    return text or type(e).__name__
