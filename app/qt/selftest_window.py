"""The self-test's window check (`chatterbox-studio selftest --window`): Qt lives here, not in app.cli."""

from __future__ import annotations

import os
import sys
import time


def _ms(t0: float) -> str:
    return f"{(time.perf_counter() - t0) * 1e3:.0f} ms"


def window_check(args, SelftestError, say) -> None:
    t0 = time.perf_counter()
    try:
        from PySide6.QtWidgets import QApplication
    except ImportError as e:
        raise SelftestError(f"Qt (PySide6) cannot be imported: {e}") from None
    qapp = QApplication.instance() or QApplication([sys.argv[0]])
    say(f"qt                platform '{qapp.platformName()}', ready in {_ms(t0)}")

    t0 = time.perf_counter()
    window = _make_main_window(SelftestError)
    window.show()
    deadline = time.monotonic() + args.window_timeout
    while not (window.isVisible() and window.windowHandle() is not None and window.windowHandle().isExposed()):
        if time.monotonic() > deadline:
            raise SelftestError(f"the main window was not shown within {args.window_timeout:.0f} s")
        qapp.processEvents()
        time.sleep(0.01)
    for _ in range(20):  # let the first paint and any queued start-up work run
        qapp.processEvents()
        time.sleep(0.01)
    size = window.size()
    icon = "with its icon" if not window.windowIcon().isNull() else "without an icon"
    say(f"window            '{window.windowTitle()}' {size.width()}x{size.height()} {icon}, shown in {_ms(t0)}")
    if args.screenshot:
        if not window.grab().save(args.screenshot, "PNG"):
            raise SelftestError(f"cannot save the screenshot {args.screenshot}")
        say(f"screenshot        {os.path.abspath(args.screenshot)}")
    window.close()
    qapp.processEvents()


def _make_main_window(SelftestError):
    """The desktop app's main window, built the way the app builds it (not run)."""
    try:
        from app.qt import gui
    except ImportError as e:
        raise SelftestError(f"this build has no desktop window (app.qt.gui: {e})") from None
    for name in ("create_main_window", "MainWindow"):
        factory = getattr(gui, name, None)
        if factory is not None:
            return factory()
    raise SelftestError("app.qt.gui has neither create_main_window() nor MainWindow")
