"""The GUI's side of the engine: EngineClient owns the engine thread (app.qt.engine_worker) and
offers the engine's work as typed operations, in the manner of Anki's QueryOp/CollectionOp.

A view asks for an operation by name ("load this model", "synthesize", "clone this clip",
"find the speakers") with the data it has; `success(result)`, `failure(error)` and, for
streams, `on_chunk(StreamChunk)` / `progress(...)` run later on the GUI thread. A cancelled
operation reports `engine_native.errors.Cancelled` to its failure, the one cancellation type
of the app. Every operation returns its EngineJob, whose `cancel()` stops it within one chunk
(queued, it never starts); nothing of a cancelled job reaches its callbacks afterwards, so
nothing of it reaches the player after Stop. Views never see the worker or the engine.

Voices are named the way the library names them: a path, "" for the model's built-in voice,
or an unsaved Voice (the Voice Lab's clone).

Background operations (likeness scores, readying a voice) wait on the GUI side until no other
job is pending and go in one at a time, so a user's request never queues behind them: a
request that arrives while one runs asks it to stop, and a background job stopped that way
goes back to the front of the queue (one that finished anyway delivers its result). A model
load cancels them, since they belong to the model being replaced.
"""

from __future__ import annotations

import ctypes
import sys
from typing import Callable

from PySide6.QtCore import QObject, QThread, Signal
from engine_native.engine import NOMINAL_SAMPLE_RATE
from engine_native.errors import Cancelled

