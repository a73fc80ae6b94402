"""How callers share one engine: a fair lock, the cancel token a generation carries, and the
`Stream` an `Engine.stream` call returns.

Native computations run with the GIL released, served in arrival order (`FairLock`), so
concurrent callers interleave chunk by chunk. `Stream.cancel()` sets the generation's
`CancelToken`: its consumer's loop ends quietly, the T3 loop in flight stops at its next
token and an S3Gen / HiFT computation in flight at its next graph node (ggml's abort
callback, `CancelToken.armed`), so the engine is free at once.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager


class FairLock:
    """A re-entrant lock that serves waiting threads in arrival order (a ticket lock), so
    concurrent callers interleave fairly instead of one starving the others."""

    def __init__(self):
        self._cv = threading.Condition(threading.Lock())
        self._next_ticket = 0
        self._serving = 0
        self._owner = None
        self._depth = 0

    def __enter__(self):
        me = threading.get_ident()
        with self._cv:
            if self._owner == me:
                self._depth += 1
                return self
            ticket = self._next_ticket
            self._next_ticket += 1
            while self._serving != ticket or self._owner is not None:
                self._cv.wait()
            self._owner, self._depth = me, 1
        return self

    def __exit__(self, *exc):
        with self._cv:
            self._depth -= 1
            if self._depth == 0:
                self._owner = None
                self._serving += 1
                self._cv.notify_all()


class CancelToken:
    """A cancel flag that also reaches the native T3 loop running for it, and the graph
    computation (S3Gen encoder, CFM, HiFT) running for it: `armed(*models)` points the
    models' abort flags at this token for one stretch of computations (a model and the
    decoder model beside it, where there is one)."""

    def __init__(self):
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._t3 = None
        self._models = ()

    def set(self) -> None:
        with self._lock:
            self._event.set()
            t3 = self._t3
            for model in self._models:  # under the lock: never after `armed` has disarmed
                model.abort_compute(True)
        if t3 is not None:
            t3.cancel()

    @contextmanager
    def armed(self, *models):
        """While inside, cancelling this token aborts the models' computation in flight (it
        raises Cancelled). Only one generation computes at a time (the engine's lock is held)."""
        with self._lock:
            self._models = models
            for model in models:
                model.abort_compute(self._event.is_set())
        try:
            yield
        finally:
            with self._lock:
                self._models = ()
                for model in models:
                    model.abort_compute(False)

    def is_set(self) -> bool:
        return self._event.is_set()

    def watch(self, t3) -> None:
        """The T3 token stream now running for this generation (None: none)."""
        with self._lock:
            self._t3 = t3
        if t3 is not None and self._event.is_set():
            t3.cancel()


class Stream:
    """The iterator `Engine.stream` returns; `cancel()` may be called from any thread."""

    def __init__(self, gen_factory):
        self._cancel = CancelToken()
        self._gen = gen_factory(self._cancel)

    def __iter__(self):
        return self

    def __next__(self):
        if self._cancel.is_set():
            self._gen.close()
            raise StopIteration
        return next(self._gen)

    def cancel(self) -> None:
        """Stop: the iterator ends before its next chunk; sampling in flight stops at its next token,
        an S3Gen / HiFT computation at its next graph node."""
        self._cancel.set()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def close(self) -> None:
        self._cancel.set()
        self._gen.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
