"""A supervised pool of `PieceWorker` actors, and the engine's facts for a driver without a model.

    pool = WorkerPool.open(ray, "model.gguf", workers=8, threads=1)   # waits for the first worker
    setup = pool.use(voices, lexicon)                                 # shipped once per worker
    pool.submit(Ticket(...)); finished = pool.wait(1.0)               # bounded by pool.capacity

Each worker takes up to `per_worker` pieces at a time (one rendering, the next waiting in its
queue, so it never idles between two pieces); the pool never has more than `capacity` pieces
out. The pool, not Ray, supervises its actors (they start with max_restarts=0): a worker
whose process or node is lost fails its pieces at once (Ray's RayActorError); the pool
sends those pieces to the workers left, starts a replacement actor (placed by Ray wherever
resources are free, on another node when the node is gone) and counts the pieces it sent
again (`stats.retried`). A piece lost MAX_PIECE_LOSSES times (a piece that kills every
worker) ends the render with ClusterError rather than loop.
"""

from __future__ import annotations

import itertools
import os
import time
from collections import deque
from dataclasses import dataclass, field

from app.cluster import ClusterError
from app.cluster.workers import CONTROL, SETUPS_KEPT, PieceWorker

PER_WORKER = 2                 # pieces out per worker: one rendering, one queued behind it
MAX_PIECE_LOSSES = 3           # a piece whose worker died this often ends the render
START_TIMEOUT_S = 600.0        # no worker ready for this long (nothing fits the cluster): give up
NOTE_EVERY_S = 30.0


@dataclass
class Ticket:
    """One piece sent to the cluster; `result` once a worker rendered it."""
    position: int
    piece: object
    seed: int
    setup: str
    options: dict
    stream_options: dict
    best_of: int = 1
    score: bool = False
    job: int = 0
    submitted: float = 0.0
    losses: int = 0
    key: str | None = None       # the piece's key in the parts folder
    cache: object = None         # the parts folder (PartsCache) it goes to
    spoken: str = ""             # its text for the engine
    result: dict | None = None


@dataclass
class PoolStats:
    retried: int = 0                 # pieces sent again after their worker was lost
    replaced: int = 0                # workers started to replace lost ones
    pieces: int = 0
    dispatch_s: list = field(default_factory=list)   # an idle worker's wait for its next piece
    return_s: list = field(default_factory=list)     # a finished piece's way back to the driver
    compute_s: list = field(default_factory=list)    # a piece's time on its worker


class _Slot:
    def __init__(self, actor, ready_ref, number: int):
        self.actor, self.ready_ref, self.number = actor, ready_ref, number
        self.ready = False
        self.pid = None
        self.in_flight: dict = {}    # ObjectRef -> Ticket
        self.last_ended = 0.0
        self.started = time.monotonic()


def _first_line(e: BaseException) -> str:
    text = str(getattr(e, "cause", None) or e).strip()
    return text.splitlines()[-1] if text else type(e).__name__


