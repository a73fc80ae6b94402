"""The engine thread: one EngineWorker on a QThread owns the Engine; the GUI talks to it through
EngineClient and never waits on it.

Requests go in as queued signal deliveries (so they run in order on the engine thread);
results, progress (stream chunks) and failures come back as signals and are dispatched to
the callbacks the caller gave, on the GUI thread. A job is cancelled from the GUI thread
with `job.cancel()`: a running stream is told `it.cancel()` (the engine stops within one
chunk), a queued job is skipped, and late progress of a cancelled job is dropped, so
nothing of it reaches the player after Stop.

Background jobs (likeness scores) wait on the GUI side until no other job is pending and go in
one at a time, so a user's request never queues behind them: a request that arrives while one
runs asks it to stop, and a background job stopped that way goes back to the front of the
queue (one that finished anyway delivers its result). A model load cancels them, since they
belong to the model being replaced.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
from PySide6.QtCore import QObject, QThread, Signal, Slot
from engine_native.engine import NOMINAL_SAMPLE_RATE
from engine_native.errors import Cancelled as EngineCancelled
from engine_native.language import detect_language

_ids = itertools.count(1)


class Cancelled(Exception):
    """The job was cancelled before or while it ran."""


@dataclass
class StreamChunk:
    """A chunk as the GUI receives it: the engine's Chunk plus the compute time it took."""

    chunk: object
    compute_s: float
    job_id: int


@dataclass(eq=False)
class EngineJob:
    fn: Callable  # fn(engine, job) -> result; runs on the engine thread
    label: str = ""
    success: Callable | None = None
    failure: Callable | None = None
    progress: Callable | None = None
    id: int = field(default_factory=lambda: next(_ids))
    background: bool = False
    preempted: bool = False  # a background job asked to stop for a user's request; it runs again later
    cancelled: bool = False
    finished: bool = False
    cancel_requested_at: float | None = None
    chunks_after_cancel: int = 0  # chunks the engine still produced after cancel(): the Stop test reads it
    _iterator: object = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def cancel(self) -> None:
        """From any thread: stop the job within one chunk; queued, it never starts."""
        with self._lock:
            if self.cancelled:
                return
            self.cancelled = True
            self.cancel_requested_at = time.perf_counter()
            it = self._iterator
        if it is not None:
            it.cancel()

    def set_iterator(self, it) -> None:
        with self._lock:
            self._iterator = it
            cancelled = self.cancelled
        if cancelled:
            it.cancel()

    def check(self) -> None:
        if self.cancelled:
            raise Cancelled(f"{self.label or 'job'} cancelled")


@dataclass
class ScriptChunk:
    """A piece of a rendered script, shaped like the engine's Chunk for the player."""

    samples: object
    span: tuple
    sentence_index: int
    n_sentences: int
    text: str
    is_last: bool
    timings: dict


class JobCancel:
    """A threading.Event look-alike over a job's cancel flag (the engine's `cancel=` arguments)."""

    def __init__(self, job: EngineJob):
        self.job = job

    def is_set(self) -> bool:
        return self.job.cancelled


def _drop_frames(e: BaseException | None) -> None:
    """A failed job's exception goes to the GUI thread, and its traceback's frames hold the
    job's locals, the engine among them: cleared here (the lines stay for a message), so the
    last reference to a model being replaced never ends on the GUI thread, which would then
    pay for freeing it (the GUI soak: 110-130 ms frozen at a model switch, while a cancelled
    background job's traceback still held the old engine)."""
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        traceback.clear_frames(e.__traceback__)
        e = e.__cause__ or e.__context__


