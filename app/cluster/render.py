"""A parsed script rendered through a WorkerPool: the local render's Parts, in order.

`render_on_cluster` takes what `engine_native.script.render` takes and yields Parts the same
way, so `say` consumes either alike (progress, ETA, chapters, the output file). What stays
the same, so that the finished file equals a local render sample for sample:

- a piece's text for the engine (`spoken_text`: tags, lexicon), its voice (`voice_for`) and
  its seed `seed + piece.index` are computed as locally; the worker runs the same
  `render` on the piece alone, with the piece's index in the whole script;
- the parts folder: the driver serves finished pieces from it and writes each new piece
  there as soon as it arrives (in any order; a crash keeps every finished piece) under the
  same key as a local render (the model's identity comes from the workers), so a render
  interrupted on the cluster resumes locally and the other way round;
- the order: Parts are yielded in script order, whatever order the workers finish in.

At most `pool.capacity` pieces are out at a time, and at most LOOKAHEAD x capacity items are
read ahead of the one being yielded, so a book never sits in memory. A cancel (the event, a
closed generator, Ctrl-C in the driver) stops the pieces out on the workers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

from app.cluster.pool import Ticket, WorkerPool
from engine_native import errors
from engine_native.options import derived_seed
from engine_native.script import Part, Pause, pause_samples, spoken_text, voice_for

LOOKAHEAD = 4
WAIT_S = 0.5     # a wait for results, between checks of the cancel event


def render_on_cluster(pool: WorkerPool, items, *, voices: dict | None = None, seed: int = 0, lexicon=None,
                      best_of: int = 1, score: bool = False, options: dict | None = None,
                      stream_options: dict | None = None, cache=None, cancel=None, refused=None) -> Iterator[Part]:
    """See the module. `refused(piece, error)`, when given, is told of a piece the engine
    refused (ParameterError, EmptyTextError) and the render goes on without it; without it
    the error is raised, as a local render raises it."""
    options = dict(options or {})
    stream_options = dict(stream_options or {})
    rate = pool.engine.sample_rate
    tags = pool.engine.expression_tags
    setup = pool.use(dict(voices or {}), lexicon)
    source = iter(items)
    ahead: deque = deque()          # Parts ready to yield, or Tickets out on the cluster, in order
    exhausted = False

    def read_ahead() -> None:
        nonlocal exhausted
        # (one piece at least even when the pool is full: a render nested in another, such as a
        # book's retake of one piece, waits behind the outer render's pieces, never for ever)
        while not exhausted and (pool.outstanding < pool.capacity or not ahead) \
                and len(ahead) < LOOKAHEAD * pool.capacity:
            item = next(source, None)
            if item is None:
                exhausted = True
                return
            if isinstance(item, Pause):
                ahead.append(Part(pause_samples(item.seconds, rate), rate, item, True))
                continue
            spoken = spoken_text(item, tags, lexicon)
            if not spoken.strip():
                continue
            s_seed = derived_seed(seed, item.index)
            key = cache.key(spoken, voice_for(voices, item.speaker), s_seed, options, best_of) \
                if cache is not None else None
            hit = cache.get(key) if key is not None else None
            if hit is not None:
                ahead.append(Part(hit, rate, item, True, s_seed, spoken, cached=True))
                continue
            ticket = Ticket(item.index, item, seed, setup, options, stream_options, best_of, score, key=key,
                            spoken=spoken, cache=cache)
            pool.submit(ticket)
            ahead.append(ticket)

    try:
        while True:
            read_ahead()
            if not ahead:
                return
            head = ahead[0]
            if isinstance(head, Part):
                ahead.popleft()
                yield head
                continue
            if head.result is None:
                if cancel is not None and cancel.is_set():
                    return
                for t in pool.wait(WAIT_S):      # any render's: each finished piece kept at once
                    if t.cache is not None and t.key is not None and t.result["samples"] is not None:
                        t.cache.put(t.key, t.result["samples"])
                continue
            ahead.popleft()
            r = head.result
            if r["refused"] is not None:
                error = getattr(errors, r["refused"][0])(r["refused"][1])
                if refused is None:
                    raise error
                refused(head.piece, error)
                continue
            if r["samples"] is None:      # cancelled on its worker
                return
            yield Part(r["samples"], rate, head.piece, True, r["seed"], head.spoken, r["score"], r["candidates"])
    finally:  # this render's pieces still out (the pool may be serving another render too)
        pool.cancel([t for t in ahead if isinstance(t, Ticket) and t.result is None])
