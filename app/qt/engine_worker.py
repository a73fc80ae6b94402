"""The engine thread: one EngineWorker on a QThread owns the Engine and runs the jobs the GUI's
EngineClient (app.qt.engine_client) sends it, one at a time, in order.

Each method here is the engine-thread half of one of EngineClient's operations; what they
compute without Qt lives in app.core and voice_lab. Results, progress (stream chunks) and
failures go back to the GUI thread as signals.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import traceback
from dataclasses import dataclass, field
from typing import Callable

from PySide6.QtCore import QObject, Signal, Slot
from engine_native.errors import Cancelled
from engine_native.options import random_seed

_ids = itertools.count(1)


@dataclass
class StreamChunk:
    """A chunk as the GUI receives it: the engine's Chunk (or a ScriptChunk) plus the compute
    time it took."""

    chunk: object
    compute_s: float
    job_id: int


@dataclass(eq=False)
class EngineJob:
    """One request to the engine thread. It is also the cancel token the engine's `cancel=`
    arguments take (`is_set()`, as on a threading.Event)."""

    fn: Callable  # fn(worker, job) -> result; runs on the engine thread
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
                self.preempted = False  # cancelled after a preemption: it is not to run again
                return
            self.cancelled = True
            self.cancel_requested_at = time.perf_counter()
            it = self._iterator
        if it is not None:
            it.cancel()

    def requeue(self) -> None:
        """A preempted background job about to run again: the same object, so that whoever holds
        it (a view's Pause) still reaches it."""
        with self._lock:
            self.cancelled = self.preempted = self.finished = False
            self.cancel_requested_at, self._iterator = None, None

    def is_set(self) -> bool:
        return self.cancelled

    def set_iterator(self, it) -> None:
        """The engine stream the job runs: cancel() cancels it too."""
        with self._lock:
            self._iterator = it
            cancelled = self.cancelled
        if cancelled:
            it.cancel()

    def check(self) -> None:
        if self.cancelled:
            raise Cancelled(f"{self.label or 'job'} cancelled")


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

    def _send(self, job: EngineJob, chunk, t_last: float) -> float:
        """One chunk to the GUI, with the time it took since the last; returns now."""
        self.progressed.emit(job, StreamChunk(chunk, time.perf_counter() - t_last, job.id))
        return time.perf_counter()

    # --- the operations (EngineClient's methods of the same names) ---------------------------------

    def load_model(self, path: str, threads: int, device: str, watermark: bool = True, decoder: str = "") -> dict:
        """`decoder`: for a Multilingual model, another model file whose S3Gen and HiFT decode
        its speech (Engine's decoder); ignored for other models. One that cannot be used
        (moved, damaged, not a decoder of these tokens) leaves the model's own, with a note."""
        import functools

        from app.core.model_manager import describe_model
        from app.core.speaker_identity import equip
        from engine_native import DeviceError, Engine, ModelError
        from engine_native.language import detect_language

        self.engine = None  # free the old model first: two models may not fit in memory
        self._voices.clear()
        notes = []
        if decoder and getattr(describe_model(path), "variant", "") != "mtl":
            decoder = ""  # not a Multilingual model (or unreadable: its own load says why)

        def load(device: str):
            nonlocal decoder
            try:
                return Engine(path, threads=threads or None, device=device, watermark=watermark, decoder=decoder or None)
            except ModelError as e:
                if not decoder or decoder not in str(e):
                    raise
                notes.append(f"{e}; decoding with the model's own S3Gen")
                decoder = ""
                return Engine(path, threads=threads or None, device=device, watermark=watermark)

        try:
            engine = load(device or "auto")
        except DeviceError as e:  # a device remembered from another machine (or unplugged)
            engine = load("auto")
            notes.append(f"{e}; using {engine.device} instead")
        note = "; ".join(notes)
        self.engine = equip(engine)
        try:  # read here, off the GUI thread: the tokenizer takes seconds to parse
            tags = engine.expression_tags
        except Exception:  # noqa: BLE001 - an unreadable tag list only leaves the menu with pauses
            tags = []
        info = dict(engine.info)
        info["watermark"] = engine.watermark
        info["device_note"] = note or info.get("device_note", "")
        return {"info": info, "defaults": dict(engine.defaults),
                "sample_rate": int(engine.sample_rate), "builtin": engine.builtin_voice.name,
                "tags": tags, "languages": dict(engine.languages), "presets": engine.presets,
                # the guess without the engine: a bound method would keep the old model
                # alive on the GUI thread, which would then pay for freeing it
                "detect": functools.partial(detect_language, codes=dict(engine.languages))
                if engine.languages else None}

    def stream(self, job: EngineJob, text: str, voice, params: dict) -> dict:
        """Run engine.stream, sending each chunk to the GUI; returns a summary."""
        engine = self.require_engine()
        it = engine.stream(text, self.voice(voice), **params)
        job.set_iterator(it)
        n, seed, audio = 0, None, 0
        t0 = t_last = time.perf_counter()
        try:
            for chunk in it:
                if job.cancelled:
                    job.chunks_after_cancel += 1
                    continue  # the iterator ends within one chunk; nothing more goes out
                n += 1
                audio += len(chunk.samples)
                seed = chunk.timings.get("seed", seed) if isinstance(chunk.timings, dict) else seed
                t_last = self._send(job, chunk, t_last)
        finally:
            close = getattr(it, "close", None)
            if close:
                close()
        job.check()
        return {"chunks": n, "seed": seed, "audio_s": audio / engine.sample_rate,
                "compute_s": time.perf_counter() - t0}

    def set_watermark(self, on: bool) -> bool:
        """engine.watermark: whether later syntheses are marked (turning it on loads the model)."""
        self.require_engine().watermark = on
        return on

    def revoice(self, job: EngineJob, samples, rate: int, voice, params: dict) -> dict:
        """Run engine.revoice_stream on a decoded recording, sending each chunk to the GUI;
        returns a summary as `stream` does."""
        engine = self.require_engine()
        it = engine.revoice_stream(samples, rate, self.voice(voice), **params)
        job.set_iterator(it)
        n, seed, audio = 0, params.get("seed"), 0
        t0 = t_last = time.perf_counter()
        try:
            for chunk in it:
                if job.cancelled:
                    job.chunks_after_cancel += 1
                    continue
                n += 1
                audio += len(chunk.samples)
                seed = chunk.timings.get("seed", seed) if n == 1 else seed  # the first segment's: the take's
                t_last = self._send(job, chunk, t_last)
        finally:
            it.close()
        job.check()
        return {"chunks": n, "seed": seed, "audio_s": audio / engine.sample_rate,
                "compute_s": time.perf_counter() - t0}

    def prepare_stream(self, job: EngineJob, voice, params: dict) -> None:
        """engine.prepare_stream: the voice's cached stream prefix for these settings."""
        it = self.require_engine().prepare_stream(self.voice(voice), **params)
        job.set_iterator(it)
        for _ in it:
            pass
        job.check()

    def render_script(self, job: EngineJob, text: str, voices: dict, params: dict, *, lexicon=None,
                      best_of: int = 1, speakers=None) -> dict:
        """A script as chunks shaped like the engine's (app.core.script_stream)."""
        from app.core.script_stream import script_chunks

        engine = self.require_engine()
        vmap = {name: self.voice(v) for name, v in voices.items()}
        params = dict(params)
        seed = params.pop("seed", None)
        if seed is None or seed < 0:
            seed = random_seed()
        t0 = t_last = time.perf_counter()
        audio, sent, scores = 0, 0, []
        for chunk in script_chunks(engine, text, vmap, seed=seed, options=params, lexicon=lexicon,
                                   best_of=best_of, speakers=speakers, cancel=job):
            audio += chunk.samples.size
            sent += 1
            if chunk.score is not None:
                scores.append(chunk.score)
            t_last = self._send(job, chunk, t_last)
        job.check()
        return {"chunks": sent, "seed": seed, "audio_s": audio / engine.sample_rate,
                "compute_s": time.perf_counter() - t0,
                "likeness": (sum(scores) / len(scores)) if scores else None}

    def export_script(self, job: EngineJob, text: str, path: str, *, voices: dict, params: dict, lexicon=None,
                      best_of: int = 1, speakers=None, model_path: str = "") -> dict:
        """The resumable long render into a file (app.core.long_render)."""
        from app.core.long_render import render_script_file

        engine = self.require_engine()
        vmap = {name: self.voice(v) for name, v in voices.items()}
        params = dict(params)
        return render_script_file(engine, text, path, voices=vmap, seed=params.pop("seed", None), options=params,
                                  lexicon=lexicon, best_of=best_of, speakers=speakers, model_path=model_path,
                                  cancel=job, progress=lambda *p: self.progressed.emit(job, p))

    def render_book(self, job: EngineJob, request, book):
        """A book's included chapters into the job's parts folder (app.core.book.render), with the
        narrator, the cast and the lexicons (the app's global one, then the book's); each
        BookEvent goes to the GUI. Stopped, it raises Cancelled: finished work stays there."""
        from app.core.book.render import Cancelled as RenderStopped
        from app.core.book.render import render_book
        from app.core.paths import global_lexicon_path
        from engine_native.lexicon import load_lexicons

        engine = self.require_engine()
        voices = {None: self.voice(request.voice), **{n: self.voice(v) for n, v in request.cast.items()}}
        lexicon = load_lexicons(*[p for p in (global_lexicon_path(), request.lexicon) if p and os.path.isfile(p)])
        settings = request.settings(book, voices, lexicon if len(lexicon) else None, engine.languages,
                                    model_name=os.path.basename(request.model_path) or "this model")
        try:
            return render_book(engine, book, settings, request.parts_folder, model_path=request.model_path or None,
                               cancel=job, on_event=lambda e: self.progressed.emit(job, e))
        except RenderStopped:
            raise Cancelled(f"{job.label or 'job'} stopped") from None

    def likeness(self, samples, voice) -> float:
        from engine_native.likeness import likeness

        return likeness(self.require_engine(), samples, self.voice(voice))

    def clone_clip(self, samples, rate: int):
        from app.core.voice_lab_session import clone

        return clone(self.require_engine(), samples, rate)

    def find_speakers(self, mono, rate: int, regions):
        from app.core.voice_lab_session import find_speakers

        return find_speakers(mono, rate, regions, self.require_engine())

    def test_take_likeness(self, job: EngineJob, text: str, voice, options: dict | None,
                           recording=None) -> tuple[float, str] | None:
        from app.core.voice_lab_session import test_take_likeness

        score = test_take_likeness(self.require_engine(), text, self.voice(voice), options, cancel=job,
                                   recording=recording)
        job.check()
        return score
