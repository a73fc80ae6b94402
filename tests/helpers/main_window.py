"""The main window in tests: make one on its own settings and data folder, close it, wait on
it with the event loop running, load a model into it, drop a file on it, and a probe of the GUI
thread's responsiveness."""

from __future__ import annotations

import gc
import time
import warnings

from PySide6.QtCore import QMimeData, QPointF, QSettings, Qt, QTimer, QUrl
from PySide6.QtGui import QDropEvent
from PySide6.QtWidgets import QApplication

STREAM = {"first_chunk_tokens": 10, "chunk_tokens": 10}  # several chunks from a short sentence


def _settings(folder) -> object:
    from app.qt.settings import Settings

    return Settings(QSettings(str(folder / "settings.ini"), QSettings.IniFormat))


def _make_window(folder):
    from app.qt import theme
    from app.qt.main_window import MainWindow

    theme.apply(QApplication.instance(), "dark")
    return MainWindow(_settings(folder), str(folder / "data"))


def _close(window) -> None:
    window.close()  # the window's EngineClient.shutdown hands its model's memory back
    window.deleteLater()
    QApplication.processEvents()
    gc.collect()


def _wait(qtbot, cond, timeout_s: float, what: str) -> None:
    try:
        qtbot.waitUntil(lambda: bool(cond()), timeout=int(timeout_s * 1000))
    except AssertionError:
        raise AssertionError(f"timed out after {timeout_s:.0f} s waiting for {what}") from None


def load_and_wait(w, path: str, timeout_s: float = 300) -> None:
    """Load a model in the window and wait (the GUI's event loop running) until it is in."""
    loaded = []
    w.client.modelChanged.connect(loaded.append)
    w.load_model(path)
    deadline = time.monotonic() + timeout_s
    while not loaded and time.monotonic() < deadline:
        QApplication.processEvents()
        time.sleep(0.01)
    w.client.modelChanged.disconnect(loaded.append)
    assert loaded and loaded[-1], f"the model did not load: {w.last_error}"


def drop_file(widget, path: str) -> None:
    """A drag entering the widget and a drop, as a file manager sends them."""
    from PySide6.QtGui import QDragEnterEvent

    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(path)])
    pos = QPointF(widget.width() / 2, widget.height() / 2)
    with warnings.catch_warnings():  # deprecated in newer PySide6, the only form in older ones
        warnings.simplefilter("ignore", DeprecationWarning)
        enter = QDragEnterEvent(pos.toPoint(), Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier)
    QApplication.sendEvent(widget, enter)
    QApplication.sendEvent(widget, QDropEvent(pos, Qt.CopyAction, mime, Qt.LeftButton, Qt.NoModifier))


STALL_LIMIT_S = 0.100  # the GUI thread may be busy this long at most inside one gap between ticks
STARVED_LIMIT_S = 2.0  # ... and off the CPU (other threads running) this long at most


class TimerProbe:
    """A 10 ms QTimer on the GUI thread: the worst gap between its ticks and, for each gap over
    STALL_LIMIT_S, the CPU time the GUI thread itself spent in it. A gap with the GUI thread
    busy is a freeze; a gap with it idle is the machine's other threads (the engine's, other
    processes) keeping it off the CPU, which a loaded 2-core machine shows now and then."""

    def __init__(self):
        self.timer = QTimer()
        self.timer.setInterval(10)
        self.timer.timeout.connect(self._tick)
        self.last = None
        self.cpu = 0.0
        self.worst = 0.0
        self.worst_action = ""
        self.action = ""
        self.ticks = 0
        self.stalls: list[tuple[float, float, str]] = []  # (gap s, GUI-thread CPU s in it, action)

    def _tick(self):
        now, cpu = time.perf_counter(), time.thread_time()
        if self.last is not None:
            gap = now - self.last
            if gap > self.worst:
                self.worst, self.worst_action = gap, self.action
            if gap > STALL_LIMIT_S:
                self.stalls.append((gap, cpu - self.cpu, self.action))
        self.last, self.cpu = now, cpu
        self.ticks += 1

    @property
    def busy(self) -> float:
        """The most CPU time the GUI thread spent inside one gap over the limit."""
        return max((c for _g, c, _a in self.stalls), default=0.0)

    def check(self, what: str) -> None:
        assert self.busy < STALL_LIMIT_S, f"the GUI thread was busy for {self.busy * 1000:.0f} ms {what}"
        assert self.worst < STARVED_LIMIT_S, f"the GUI thread did not run for {self.worst * 1000:.0f} ms {what}"

    def start(self):
        self.last = None
        self.timer.start()

    def stop(self):
        self.timer.stop()
        self.last = None
