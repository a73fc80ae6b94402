"""The work a cluster node does: one loaded Engine per Ray actor, rendering one piece per call.

A `PieceWorker` loads the model once (from the path on its node, or, with --ship-model, from the
bytes the driver shipped through Ray's object store, kept as a file on the node), keeps the render's
voices and lexicon (shipped once per render, `use`) and renders a piece with
`engine_native.script.render` exactly as a local render does it: the piece carries its index
in the whole script, so its seed is `seed + index` wherever it runs, and the samples equal
the local render's.

Methods run one at a time (Ray's default group) except `cancel` and `ping`, which run in a
"control" group of their own, so a driver can stop the piece being rendered (between two
chunks, the engine's cancellation point) while it runs.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from pathlib import Path

import numpy as np

CONTROL = "control"        # the concurrency group of cancel/ping
SETUPS_KEPT = 4            # renders' voices a worker keeps (a pool is used by one render at a time)


def shipped_model_path(name: str, size: int) -> Path:
    """Where a worker keeps a model the driver shipped (one copy per node and model)."""
    from app.core.paths import app_data_dir

    return Path(app_data_dir()) / "cluster-models" / f"{size}-{name}"


def unpack_model(name: str, blob) -> str:
    """The shipped model bytes as a file on this node (written once, atomically)."""
    from engine_native.files import atomic_write

    data = memoryview(blob)
    path = shipped_model_path(name, data.nbytes)
    if not path.is_file() or path.stat().st_size != data.nbytes:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))
    return str(path)


class PieceWorker:
    """One engine on one worker process (see the module)."""

    def __init__(self, model_path: str, threads: int | None, device: str, shipped=None, watermark: bool = True):
        from app.core.long_render import model_identity
        from app.core.speaker_identity import equip
        from engine_native import Engine

        t0 = time.perf_counter()
        name = os.path.basename(model_path)
        local = model_path if shipped is None else unpack_model(name, shipped)
        # likeness as the app scores it
        self.engine = equip(Engine(local, threads=threads, device=device, watermark=watermark))
        # the key the parts folder uses: the file's name and size, however it reached this node
        self.model_id = model_identity(local).replace(os.path.basename(local), name)
        self.load_s = time.perf_counter() - t0
        self._setups: dict[str, tuple[dict, object]] = {}
        self._jobs: dict[int, threading.Event] = {}
        self._cancelled: set[int] = set()
        self._lock = threading.Lock()

    def facts(self) -> dict:
        e = self.engine
        return {"sample_rate": e.sample_rate, "presets": e.presets, "expression_tags": list(e.expression_tags),
                "variant": e.variant, "info": dict(e.info), "device": str(e.device), "device_note": e.device_note,
                "languages": dict(e.languages or {}), "model_id": self.model_id, "load_s": self.load_s,
                "path": e.path, "watermark": e.watermark, "builtin_voice": e.builtin_voice, "where": self.ping()}

    def ping(self) -> dict:
        return {"pid": os.getpid(), "host": socket.gethostname(), "time": time.time()}

    def check_voice(self, voice) -> None:
        self.engine.check_voice(voice)

    def voice_from_audio(self, samples: np.ndarray, sample_rate: int, name, meta: dict):
        return self.engine.voice_from_audio(samples, sample_rate, name=name, **meta)

    def use(self, setup_id: str, voices: dict, lexicon) -> None:
        """Keeps a render's voices (speaker -> Voice) and lexicon for its pieces."""
        self._setups[setup_id] = (voices, lexicon)
        self._cancelled.clear()      # cancellations of an earlier render's pieces that never came
        while len(self._setups) > SETUPS_KEPT:
            self._setups.pop(next(iter(self._setups)))

    def render(self, job: int, setup_id: str, piece, seed: int, options: dict, stream_options: dict, best_of: int,
               score: bool) -> dict:
        """One piece as `engine_native.script.render` makes it locally: its samples (None when
        it holds nothing to say, or was cancelled), the seed of the take kept, likeness scores;
        `refused` (error type, message) when the engine refused the piece's text or options."""
        from engine_native.errors import EmptyTextError, ParameterError
        from engine_native.script import render

        started = time.time()
        voices, lexicon = self._setups[setup_id]
        with self._lock:
            cancel = self._jobs[job] = threading.Event()
            if job in self._cancelled:
                cancel.set()
        got, last = [], None
        try:
            for part in render(self.engine, [piece], voices=voices, seed=seed, lexicon=lexicon, best_of=best_of,
                               score=score, options=options, stream_options=stream_options, cancel=cancel):
                got.append(part.samples)
                last = part
        except (ParameterError, EmptyTextError) as e:  # this piece's own fault: the driver decides
            return {"samples": None, "refused": (type(e).__name__, str(e)), "started": started,
                    "ended": time.time(), "pid": os.getpid(), "cancelled": False}
        finally:
            with self._lock:
                self._jobs.pop(job, None)
                self._cancelled.discard(job)
        done = last is not None and last.final and not cancel.is_set()
        return {"samples": np.concatenate(got) if done else None, "refused": None, "seed": last.seed if last else None,
                "spoken": last.spoken_text if last else "", "score": last.score if last else None,
                "candidates": last.candidates if last else [], "started": started, "ended": time.time(),
                "pid": os.getpid(), "cancelled": cancel.is_set()}

    def cancel(self, jobs: list[int]) -> None:
        """Stops these pieces: a running one at its next chunk, a queued one before it starts."""
        with self._lock:
            for job in jobs:
                event = self._jobs.get(job)
                if event is not None:
                    event.set()
                else:
                    self._cancelled.add(job)