from app.qt.engine_worker import EngineJob, EngineWorker


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
    """The GUI side: owns the engine thread, runs the operations, dispatches their callbacks."""

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
        self.languages: dict[str, str] = {}  # a Multilingual model's languages: code -> English name
        self.presets: dict | None = None  # the loaded model's stream presets (Engine.presets)
        self._detect_language = None  # the engine's language guess (pure Python over the text's script)
        self.defaults: dict = {}
        self.sample_rate = NOMINAL_SAMPLE_RATE  # the loaded model's rate replaces it
        self.builtin_voice_name = "Built-in"

    # --- the operations -----------------------------------------------------------------------------

    def load_model(self, path: str, threads: int = 0, device: str = "auto", *, watermark: bool = True, decoder: str = "",
                   success=None, failure=None) -> EngineJob:
        """Load a model (the old one is freed first; `watermark`: its speech marked, the
        engine's default; `decoder`: a Multilingual model's, see EngineWorker.load_model);
        modelChanged tells everyone."""
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

        return self.submit(lambda w, _job: w.load_model(path, threads, device, watermark, decoder), label="load model",
                           success=ok, failure=bad)

    def set_watermark(self, on: bool, *, success=None, failure=None) -> EngineJob:
        """Mark (or not) what the loaded engine speaks from now on; success gets the new state."""
        def ok(state):
            if self.info is not None:
                self.info["watermark"] = state
            if success:
                success(state)

        return self.submit(lambda w, _job: w.set_watermark(on), label="watermark", success=ok, failure=failure)

    def stream(self, text: str, voice, params: dict, *, on_chunk, success=None, failure=None,
               label="synthesis") -> EngineJob:
        """Synthesize `text`, each chunk to `on_chunk` as it comes; success gets a summary
        (chunks, seed, audio_s, compute_s)."""
        return self.submit(lambda w, job: w.stream(job, text, voice, params), label=label, success=success,
                           failure=failure, progress=on_chunk)

    def render_script(self, text: str, voices: dict, params: dict, *, on_chunk, lexicon=None, best_of: int = 1,
                      speakers=None, success=None, failure=None, label="script") -> EngineJob:
        """A script (timed pauses, a cast, a lexicon, best-of-N) as a stream; `voices`: speaker
        name (None: the narrator) -> voice."""
        return self.submit(lambda w, job: w.render_script(job, text, voices, params, lexicon=lexicon,
                                                          best_of=best_of, speakers=speakers),
                           label=label, success=success, failure=failure, progress=on_chunk)

    def export_script(self, text: str, path: str, *, voices: dict, params: dict, lexicon=None, best_of: int = 1,
                      speakers=None, model_path: str = "", success=None, failure=None,
                      progress=None) -> EngineJob:
        """Render a script into a file through the resumable long render; `progress((fraction,
        eta_s, done, total))` after each sentence; success gets {path, seconds, resumed, seed}."""
        return self.submit(lambda w, job: w.export_script(job, text, path, voices=voices, params=params,
                                                          lexicon=lexicon, best_of=best_of, speakers=speakers,
                                                          model_path=model_path),
                           label="export script", success=success, failure=failure, progress=progress)

    def render_book(self, request, book, *, progress, success=None, failure=None) -> EngineJob:
        """Render a book's chapters (request: app.core.book.job.BookJob, book: its Book with the
        review applied) into the job's parts folder; `progress(BookEvent)` as it goes, success
        gets the BookResult. A background job: a user's request (Play in the studio) stops it
        within a sentence and it goes on afterwards from its parts folder, as a resume does."""
        return self.submit(lambda w, job: w.render_book(job, request, book), label="audiobook", success=success,
                           failure=failure, progress=progress, background=True)

    def revoice(self, samples, rate: int, voice, params: dict, *, on_chunk, success=None, failure=None,
                label="re-voice") -> EngineJob:
        """A decoded recording spoken again in `voice` (Engine.revoice_stream), each chunk to
        `on_chunk` as it comes; success gets a summary as `stream`'s. `params`: seed,
        cfm_steps, prompt_seconds, first_chunk_tokens, chunk_tokens."""
        return self.submit(lambda w, job: w.revoice(job, samples, rate, voice, params), label=label,
                           success=success, failure=failure, progress=on_chunk)

    def prepare_stream(self, voice, params: dict) -> EngineJob:
        """Readies a voice for streaming with these settings in the background (a user's
        request preempts it), so that the first Play with it speaks as soon as later ones."""
        return self.submit(lambda w, job: w.prepare_stream(job, voice, params), label="prepare voice",
                           failure=lambda _e: None, background=True)

    def likeness(self, samples, voice, *, success=None, failure=None) -> EngineJob:
        """The likeness of `samples` to a voice (engine_native.likeness), in the background."""
        return self.submit(lambda w, _job: w.likeness(samples, voice), label="likeness",
                           success=success, failure=failure, background=True)

    def clone_clip(self, samples, rate: int, *, success=None, failure=None) -> EngineJob:
        """A Voice cloned from a prepared clip (the Voice Lab's rendered window)."""
        return self.submit(lambda w, _job: w.clone_clip(samples, rate), label="clone voice", success=success,
                           failure=failure)

    def find_speakers(self, mono, rate: int, regions, *, success=None, failure=None) -> EngineJob:
        """(who speaks where in a recording: voice_lab.speakers.Speakers, what told them apart),
        with the trained speaker encoder where installed, else the model's x-vectors
        (app.core.voice_lab_session.find_speakers)."""
        return self.submit(lambda w, _job: w.find_speakers(mono, rate, regions), label="find speakers",
                           success=success, failure=failure)

    def test_take_likeness(self, text: str, voice, options: dict | None = None, *, recording=None, success=None,
                           failure=None) -> EngineJob:
        """(likeness, what scored it) of a take of `text` in `voice` to that voice and its
        `recording` ((samples, rate)), in the background."""
        return self.submit(lambda w, job: w.test_take_likeness(job, text, voice, options, recording),
                           label="clone likeness",
                           success=success, failure=failure, background=True)

    # --- the queue ----------------------------------------------------------------------------------

    def submit(self, fn: Callable, *, label: str = "", success=None, failure=None, progress=None,
               background: bool = False) -> EngineJob:
        """Run `fn(worker, job)` on the engine thread: what the operations above are made of
        (and what tests use to reach the engine). Views use the operations."""
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

    def cancel_all(self) -> None:
        for job in self.waiting + self.pending:
            job.cancel()

    @property
    def busy(self) -> bool:
        return bool(self.pending or self.waiting)

    def shutdown(self) -> None:
        """Cancel everything and end the thread; waits for the running chunk (the engine's unit of work).
        The model's memory is handed back now, not when Qt gets round to deleting the worker."""
        self.cancel_all()
        self.thread.quit()
        self.thread.wait()
        self.worker.engine = None

    # --- results (GUI thread) -----------------------------------------------------------------------

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
        if job.preempted and isinstance(error, Cancelled):
            job.requeue()
            self.waiting.insert(0, job)
            self._pump()
            return
        if job.failure:
            cancelled = job.cancelled and not isinstance(error, Cancelled)
            job.failure(Cancelled(str(error)) if cancelled else error)

    def _on_progress(self, job: EngineJob, payload) -> None:
        if job.cancelled or job.progress is None:
            return  # Stop flushes: nothing of a cancelled job reaches the player
        job.progress(payload)
