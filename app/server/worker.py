"""One engine, one thread driving it, a bounded queue of jobs in front of it.

A job is a validated `Stream` plus where its audio goes (`on_chunk`, `on_end`, `on_error`,
called from the worker thread; they must not block). `Job.cancel()` (any thread) drops a
waiting job before it starts and stops a running one at its next chunk (`Stream.cancel`).
One job runs at a time, so requests never share a generation and their audio never mixes.
"""

from __future__ import annotations

import logging
import queue
import threading
import time

log = logging.getLogger("chatterbox.server")


class Busy(Exception):
    """The queue is full."""


class JobCancelled(Exception):
    """The job was cancelled (its client left, or the server is stopping)."""


def _tell(job, e: Exception) -> None:
    try:
        job.on_error(e)
    except Exception:
        pass


class Job:
    def __init__(self, stream, on_chunk, on_end, on_error, label: str = ""):
        self.stream = stream
        self.on_chunk, self.on_end, self.on_error = on_chunk, on_end, on_error
        self.label = label
        self.cancelled = threading.Event()
        self.done = threading.Event()
        self.submitted = time.perf_counter()

    def cancel(self) -> None:
        self.cancelled.set()
        self.stream.cancel()


class EngineWorker:
    def __init__(self, engine, queue_size: int):
        self.engine = engine
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, int(queue_size)))
        self._current: Job | None = None
        self._thread = threading.Thread(target=self._run, name="speech-engine", daemon=True)
        self._stopping = False
        self.served = 0
        self.cancelled = 0
        self._thread.start()

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    @property
    def busy(self) -> bool:
        return self._current is not None

    def submit(self, job: Job) -> None:
        if self._stopping:
            raise Busy("the server is shutting down")
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise Busy(f"the server is busy: {self._queue.maxsize} requests are already waiting") from None

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                break
            if job.cancelled.is_set():
                self.cancelled += 1
                _tell(job, JobCancelled("cancelled before it started"))
                job.done.set()
                continue
            self._current = job
            t0 = time.perf_counter()
            try:
                for chunk in job.stream:
                    if job.cancelled.is_set():
                        break
                    job.on_chunk(chunk)
                if job.cancelled.is_set():
                    self.cancelled += 1
                    log.info("request %s cancelled after %.2f s", job.label, time.perf_counter() - t0)
                    _tell(job, JobCancelled("cancelled"))
                else:
                    job.on_end()
                    self.served += 1
            except Exception as e:  # an engine failure ends this request only
                log.exception("request %s failed", job.label)
                _tell(job, e)
            finally:
                self._current = None
                job.done.set()

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel everything (running and waiting) and end the thread."""
        self._stopping = True
        cur = self._current
        if cur is not None:
            cur.cancel()
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancel()
                _tell(job, JobCancelled("the server is shutting down"))
                job.done.set()
        self._queue.put(None)
        self._thread.join(timeout)