class EngineWorker(QObject):
    """Lives on the engine thread. Everything here runs there."""

    submitted = Signal(object)  # EngineJob; queued into run()
    done = Signal(object, object)  # job, result
    failed = Signal(object, object)  # job, exception
    progressed = Signal(object, object)  # job, payload

    def __init__(self):
        super().__init__()
        self.engine = None
        self._voices: dict[str, tuple[float, object]] = {}
        self.submitted.connect(self.run)

    @Slot(object)
    def run(self, job: EngineJob) -> None:
        try:
            job.check()
            result = job.fn(self, job)
        except BaseException as e:  # noqa: BLE001 - any failure becomes a message on the GUI side
            _drop_frames(e)
            self.failed.emit(job, e)
        else:
            self.done.emit(job, result)

    # helpers used by job functions (engine thread)

    def require_engine(self):
        if self.engine is None:
            raise RuntimeError("No model is loaded. Choose one with the model button at the top left.")
        return self.engine

    def voice(self, path):
        """The Voice for a library path ('' or None: the model's built-in voice; a Voice: itself)."""
        engine = self.require_engine()
        if not path:
            return engine.builtin_voice
        if not isinstance(path, str):  # an unsaved Voice (the Voice Lab's test sentence)
            engine.check_voice(path)
            return path
        from engine_native import Voice

        mtime = os.path.getmtime(path)
        cached = self._voices.get(path)
        if cached and cached[0] == mtime:
            return cached[1]
        v = Voice.load(path)
        # A voice made with another model variant is re-made from the recording kept beside it
        # (seconds, here on the engine thread); without one, check_voice explains what to do.
        v = engine.adapt_voice(v) if v.variant != engine.variant and engine.voice_clip(v) else v
        engine.check_voice(v)
        self._voices[path] = (mtime, v)
        return v

    def stream(self, job: EngineJob, text: str, voice_path, params: dict) -> dict:
        """Run engine.stream, sending each chunk to the GUI; returns a summary."""
        engine = self.require_engine()
        voice = self.voice(voice_path)
        it = engine.stream(text, voice, **params)
        job.set_iterator(it)
        n, seed, audio = 0, None, 0
        t0 = t_last = time.perf_counter()
        try:
            for chunk in it:
                now = time.perf_counter()
                if job.cancelled:
                    job.chunks_after_cancel += 1
                    continue  # the iterator ends within one chunk; nothing more goes out
                n += 1
                audio += len(chunk.samples)
                seed = chunk.timings.get("seed", seed) if isinstance(chunk.timings, dict) else seed
                self.progressed.emit(job, StreamChunk(chunk, now - t_last, job.id))
                t_last = time.perf_counter()
        finally:
            close = getattr(it, "close", None)
            if close:
                close()
        job.check()
        return {"chunks": n, "seed": seed, "audio_s": audio / engine.sample_rate,
                "compute_s": time.perf_counter() - t0}

    def prepare_stream(self, job: EngineJob, voice_path, params: dict) -> None:
        """engine.prepare_stream: the voice's cached stream prefix for these settings."""
        it = self.require_engine().prepare_stream(self.voice(voice_path), **params)
        job.set_iterator(it)
        for _ in it:
            pass
        job.check()

    def render_script(self, job: EngineJob, text: str, voices: dict, params: dict, *, lexicon=None,
                      best_of: int = 1, speakers=None) -> dict:
        """A script (timed pauses, a cast, a lexicon, best-of-N: engine_native.script) sent to
        the GUI as chunks shaped like the engine's (span, sentence_index, n_sentences, text,
        samples, is_last). A pause joins the piece before it (before the first piece: the
        first piece). `voices`: speaker name (None: the narrator) -> library path or Voice."""
        from engine_native.script import Pause, parse_script, pieces, render

        engine = self.require_engine()
        vmap = {name: self.voice(p) for name, p in voices.items()}
        items = parse_script(text, speakers=speakers or None)
        n = len(pieces(items))
        params = dict(params)
        seed = params.pop("seed", None)
        if seed is None or seed < 0:
            seed = int.from_bytes(os.urandom(4), "little") >> 1
        cancel = JobCancel(job)
        t0, t_last, audio, sent, last, held = time.perf_counter(), time.perf_counter(), 0, 0, None, []
        scores = []
        for part in render(engine, items, voices=vmap, seed=seed, lexicon=lexicon, best_of=best_of,
                           options=params, cancel=cancel):
            if job.cancelled:
                break
            item = part.item
            if isinstance(item, Pause):
                if last is None:
                    held.append(part.samples)
                    continue
                item, final = last, False
            else:
                final = part.final
                last = item
                if part.score is not None:
                    scores.append(part.score)
            samples = np.concatenate(held + [part.samples]) if held else part.samples
            held = []
            audio += samples.size
            sent += 1
            chunk = ScriptChunk(samples, (item.start, item.end), item.index, n, item.text, final, {"seed": seed})
            now = time.perf_counter()
            self.progressed.emit(job, StreamChunk(chunk, now - t_last, job.id))
            t_last = time.perf_counter()
        job.check()
        return {"chunks": sent, "seed": seed, "audio_s": audio / engine.sample_rate,
                "compute_s": time.perf_counter() - t0,
                "likeness": (sum(scores) / len(scores)) if scores else None}

    def likeness(self, samples, voice_path) -> float:
        from engine_native.likeness import likeness

        engine = self.require_engine()
        return likeness(engine, samples, self.voice(voice_path))