class WorkerPool:
    def __init__(self, ray, model_path: str, *, workers: int, threads: int | None = 1, device: str = "cpu",
                 per_worker: int = PER_WORKER, ship_model: bool = False, watermark: bool = True, note=None):
        self.ray = ray
        self.model_path = model_path
        self.workers = max(1, int(workers))
        self.per_worker = max(1, int(per_worker))
        self.note = note or (lambda message: None)
        self.stats = PoolStats()
        gpu = str(device).startswith(("cuda", "vulkan"))
        self._remote = ray.remote(concurrency_groups={CONTROL: 1})(PieceWorker).options(
            num_cpus=0 if gpu else max(1, int(threads or 1)), num_gpus=1 if gpu else 0, max_restarts=0,
            max_task_retries=0, scheduling_strategy="SPREAD")
        self._args = (model_path, threads, device,
                      ray.put(_read_model(model_path)) if ship_model else None,   # resolved to bytes on each node
                      watermark)
        self._slots: list[_Slot] = []
        self._backlog: deque[Ticket] = deque()
        self._numbers = itertools.count(1)
        self._jobs = itertools.count(1)
        self._setups: dict[str, tuple] = {}
        self._start_failures = 0
        for _ in range(self.workers):
            self._start_slot()
        self.facts = self._first_facts()
        self.engine = ClusterEngine(self, self.facts)

    @classmethod
    def open(cls, ray, model_path: str, **kw) -> "WorkerPool":
        return cls(ray, model_path, **kw)

    # ---------------------------------------------------------------- actors
    def _start_slot(self) -> None:
        actor = self._remote.remote(*self._args)
        self._slots.append(_Slot(actor, actor.facts.remote(), next(self._numbers)))

    def _first_facts(self) -> dict:
        t0 = last_note = time.monotonic()
        while True:
            for slot in list(self._slots):
                if slot.ready:
                    return self.ray.get(slot.ready_ref)
            self._poll_starts(timeout=1.0)
            waited = time.monotonic() - t0
            if waited > START_TIMEOUT_S:
                raise ClusterError(f"no worker started in {START_TIMEOUT_S:.0f} s: the cluster has no room for one "
                                   f"({self._room()})")
            if time.monotonic() - last_note > NOTE_EVERY_S:
                last_note = time.monotonic()
                self.note(f"cluster   waiting for a worker ({self._room()})")

    def _room(self) -> str:
        free = self.ray.available_resources()
        return f"free: {free.get('CPU', 0):g} CPUs, {free.get('GPU', 0):g} GPUs"

    def _poll_starts(self, timeout: float) -> None:
        starting = {s.ready_ref: s for s in self._slots if not s.ready}
        if not starting:
            return
        done, _ = self.ray.wait(list(starting), num_returns=1, timeout=timeout)
        for ref in done:
            self._started(starting[ref])

    def _started(self, slot: _Slot) -> None:
        try:
            facts = self.ray.get(slot.ready_ref)
        except Exception as e:  # the model missing on that node, out of memory, the node gone...
            self._start_failures += 1
            self._drop(slot)
            if self._start_failures >= self.workers + 2:
                raise ClusterError(f"workers cannot start: {_first_line(e)}") from None
            self.note(f"cluster   worker {slot.number} did not start ({_first_line(e)}); starting another")
            self._start_slot()
            return
        slot.ready, slot.pid = True, facts["where"]["pid"]
        self._start_failures = 0
        self.note(f"worker    {slot.number} ready on {facts['where']['host']} (pid {slot.pid}, model loaded in "
                  f"{facts['load_s']:.1f} s)")
        for setup_id, (voices_ref, lexicon_ref, _) in self._setups.items():
            slot.actor.use.remote(setup_id, voices_ref, lexicon_ref)

    def _drop(self, slot: _Slot) -> None:
        try:
            self.ray.kill(slot.actor, no_restart=True)
        except Exception:
            pass
        if slot in self._slots:
            self._slots.remove(slot)

    def _lost(self, slot: _Slot, error: BaseException) -> None:
        """A worker died: its pieces go to the front of the backlog, a replacement starts."""
        lost = sorted(slot.in_flight.values(), key=lambda t: t.position)
        self.note(f"cluster   worker {slot.number} (pid {slot.pid}) lost ({_first_line(error)}); sending its "
                  f"{len(lost)} pieces again")
        slot.in_flight.clear()
        self._drop(slot)
        for ticket in reversed(lost):
            ticket.losses += 1
            if ticket.losses >= MAX_PIECE_LOSSES:
                raise ClusterError(f"the piece {ticket.piece.text[:60]!r} was lost with its worker "
                                   f"{ticket.losses} times")
            self._backlog.appendleft(ticket)
        self.stats.retried += len(lost)
        self.stats.replaced += 1
        self._start_slot()

    @property
    def ready_workers(self) -> int:
        return sum(s.ready for s in self._slots)

    def pids(self) -> list[int]:
        return [s.pid for s in self._slots if s.ready]

    # ---------------------------------------------------------------- work
    @property
    def capacity(self) -> int:
        return self.per_worker * self.workers

    @property
    def outstanding(self) -> int:
        return len(self._backlog) + sum(len(s.in_flight) for s in self._slots)

    def use(self, voices: dict, lexicon) -> str:
        """Ships a render's voices and lexicon to every worker once; returns the setup's id."""
        same = (tuple((k, id(v)) for k, v in voices.items()), id(lexicon))
        for setup_id, (_, _, known) in self._setups.items():
            if known == same:       # a render nested in another with the same voices (a retake)
                return setup_id
        setup_id = f"{os.getpid()}-{next(self._jobs)}"
        refs = (self.ray.put(voices), self.ray.put(lexicon), same)
        self._setups[setup_id] = refs         # a replacement worker gets the renders still going
        while len(self._setups) > SETUPS_KEPT:
            self._setups.pop(next(iter(self._setups)))
        for slot in self._slots:
            if slot.ready:
                slot.actor.use.remote(setup_id, *refs[:2])
        return setup_id

    def submit(self, ticket: Ticket) -> None:
        ticket.job = next(self._jobs)
        self._backlog.append(ticket)
        self._dispatch()

    def _dispatch(self) -> None:
        while self._backlog:
            free = [s for s in self._slots if s.ready and len(s.in_flight) < self.per_worker]
            if not free:
                return
            slot = min(free, key=lambda s: (len(s.in_flight), s.number))
            t = self._backlog.popleft()
            t.submitted = time.time()
            ref = slot.actor.render.remote(t.job, t.setup, t.piece, t.seed, t.options, t.stream_options, t.best_of,
                                           t.score)
            slot.in_flight[ref] = t

    def wait(self, timeout: float) -> list[Ticket]:
        """Tickets finished within `timeout` s (their `result` set); lost workers handled."""
        waiting = {}
        for slot in self._slots:
            if not slot.ready:
                waiting[slot.ready_ref] = (slot, None)
            for ref, t in slot.in_flight.items():
                waiting[ref] = (slot, t)
        if not waiting:
            if self._backlog and not self._slots:
                self._start_slot()
            return []
        refs = list(waiting)
        done, _ = self.ray.wait(refs, num_returns=1, timeout=timeout)   # the first as soon as it comes
        if done:                                                         # and all the others done by then
            done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
        finished = []
        for ref in done:
            slot, ticket = waiting[ref]
            if slot not in self._slots:
                continue                      # lost with an earlier ref of this round
            if ticket is None:
                self._started(slot)
                continue
            try:
                ticket.result = self.ray.get(ref)
            except self.ray.exceptions.TaskCancelledError:
                slot.in_flight.pop(ref, None)
                continue
            except self.ray.exceptions.RayTaskError as e:  # the engine refused the piece: as locally
                slot.in_flight.pop(ref, None)
                cause = getattr(e, "cause", None)
                raise (cause if isinstance(cause, Exception) else e) from None
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.WorkerCrashedError,
                    self.ray.exceptions.ObjectLostError) as e:
                self._lost(slot, e)
                continue
            del slot.in_flight[ref]
            self._account(slot, ticket)
            finished.append(ticket)
        self._dispatch()
        return finished

    def _account(self, slot: _Slot, t: Ticket) -> None:
        r = t.result
        self.stats.pieces += 1
        self.stats.dispatch_s.append(max(0.0, r["started"] - max(t.submitted, slot.last_ended)))
        self.stats.return_s.append(max(0.0, time.time() - r["ended"]))
        self.stats.compute_s.append(r["ended"] - r["started"])
        slot.last_ended = r["ended"]

    def cancel(self, tickets: list[Ticket] | None = None) -> None:
        """Stops these pieces (default: every piece out): the running ones at their next chunk,
        the queued ones unrun."""
        gone = None if tickets is None else {id(t) for t in tickets}
        self._backlog = deque(t for t in self._backlog if gone is not None and id(t) not in gone)
        for slot in self._slots:
            refs = [ref for ref, t in slot.in_flight.items() if gone is None or id(t) in gone]
            if not refs:
                continue
            try:
                slot.actor.cancel.options(concurrency_group=CONTROL).remote([slot.in_flight[r].job for r in refs])
                for ref in refs:
                    self.ray.cancel(ref)
            except Exception:
                pass
            for ref in refs:
                del slot.in_flight[ref]

    def call(self, method: str, *args, **kw):
        """A method of one ready worker (check a voice, clone one), sent to another if it dies."""
        for _ in range(MAX_PIECE_LOSSES):
            while not any(s.ready for s in self._slots):
                self._poll_starts(timeout=1.0)
            slot = min((s for s in self._slots if s.ready), key=lambda s: len(s.in_flight))
            try:
                return self.ray.get(getattr(slot.actor, method).remote(*args, **kw))
            except self.ray.exceptions.RayTaskError as e:
                cause = getattr(e, "cause", None)
                raise (cause if isinstance(cause, Exception) else e) from None
            except (self.ray.exceptions.RayActorError, self.ray.exceptions.WorkerCrashedError) as e:
                self._lost(slot, e)
        raise ClusterError(f"no worker could run {method}")

    def close(self) -> None:
        self.cancel()
        for slot in list(self._slots):
            self._drop(slot)


