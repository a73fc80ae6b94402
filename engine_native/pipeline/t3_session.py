"""T3 sessions: text ids + voice -> speech tokens, one generation at a time per KV cache.

Every generation has its own session (its own KV cache, taken from a small pool so the
voice's conditioning prefix is reused), so concurrent streams interleave token by token and
each caller gets its whole result. A session's prompt and steps are cancellable: the
generation's CancelToken reaches the prompt's graph and the sampling loop. `TokenWorker`
samples a stream's next tokens on a thread of its own, beside the stream's S3Gen passes,
where T3 has a backend of its own (the CPU) and the overlap is on.
"""

from __future__ import annotations

import os
import threading

from engine_native import _core
from engine_native.errors import Cancelled, ParameterError
from engine_native.pipeline.concurrency import FairLock
from engine_native.pipeline.t3_batch import T3Batcher

# Idle T3 sessions' KV caches kept for reuse (each holds a cache; one keeps the last voice's prefix).
IDLE_T3_CACHES = 1
# Tokens per T3 call of a TokenWorker: how often the stream sees new ones.
T3_WORKER_STEP = 5
# An "early stop": T3 ending with fewer speech tokens than this many per text token.
MIN_SPEECH_PER_TEXT_TOKEN = 2.0
# Multilingual text ids are graphemes (and ~6 Cangjie codes per Chinese glyph): about one
# speech token per id is normal there, so an early stop is under half of one.
MIN_SPEECH_PER_TEXT_TOKEN_MTL = 0.5
# The reference's T3 context holds up to 300 text tokens beside the voice prompt and the speech.
MAX_TEXT_TOKENS = 300


def overlap_enabled() -> bool:
    """A stream's T3 worker beside S3Gen (T3 on a CPU backend of its own, with a lock of its
    own): off by default, CBS_STREAM_OVERLAP=1 turns it on. On 2 cores with both threads
    busy it measured no faster and it takes CPU from the GUI thread (docs/CPU.md); off, T3
    and S3Gen take turns under one lock."""
    return os.environ.get("CBS_STREAM_OVERLAP") == "1"


class T3Sessions:
    """The model's T3 (`model`), its pool of KV caches and its lock."""

    def __init__(self, t3, config, model_lock: FairLock, profiler):
        self.model = t3
        self._config = config
        self._model_lock = model_lock
        self._profiler = profiler
        self.lock = model_lock              # T3's turn: the model's lock, or its own beside S3Gen
        self._idle_caches = []
        self._cache_lock = threading.Lock()
        self._workers_lock = threading.Lock()
        self._workers = 0
        self.workers_started = 0            # TokenWorkers ever started (a count for tests and bench)
        self.beside_s3gen = t3.own_backend and overlap_enabled()
        self.batcher: T3Batcher | None = None

    def batch_streams(self, on: bool) -> None:
        """Concurrent sessions opened from now on are stepped together (t3_batch.T3Batcher)
        instead of each by its caller. Set it while no generation runs."""
        if on and self.batcher is None:
            self.batcher = T3Batcher(self)
        elif not on and self.batcher is not None:
            self.batcher.stop()
            self.batcher = None

    @property
    def beside_s3gen(self) -> bool:
        """Whether a stream's next tokens are sampled beside its S3Gen passes (a TokenWorker
        on T3's own backend, under T3's own lock). Set it only while no generation runs."""
        return self.lock is not self._model_lock

    @beside_s3gen.setter
    def beside_s3gen(self, on: bool) -> None:
        if on and not self.model.own_backend:
            raise ParameterError("T3 shares the model's backend here: it cannot sample beside S3Gen")
        if on != self.beside_s3gen:
            self.lock = FairLock() if on else self._model_lock

    @property
    def workers_running(self) -> int:
        return self._workers

    def max_tokens_upper(self) -> int:
        """The largest max_tokens any request may ask: the context left beside the longest
        voice prompt and the text (Multilingual: the speech position table)."""
        c = self._config
        return c.max_speech if c.mtl else c.n_ctx - c.cond_prompt_len - 1 - MAX_TEXT_TOKENS

    def open(self, ids, voice, seed: int, p: dict, cancel, times=None) -> T3Session:
        """A session sampling the speech for text `ids` in `voice` with the options `p` (a KV
        cache of its own, a pooled one when free); its prompt computed. Raises Cancelled when
        `cancel` stops the prompt."""
        c = self._config
        # T3's context holds [speaker, voice prompt, text, start-of-speech, speech]; say which
        # part does not fit instead of letting the cache refuse it.
        fixed = 1 + voice.cond_prompt_speech_tokens.size + len(ids) + 1
        extra = {}
        if c.mtl:
            if len(ids) > c.max_text_ids:
                raise ParameterError(f"a sentence of {len(ids)} text tokens does not fit T3's {c.max_text_ids} "
                                     f"text positions; shorten the sentence")
            extra = {"cfg_weight": p["cfg_weight"], "exaggeration": p["exaggeration"]}
        elif fixed + p["max_tokens"] > c.n_ctx:
            room = c.n_ctx - fixed
            if room < 1:
                raise ParameterError(f"a sentence of {len(ids)} text tokens does not fit T3's context of "
                                     f"{c.n_ctx} positions with this voice; shorten the sentence")
            raise ParameterError(f"max_tokens must be in [1, {room}] for this sentence and voice (T3's context "
                                 f"holds {c.n_ctx} positions: {fixed} for the voice and text); got "
                                 f"{p['max_tokens']}")
        with self._cache_lock:
            cache = self._idle_caches.pop() if self._idle_caches else None
        # Armed: Stop reaches the prompt's graph too.
        with self.lock, cancel.armed(self.model), self._profiler.stage("t3_prompt", times):
            if cache is None:
                cache = _core.T3Cache(self.model)
            stream = self.model.stream(ids, p["max_tokens"], seed, temperature=p["temperature"], top_k=p["top_k"],
                                       top_p=p["top_p"], repetition_penalty=p["repetition_penalty"], min_p=p["min_p"],
                                       speaker_emb=voice.speaker_emb, prompt_tokens=voice.cond_prompt_speech_tokens,
                                       cache=cache, **extra)
        cancel.watch(stream)
        member = self.batcher.join(stream) if self.batcher is not None else None
        return T3Session(self, stream, cache, cancel, member)

    def open_cancellable(self, ids, voice, seed: int, p: dict, cancel, times=None) -> T3Session | None:
        """`open`, or None when Stop aborted its prompt computation."""
        try:
            return self.open(ids, voice, seed, p, cancel, times)
        except Cancelled:
            if cancel.is_set():
                return None
            raise

    def prepare(self, ids, voice, p: dict, cancel) -> None:
        """The voice's conditioning prefix (its speaker, prompt tokens and, Multilingual, the
        exaggeration's position) computed into the pool's KV cache, by opening a session on a
        sentence of a token or two: the next session with this voice and options then computes
        only its text (the first Play's gain: docs/CPU.md)."""
        session = self.open_cancellable(ids, voice, 0, p, cancel)
        if session is not None:
            session.close()

    def early_stop(self, tokens, n_text: int) -> bool:
        """Whether a finished sentence of these tokens ended too soon for its `n_text` text ids."""
        speech = sum(1 for t in tokens if t < self._config.speech_codes)
        ratio = MIN_SPEECH_PER_TEXT_TOKEN_MTL if self._config.mtl else MIN_SPEECH_PER_TEXT_TOKEN
        return speech < max(4, ratio * n_text)

    @property
    def idle_caches(self) -> int:
        """KV caches in the pool (a prepared voice's prefix is in one)."""
        with self._cache_lock:
            return len(self._idle_caches)

    def release_idle_caches(self) -> int:
        """Drops the pooled KV caches (the next session computes its voice's prefix again);
        returns how many were dropped."""
        with self._cache_lock:
            n = len(self._idle_caches)
            self._idle_caches.clear()
            return n

    def _recycle(self, cache) -> None:
        with self._cache_lock:
            if len(self._idle_caches) < IDLE_T3_CACHES:
                self._idle_caches.append(cache)

    def _worker_count(self, delta: int) -> None:
        with self._workers_lock:
            self._workers += delta
            if delta > 0:
                self.workers_started += delta