def steady_heap() -> None:
    """glibc only: blocks of 1 MiB and more always get a mapping of their own, returned to the
    system when freed. By default glibc raises that threshold to the largest block freed so
    far (up to 32 MiB), after which a long session's model switches, audio and graph buffers
    come from the heap and fragment it. Measured on the GUI soak (150 actions, 2026-12-02):
    RSS after malloc_trim ~40 MB lower (1231 against 1271 MB after the warm-up), its growth
    over the session +2.3 to +3.0 % in five runs against +2.8 to +4.7 % in four without."""
    if not sys.platform.startswith("linux"):
        return
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (or no mallopt): its own allocator's defaults
        return
    m_mmap_threshold = -3  # malloc.h
    mallopt(ctypes.c_int(m_mmap_threshold), ctypes.c_int(1 << 20))


class EngineClient(QObject):
    """The GUI side: owns the engine thread, submits jobs, dispatches their callbacks."""

    modelChanged = Signal(object)  # engine.info dict, or None when unloaded
    busyChanged = Signal(bool)

    def __init__(self, parent=None):
        super().__init__(parent)
        steady_heap()  # the app's process lives long and switches models: keep its heap steady
        self.thread = QThread()
        self.thread.setObjectName("engine")
        self.worker = EngineWorker()
        self.worker.moveToThread(self.thread)
        self.worker.done.connect(self._on_done)
        self.worker.failed.connect(self._on_failed)
        self.worker.progressed.connect(self._on_progress)
        self.thread.start()
        self.pending: list[EngineJob] = []  # submitted to the engine thread, not yet finished
        self.waiting: list[EngineJob] = []  # background jobs not yet submitted
        self.info: dict | None = None
        self.model_path: str | None = None  # the loaded model's file
        self.expression_tags: list[str] = []  # the loaded model's paralinguistic tags ("[laugh]", ...)
        self.languages: dict[str, str] = {}
        self.presets: dict | None = None  # the loaded model's stream presets (Engine.presets)  # a Multilingual model's languages: code -> English name
        self._detect_language = None  # the engine's language guess (pure Python over the text's script)
        self.defaults: dict = {}
        self.sample_rate = NOMINAL_SAMPLE_RATE  # the loaded model's rate replaces it
        self.builtin_voice_name = "Built-in"

    # requests

    def submit(self, fn: Callable, *, label: str = "", success=None, failure=None, progress=None,
               background: bool = False) -> EngineJob:
        job = EngineJob(fn, label, success, failure, progress, background=background)
        if background:
            self.waiting.append(job)
            self._pump()
        else:
            for running in self.pending:
                if running.background and not running.cancelled:
                    running.preempted = True
                    running.cancel()
            self._send(job)
        return job

    def _send(self, job: EngineJob) -> None:
        self.pending.append(job)
        if len(self.pending) == 1:
            self.busyChanged.emit(True)
        self.worker.submitted.emit(job)

    def _pump(self) -> None:
        """Submit the next background job when the engine thread has nothing else to do."""
        if self.pending:
            return
        while self.waiting:
            job = self.waiting.pop(0)
            if job.cancelled:
                self._report_cancelled(job)
                continue
            self._send(job)
            return

    def detect_language(self, text: str) -> str | None:
        """The language the engine would pick for `text` (a Multilingual model; None otherwise).
        The guess reads only the text's script, so it is cheap enough for the GUI thread."""
        return self._detect_language(text) if self._detect_language and text.strip() else None

    def cancel_background(self) -> None:
        """Cancel the background jobs, waiting or running (their results would be stale)."""
        for job in self.waiting + [j for j in self.pending if j.background]:
            job.cancel()

    def load_model(self, path: str, threads: int = 0, device: str = "auto", success=None,
                   failure=None) -> EngineJob:
        def fn(worker: EngineWorker, job: EngineJob):
            from engine_native import DeviceError, Engine

            worker.engine = None  # free the old model first: two models may not fit in memory
            worker._voices.clear()
            note = ""
            try:
                engine = Engine(path, threads=threads or None, device=device or "auto")
            except DeviceError as e:  # a device remembered from another machine (or unplugged)
                engine = Engine(path, threads=threads or None, device="auto")
                note = f"{e}; using {engine.device} instead"
            worker.engine = engine
            try:  # read here, off the GUI thread: the tokenizer takes seconds to parse
                tags = engine.expression_tags
            except Exception:  # noqa: BLE001 - an unreadable tag list only leaves the menu with pauses
                tags = []
            info = dict(engine.info)
            info["device_note"] = note or info.get("device_note", "")
            return {"info": info, "defaults": dict(engine.defaults),
                    "sample_rate": int(engine.sample_rate), "builtin": engine.builtin_voice.name,
                    "tags": tags, "languages": dict(engine.languages), "presets": engine.presets,
                    # the guess without the engine: a bound method would keep the old model
                    # alive on the GUI thread, which would then pay for freeing it
                    "detect": functools.partial(detect_language, codes=dict(engine.languages))
                    if engine.languages else None}

        self.cancel_background()  # scores for the old model: the load must not wait behind them

        def ok(result):
            self.info, self.defaults, self.model_path = result["info"], result["defaults"], path
            self.sample_rate, self.builtin_voice_name = result["sample_rate"], result["builtin"]
            self.expression_tags = result["tags"]
            self.languages, self._detect_language = result["languages"], result["detect"]
            self.presets = result["presets"]
            self.modelChanged.emit(self.info)
            if success:
                success(self.info)

        def bad(e):
            self.info = self.model_path = self._detect_language = None
            self.languages = {}
            self.modelChanged.emit(None)
            if failure:
                failure(e)

        return self.submit(fn, label="load model", success=ok, failure=bad)

    def stream(self, text: str, voice_path, params: dict, *, on_chunk, success=None,
               failure=None, label="synthesis") -> EngineJob:
        return self.submit(lambda w, job: w.stream(job, text, voice_path, params), label=label,
                           success=success, failure=failure, progress=on_chunk)

    def render_script(self, text: str, voices: dict, params: dict, *, on_chunk, lexicon=None, best_of: int = 1,
                      speakers=None, success=None, failure=None, label="script") -> EngineJob:
        return self.submit(lambda w, job: w.render_script(job, text, voices, params, lexicon=lexicon,
                                                          best_of=best_of, speakers=speakers),
                           label=label, success=success, failure=failure, progress=on_chunk)

    def prepare_stream(self, voice_path, params: dict) -> EngineJob:
        """Readies a voice for streaming with these settings in the background (a user's
        request preempts it), so that the first Play with it speaks as soon as later ones."""
        return self.submit(lambda w, job: w.prepare_stream(job, voice_path, params), label="prepare voice",
                           failure=lambda _e: None, background=True)

    def likeness(self, samples, voice_path, *, success=None, failure=None) -> EngineJob:
        """The likeness of `samples` to a voice (engine_native.likeness), computed on the engine thread."""
        return self.submit(lambda w, _job: w.likeness(samples, voice_path), label="likeness",
                           success=success, failure=failure, background=True)

    def cancel_all(self) -> None:
        for job in self.waiting + self.pending:
            job.cancel()

    @property
    def busy(self) -> bool:
        return bool(self.pending or self.waiting)

    def shutdown(self) -> None:
        """Cancel everything and end the thread; waits for the running chunk (the engine's unit of work)."""
        self.cancel_all()
        self.thread.quit()
        self.thread.wait()

    # results (GUI thread)

    def _finish(self, job: EngineJob) -> None:
        job.finished = True
        if job in self.pending:
            self.pending.remove(job)
            self._pump()
            if not self.pending:
                self.busyChanged.emit(False)

    def _report_cancelled(self, job: EngineJob) -> None:
        job.finished = True
        if job.failure:
            job.failure(Cancelled(f"{job.label or 'job'} cancelled"))

    def _on_done(self, job: EngineJob, result) -> None:
        self._finish(job)
        if job.cancelled and not job.preempted:
            self._report_cancelled(job)
            return
        if job.success:
            job.success(result)

    def _on_failed(self, job: EngineJob, error) -> None:
        self._finish(job)
        if job.preempted and isinstance(error, (Cancelled, EngineCancelled)):
            self.waiting.insert(0, EngineJob(job.fn, job.label, job.success, job.failure, job.progress,
                                             background=True))
            self._pump()
            return
        if job.failure:
            job.failure(Cancelled(str(error)) if job.cancelled else error)

    def _on_progress(self, job: EngineJob, payload) -> None:
        if job.cancelled or job.progress is None:
            return  # Stop flushes: nothing of a cancelled job reaches the player
        job.progress(payload)
