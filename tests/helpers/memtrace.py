"""What grew in a long GUI session, for the soak's CBS_SOAK_MEMTRACE switch
(tests/app/qt/test_main_window_soak.py)."""

from __future__ import annotations

import contextlib
import gc
import os
import sys

from PySide6.QtWidgets import QApplication


class MemTrace:
    """CBS_SOAK_MEMTRACE's readings: growth since `start` of Python's allocations (tracemalloc, by
    traceback), live objects by type, allocated blocks and Qt objects (widgets, the window's
    descendants)."""

    def __init__(self, window):
        self.w = window

    def counts(self) -> tuple[dict[str, int], int, int, int]:
        from PySide6.QtCore import QObject

        gc.collect()
        types: dict[str, int] = {}
        for o in gc.get_objects():
            t = type(o).__qualname__
            types[t] = types.get(t, 0) + 1
        return (types, sys.getallocatedblocks(), len(QApplication.allWidgets()),
                len(self.w.findChildren(QObject)))

    def start(self) -> MemTrace:
        import tracemalloc

        tracemalloc.start(12)
        self.snap = tracemalloc.take_snapshot()
        self.base = self.counts()
        return self

    def report(self, top: int = 8) -> None:
        import tracemalloc

        types, blocks, widgets, children = self.counts()
        types0, blocks0, widgets0, children0 = self.base
        print(f"  memtrace: blocks {blocks - blocks0:+d}, widgets {widgets - widgets0:+d} ({widgets}), "
              f"window descendants {children - children0:+d} ({children}), tracemalloc "
              f"{tracemalloc.get_traced_memory()[0] / 2**20:.1f} MB")
        grown = sorted(((n - types0.get(t, 0), t) for t, n in types.items()), reverse=True)[:top]
        print("  memtrace: objects " + ", ".join(f"{t} {d:+d}" for d, t in grown if d))
        snap = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
        for st in snap.compare_to(self.snap, "traceback")[:top]:
            print(f"  memtrace: {st.size_diff / 1024:+.0f} KiB in {st.count_diff:+d} blocks at")
            for line in st.traceback.format(limit=6, most_recent_first=True):
                print("     " + line)


def rss_mb(trim: bool = False) -> float:
    """Resident memory after gc.collect(); with `trim`, after glibc's malloc_trim(0) too, which
    hands back the free memory the allocator's per-thread arenas keep (not live memory)."""
    gc.collect()
    if trim:
        import ctypes

        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/statm") as f:
        pages = int(f.read().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
