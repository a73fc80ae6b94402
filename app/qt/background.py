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

import functools
import traceback
from typing import Callable

import shiboken6
from PySide6.QtCore import QCoreApplication, QObject, QThreadPool, Signal

_live: set[BackgroundOp] = set()  # keeps running ops alive


class _Dispatcher(QObject):
    """One for all ops, made on the GUI thread: a pool thread's emit reaches its slots there. An op
    of its own would cost a QObject whose connections hold the op's callbacks, which hold the op:
    a cycle through C++ that Python's collector cannot see, keeping every finished op (its closure's
    data, an export's audio) alive."""

    done = Signal(object, object)  # (op, result)
    failed = Signal(object, object)  # (op, exception)
    progress = Signal(object, object)  # (op, value)

    def __init__(self):
        super().__init__()
        self.done.connect(lambda op, r: op._finish(op._success, r, "result"))
        self.failed.connect(lambda op, e: op._finish(op._failure, e, "error"))
        self.progress.connect(lambda op, v: op._progress and op._progress(v))


_dispatcher: _Dispatcher | None = None


def _run(op: BackgroundOp, dispatcher: _Dispatcher) -> None:
    """The op on a pool thread; its outcome goes back to the GUI thread through the dispatcher."""
    try:
        result = op.op(functools.partial(dispatcher.progress.emit, op))
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the GUI as a message
        e.__traceback_text__ = traceback.format_exc()
        dispatcher.failed.emit(op, e)
    else:
        dispatcher.done.emit(op, result)


class BackgroundOp:
    def __init__(self, op: Callable, success: Callable | None = None, failure: Callable | None = None,
                 progress: Callable | None = None, owner: QObject | None = None):
        self.op = op
        self.owner = owner
        self._success, self._failure, self._progress = success, failure, progress
        self.running = False
        self.result = self.error = None  # what the op returned or raised, once it has finished

    def start(self, pool: QThreadPool | None = None) -> BackgroundOp:
        global _dispatcher
        if _dispatcher is None:
            _dispatcher = _Dispatcher()
            app = QCoreApplication.instance()
            if app is not None:  # its slots run on the GUI thread, wherever the first op starts
                _dispatcher.moveToThread(app.thread())
        _live.add(self)
        self.running = True
        # a plain callable, not a QRunnable subclass: PySide keeps the Python side of a QRunnable
        # (and with it the op's closure) alive after the pool has deleted it
        (pool or QThreadPool.globalInstance()).start(functools.partial(_run, self, _dispatcher))
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