def _read_model(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ClusterError(f"cannot ship the model {path}: {e.strerror}") from None


class ClusterEngine:
    """What a driver needs of an Engine, from the cluster's workers: the facts (sample rate,
    presets, tags, languages, the built-in voice, whether the workers watermark) and the calls
    on voices; `render_script` renders parsed script
    items through the pool (app.cluster.render)."""

    def __init__(self, pool: WorkerPool, facts: dict):
        self.pool = pool
        self.sample_rate = facts["sample_rate"]
        self.presets = facts["presets"]
        self.expression_tags = facts["expression_tags"]
        self.variant = facts["variant"]
        self.info = facts["info"]
        self.device = facts["device"]
        self.device_note = facts["device_note"]
        self.languages = facts["languages"]
        self.model_id = facts["model_id"]
        self.path = facts["path"]
        self.watermark = facts["watermark"]          # the workers' engines mark their speech (Perth)
        self.builtin_voice = facts["builtin_voice"]

    def check_voice(self, voice) -> None:
        self.pool.call("check_voice", voice)

    def voice_from_audio(self, samples, sample_rate: int, *, name: str | None = None, **meta):
        return self.pool.call("voice_from_audio", samples, sample_rate, name, meta)

    def render_script(self, items, **kw):
        from app.cluster.render import render_on_cluster

        return render_on_cluster(self.pool, items, **kw)
