"""Continuous batching of T3: every active generation's next token in one step.

A GPU serving several generations one at a time reads T3's weights once per token per
generation; `T3Batcher` steps all of them together (`T3.next_together`: one graph whose
products take every generation's column, each generation's attention over its own KV cache,
each one's sampler on the host), so a step costs about one weight read however many join.
A session joins once its prompt has run and is stepped from the next round on; it leaves
when it ends (stop token, max_tokens), is cancelled or closed. The batcher runs each
session ahead of its consumer (as a TokenWorker does), so the stream's S3Gen / HiFT passes,
which stay per stream, find its tokens ready. Each round takes T3's turn (`T3Sessions.lock`,
the model's lock on a GPU) for one token step, so S3Gen passes interleave with the rounds.
"""

from __future__ import annotations

import os
import threading

# Tokens per round (per T3 turn): a joining session waits at most this many steps.
BATCH_ROUND_TOKENS = 1


def batching_pays(device: str) -> bool:
    """Whether concurrent generations on `device` should be batched: on a GPU, yes (one
    step of many columns costs about what one column does); on the CPU only when
    CBS_T3_BATCH=1 (two cores gain little from wider products: benchmarks/bench_streams.py
    measures it)."""
    flag = os.environ.get("CBS_T3_BATCH")
    if flag in ("0", "1"):
        return flag == "1"
    return device != "cpu"


class BatchMember:
    """One session's place in the batch: the tokens sampled for it so far."""

    def __init__(self, stream, batcher: T3Batcher):
        self.stream, self.batcher, self.cv = stream, batcher, batcher.cv
        self.tokens: list[int] = []
        self.ended = False          # the stream ended (or left): no more tokens come
        self.error: BaseException | None = None

    def wait(self, n: int, cancel) -> list[int]:
        """The first n tokens once sampled (fewer when the stream ends first or `cancel` is set)."""
        with self.cv:
            while len(self.tokens) < n and not self.ended and not cancel.is_set():
                self.cv.wait(0.05)
            if self.error is not None:
                raise self.error
            return self.tokens[:n]


class T3Batcher:
    """Steps the sessions of one T3 (`sessions`: its T3Sessions, whose model and turn lock it
    uses) together on a thread of its own."""

    def __init__(self, sessions):
        self._sessions = sessions
        self._members: list[BatchMember] = []
        self.cv = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self.rounds = 0             # batched steps taken (tests, bench)
        self.largest = 0            # the most sessions one round stepped

    @property
    def active(self) -> int:
        with self.cv:
            return len(self._members)

    def join(self, stream) -> BatchMember:
        """Adds a stream whose prompt has run; it is stepped from the next round on."""
        member = BatchMember(stream, self)
        with self.cv:
            if stream.done:
                member.ended = True
                return member
            self._members.append(member)
            if self._thread is None or not self._thread.is_alive():
                self._stopping = False
                self._thread = threading.Thread(target=self._run, name="cbs-t3-batch", daemon=True)
                self._thread.start()
            self.cv.notify_all()
        return member

    def leave(self, member: BatchMember) -> None:
        """Takes a member out (its stream closed or cancelled by its owner)."""
        with self.cv:
            if member in self._members:
                self._members.remove(member)
            member.ended = True
            self.cv.notify_all()

    def stop(self) -> None:
        """Ends the thread once the current round is over (members stay where they are)."""
        with self.cv:
            self._stopping = True
            self.cv.notify_all()
        if self._thread is not None:
            self._thread.join()

    def _run(self) -> None:
        while True:
            with self.cv:
                while not self._members and not self._stopping:
                    self.cv.wait()
                if self._stopping:
                    return
                batch = list(self._members)
            try:
                with self._sessions.lock:
                    got = self._sessions.model.next_together([m.stream for m in batch], BATCH_ROUND_TOKENS)
                error = None
            except BaseException as e:  # noqa: BLE001 - handed to each member's wait()
                got, error = [[] for _ in batch], e
            with self.cv:
                self.rounds += 1
                self.largest = max(self.largest, len(batch))
                for m, tokens in zip(batch, got):
                    m.tokens += tokens
                    if error is not None:
                        m.error = error
                    if error is not None or m.stream.done:
                        m.ended = True
                        if m in self._members:
                            self._members.remove(m)
                self.cv.notify_all()