class T3Session:
    """One generation's token stream and KV cache; `close()` gives the cache back to the pool.
    With a batch member (`T3Sessions.batch_streams`) the batcher samples its tokens and
    next() hands them on."""

    def __init__(self, sessions: T3Sessions, stream, cache, cancel, member=None):
        self._sessions, self._stream, self._cache, self._cancel = sessions, stream, cache, cancel
        self._member = member
        self._taken = 0     # tokens next() has handed on (batched)
        self._closed = False

    @property
    def batched(self) -> bool:
        return self._member is not None

    @property
    def done(self) -> bool:
        if self._member is not None:
            return self._member.ended and self._taken >= len(self._member.tokens)
        return self._stream.done

    @property
    def cancelled(self) -> bool:
        return self._stream.cancelled

    def next(self, n: int, times=None) -> list[int]:
        """Up to `n` more tokens (fewer once the sentence ends or Stop comes)."""
        if self._member is not None:
            with self._sessions._profiler.stage("t3_steps", times):
                got = self._member.wait(self._taken + n, self._cancel)[self._taken:]
            self._taken += len(got)
        else:
            with self._sessions.lock, self._sessions._profiler.stage("t3_steps", times):
                got = self._stream.next(n)
        if times is not None:
            times.t3_tokens += len(got)
        return got

    def cancel(self) -> None:
        self._stream.cancel()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._cancel.watch(None)
        if self._member is not None:
            self._member.batcher.leave(self._member)
        self._stream.close()
        self._sessions._recycle(self._cache)


class TokenWorker:
    """Samples the rest of a stream's sentence on a thread of its own, beside the stream's
    S3Gen passes (T3 on its own backend)."""

    def __init__(self, sessions: T3Sessions, session: T3Session, tokens: list[int]):
        self._sessions, self._session = sessions, session
        self._tokens = list(tokens)
        self._done = False
        self._error = None
        self._cv = threading.Condition()
        sessions._worker_count(+1)
        self._thread = threading.Thread(target=self._run, name="cbs-t3-worker", daemon=True)
        self._thread.start()

    def _run(self):
        try:
            while not (self._session.done or self._session.cancelled):
                got = self._session.next(T3_WORKER_STEP)
                with self._cv:
                    self._tokens += got
                    self._cv.notify_all()
        except BaseException as e:  # noqa: BLE001 - raised in the stream's thread by wait()
            self._error = e
        finally:
            self._sessions._worker_count(-1)
            with self._cv:
                self._done = True
                self._cv.notify_all()

    def wait(self, n: int, cancel) -> tuple[list[int], bool]:
        """The sentence's first n tokens once sampled (fewer when it ends first) and whether
        they are all of it; returns early when the stream is cancelled."""
        with self._cv:
            while len(self._tokens) < n and not self._done and not cancel.is_set():
                self._cv.wait(0.05)
            if self._error is not None:
                raise self._error
            return self._tokens[:n], self._done and n >= len(self._tokens)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._session.cancel()
        self._thread.join()
