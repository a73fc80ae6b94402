"""app.qt.background.BackgroundOp: the op runs off the GUI thread, its result comes back on it,
and a widget closed and deleted while its op ran is never called back."""

from __future__ import annotations

import threading

from PySide6.QtCore import QThread
from PySide6.QtWidgets import QApplication, QLabel

from app.qt.background import BackgroundOp


def test_result_comes_back_on_the_gui_thread(qtbot):
    seen = []
    op = BackgroundOp(lambda _r: QThread.currentThread(), success=lambda t: seen.append((t, QThread.currentThread())))
    op.start()
    qtbot.waitUntil(lambda: bool(seen), timeout=10_000)
    worker, gui = seen[0]
    assert worker is not gui and gui is QApplication.instance().thread() and op.result is worker


def test_a_deleted_owner_is_not_called_back(qtbot):
    label = QLabel("reading…")
    release = threading.Event()
    called = []

    def show(text):
        called.append(text)
        label.setText(text)  # would raise: the label's C++ object is gone

    op = BackgroundOp(lambda _r: release.wait(10) and "done", success=show, owner=label).start()
    label.deleteLater()
    qtbot.waitUntil(lambda: not _alive(label), timeout=10_000)
    release.set()
    qtbot.waitUntil(lambda: not op.running, timeout=10_000)
    assert op.result == "done" and called == []


def _alive(widget) -> bool:
    import shiboken6

    QApplication.sendPostedEvents(None, 0)  # runs the deferred delete (event type 0: all posted events)
    return shiboken6.isValid(widget)


def test_a_finished_op_and_its_data_are_freed(qtbot):
    """Nothing keeps a finished op: neither Qt's side of its signals nor the pool's (a long session
    runs thousands: exports, library reads, each closure holding its audio or file)."""
    import gc
    import weakref

    class Data:  # what an op's closure holds (an export's samples, say)
        pass

    progress, failures, refs = [], [], []
    for i in range(4):
        data = Data()
        fails = i % 2 == 1

        def work(report, data=data, fails=fails):
            report(id(data))
            if fails:
                raise ValueError("bad file")
            return "ok"

        op = BackgroundOp(work, success=lambda _r: None, failure=lambda e: failures.append(str(e)), progress=progress.append).start()
        refs += [weakref.ref(op), weakref.ref(data)]
        del op, data, work
    qtbot.waitUntil(lambda: all(r() is None or not r().running for r in refs[::2]), timeout=10_000)
    QApplication.processEvents()
    gc.collect()
    assert len(progress) == 4 and failures == ["bad file", "bad file"]
    assert [r() for r in refs] == [None] * len(refs)
