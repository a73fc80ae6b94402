"""One engine, one thread driving it, a bounded queue of jobs in front of it; or several
such engines (replicas of one model) behind one `WorkerPool`.

A job is a validated `Stream` plus where its audio goes (`on_chunk`, `on_end`, `on_error`,
called from the worker thread; they must not block). `Job.cancel()` (any thread) drops a
waiting job before it starts and stops a running one at its next chunk (`Stream.cancel`).
One job runs at a time, so requests never share a generation and their audio never mixes.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import time

from engine_native.errors import Cancelled
from engine_native.pipeline.t3_batch import batching_pays

log = logging.getLogger("chatterbox.server")


class Busy(Exception):
    """The queue is full."""


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
        self.started = 0.0
        self.chunks = None   # the stream's iterator, once the worker took the job

    def cancel(self) -> None:
        self.cancelled.set()
        self.stream.cancel()


class EngineWorker:
    """`parallel` = 1 (the default): jobs run one after another, first come first served.
    `parallel` = N > 1: up to N jobs are active at once and the one thread advances them a chunk
    each in turn (round robin), so every client hears its first audio early; this needs an
    engine whose streams may interleave (each generation with its own T3 session). Where
    batching pays (a GPU; the CPU with CBS_T3_BATCH=1: t3_batch.batching_pays) the active
    jobs' T3 steps are taken together (T3Sessions.batch_streams) while this thread runs
    their S3Gen / HiFT passes in turn."""

    def __init__(self, engine, queue_size: int, parallel: int = 1):
        self.engine = engine
        self.parallel = max(1, int(parallel))
        self._queue: queue.Queue = queue.Queue(maxsize=max(1, int(queue_size)))
        self._active: list[Job] = []
        self._thread = threading.Thread(target=self._run, name="speech-engine", daemon=True)
        self._stopping = False
        self.served = 0
        self.cancelled = 0
        self.batching = self.parallel > 1 and batching_pays(engine.device)
        if self.batching:
            engine.stages.t3.batch_streams(True)
        self._thread.start()

    @property
    def waiting(self) -> int:
        return self._queue.qsize()

    @property
    def busy(self) -> bool:
        return bool(self._active)

    @property
    def active(self) -> int:
        return len(self._active)

    def submit(self, job: Job) -> None:
        if self._stopping:
            raise Busy("the server is shutting down")
        try:
            self._queue.put_nowait(job)
        except queue.Full:
            raise Busy(f"the server is busy: {self._queue.maxsize} requests are already waiting") from None

    def _admit(self) -> bool:
        """Take waiting jobs while there is room (blocking only when nothing is active).
        False when told to stop."""
        while len(self._active) < self.parallel:
            try:
                job = self._queue.get(block=not self._active)
            except queue.Empty:
                return True
            if job is None:
                return False
            if job.cancelled.is_set():
                self.cancelled += 1
                _tell(job, Cancelled("cancelled before it started"))
                job.done.set()
                continue
            job.started = time.perf_counter()
            job.chunks = iter(job.stream)
            self._active.append(job)
        return True

    def _step(self, job: Job) -> bool:
        """One chunk of `job`; True when the job is over."""
        try:
            if not job.cancelled.is_set():
                try:
                    chunk = next(job.chunks)
                except StopIteration:
                    chunk = None
                if chunk is not None and not job.cancelled.is_set():
                    job.on_chunk(chunk)
                    return False
            if job.cancelled.is_set():
                self.cancelled += 1
                log.info("request %s cancelled after %.2f s", job.label, time.perf_counter() - job.started)
                _tell(job, Cancelled("cancelled"))
            else:
                job.on_end()
                self.served += 1
        except Exception as e:  # an engine failure ends this request only
            log.exception("request %s failed", job.label)
            _tell(job, e)
        job.done.set()
        return True

    def _run(self) -> None:
        while self._admit():
            for job in list(self._active):
                if self._step(job):
                    self._active.remove(job)
        for job in self._active:
            job.cancel()
            _tell(job, Cancelled("the server is shutting down"))
            job.done.set()
        self._active = []

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel everything (running and waiting) and end the thread."""
        self._stopping = True
        for job in list(self._active):
            job.cancel()
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancel()
                _tell(job, Cancelled("the server is shutting down"))
                job.done.set()
        self._queue.put(None)
        self._thread.join(timeout)
        if self.batching and not self._thread.is_alive():
            self.engine.stages.t3.batch_streams(False)


def _total(name: str) -> property:
    """The sum of every worker's `name`."""
    return property(lambda self: sum(getattr(w, name) for w in self.workers))


class WorkerPool:
    """The server's engines (one, or replicas of one model: `serve --replicas K`), each with its
    own EngineWorker. On a GPU one worker thread runs its streams' S3Gen / HiFT passes in turn
    and the device idles between its small kernels (docs/GPU.md); replicas, each with its own
    copy of the weights, backend and thread, run several passes at once. A request's stream is
    opened on `pick().engine` and submitted to that worker. Reads as one worker (`served`,
    `active`, `stop()`...)."""

    def __init__(self, engines, queue_size: int, parallel: int = 1):
        each = max(1, -(-int(parallel) // len(engines)))  # `parallel` in all, spread over the replicas
        self.workers = [EngineWorker(e, queue_size, parallel=each) for e in engines]
        self._turn = itertools.count()

    def pick(self) -> EngineWorker:
        """The replica with the fewest requests (running or waiting); among equals, the next in
        turn, so requests opened at the same moment (none submitted yet) spread over them."""
        n = len(self.workers)
        start = next(self._turn) % n
        return min(self.workers[start:] + self.workers[:start], key=lambda w: w.active + w.waiting)

    @property
    def replicas(self) -> int:
        return len(self.workers)

    parallel = _total("parallel")
    waiting = _total("waiting")
    active = _total("active")
    served = _total("served")
    cancelled = _total("cancelled")

    @property
    def batching(self) -> bool:
        return any(w.batching for w in self.workers)

    @property
    def busy(self) -> bool:
        return any(w.busy for w in self.workers)

    def stop(self, timeout: float = 10.0) -> None:
        for w in self.workers:
            w.stop(timeout)
