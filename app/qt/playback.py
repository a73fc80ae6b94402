"""Synthesis to speakers: turns editor requests into engine stream jobs, feeds the chunks to the
Player and the current Take, and reports position, the sentence being heard and the state.

Runs on the GUI thread; it only submits jobs and reacts to their callbacks, so it never
waits on the engine.
"""

from __future__ import annotations

import time

import numpy as np
from PySide6.QtCore import QObject, QTimer, Signal

from app.core.player import Player
from app.core.provenance import Provenance
from app.core.take import Take
from app.qt.background import error_text
from app.qt.engine_client import EngineClient
from app.qt.engine_worker import EngineJob
from engine_native.errors import Cancelled

#: Rough speaking rate for the pre-roll estimate of how much audio a text will give.
CHARS_PER_SECOND = 14.0


def estimate_seconds(text: str) -> float:
    return max(0.5, len(text.strip()) / CHARS_PER_SECOND)


class PlaybackController(QObject):
    stateChanged = Signal(str)  # "idle", "generating" (engine busy, maybe playing too), "playing", "live"
    takeStarted = Signal(object)
    takeChanged = Signal(object)
    takeFinished = Signal(object)
    sentenceHeard = Signal(object)  # (start, end) in editor coordinates, or None
    position = Signal(float, float, float)  # elapsed s, total s, fraction 0..1
    statusText = Signal(str)
    error = Signal(str)

    def __init__(self, client: EngineClient, player: Player, parent=None):
        super().__init__(parent)
        self.client = client
        self.player = player
        self.take: Take | None = None
        self.jobs: list[EngineJob] = []
        self.state = "idle"
        self.live = False
        self.stream_options: dict = {}  # extra engine.stream options (chunk sizes), e.g. for tests
        self.chunks_received = 0
        self.live_spoken: list[str] = []  # sentences whose synthesis completed in live mode, in order
        self.live_queued: list[str] = []
        self._base_frame = 0  # the take frame at which the player's position 0 sits
        self._fixed_span: tuple[int, int] | None = None  # highlight while regenerating one sentence
        self._live_index = 0
        self._progress = (0, 0)
        self._started_at = 0.0
        self.timer = QTimer(self)
        self.timer.setInterval(30)
        self.timer.timeout.connect(self._tick)

    # --- requests -----------------------------------------------------------------------------------

    def play(self, text: str, offset: int, voice, params: dict, voice_name: str, *,
             in_history: bool = True, script: dict | None = None) -> Take | None:
        """Synthesize `text` (at `offset` in the editor) and play it as it streams. `script`
        (voices, lexicon, best_of, speakers: EngineClient.render_script) renders it as a
        script: timed pauses, a cast, a lexicon, best-of-N."""
        self.stop()
        if not text or not text.strip():
            self.error.emit("Nothing to say: the script is empty.")
            return None
        take = Take(text, voice_name, self.client.sample_rate, text_offset=offset, in_history=in_history)
        self._start_take(take, list((script or {}).get("voices", {})))
        self.player.begin_segment(estimate_seconds(text))
        callbacks = {"on_chunk": lambda sc: self._on_chunk(take, sc, offset, 0),
                     "success": lambda r: self._on_done(take, r), "failure": lambda e: self._on_failed(take, e)}
        if script is not None:
            voices = {None: voice, **script.get("voices", {})}
            job = self.client.render_script(text, voices, {**params, **self.stream_options},
                                            lexicon=script.get("lexicon"), best_of=script.get("best_of", 1),
                                            speakers=script.get("speakers"), **callbacks)
        else:
            job = self.client.stream(text, voice, {**params, **self.stream_options}, **callbacks)
        self.jobs.append(job)
        self._set_state("generating")
        return take

    def revoice(self, samples, rate: int, voice, params: dict, voice_name: str, title: str) -> Take:
        """Re-voice a decoded recording in `voice` and play it as it converts: a take like a
        synthesis's (Stop cancels it, Export take writes it), one sentence per segment of the
        source, titled `title`."""
        self.stop()
        take = Take(title, voice_name, self.client.sample_rate)
        self._start_take(take)
        self.player.begin_segment(len(samples) / rate)

        def on_chunk(sc):
            c = sc.chunk
            take.add_audio(int(c.sentence_index), "", (0, 0), c.samples)  # no text of the editor's
            self.chunks_received += 1
            self.player.feed(c.samples, sc.compute_s)
            self._progress = (int(c.sentence_index) + (1 if c.is_last else 0), int(c.n_sentences))
            self.statusText.emit(f"Re-voiced {take.duration:.1f} of {len(samples) / rate:.1f} s")
            self.takeChanged.emit(take)

        job = self.client.revoice(samples, rate, voice, {**params, **self.stream_options}, on_chunk=on_chunk,
                                  success=lambda r: self._on_done(take, r), failure=lambda e: self._on_failed(take, e))
        self.jobs.append(job)
        self._set_state("generating")
        return take

    def replay(self, take: Take) -> None:
        """Play a finished take again (no synthesis)."""
        self.stop()
        self.take = take
        self.player.reset()
        self._base_frame = 0
        self._fixed_span = None
        self._progress = (0, 0)
        self.player.begin_segment(0.0)
        self.player.feed(take.samples)
        self.player.end_segment()
        self._set_state("playing")
        self.timer.start()

    def regenerate(self, position: int, voice, params: dict, lexicon=None) -> bool:
        """Synthesize the current take's sentence at editor `position` again and swap it in
        (`voice`: the sentence's own, from the cast; `lexicon`: respellings, as the take had)."""
        take = self.take
        s = take.sentence_containing(position) if take else None
        if s is None:
            self.error.emit("Put the cursor in a sentence of the current take to regenerate it.")
            return False
        self.stop()
        self.take = take
        self.player.reset()
        self.player.begin_segment(estimate_seconds(s.text))
        self._base_frame = 0
        self._fixed_span = s.span
        self.chunks_received = 0
        pieces: list[np.ndarray] = []

        def on_chunk(sc):
            pieces.append(np.asarray(sc.chunk.samples, np.float32).reshape(-1))
            self.chunks_received += 1
            self.player.feed(pieces[-1], sc.compute_s)

        def done(result):
            self.jobs = [j for j in self.jobs if not j.finished]
            if pieces:
                take.replace_sentence(s.index, np.concatenate(pieces))
                self.takeChanged.emit(take)
            self.player.end_segment()
            self.statusText.emit(f"Regenerated: “{s.text}” (seed {result.get('seed')})")

        params = {**params, **self.stream_options, "seed": None}
        spoken = lexicon.respell(s.text) if lexicon is not None else s.text
        self.jobs.append(self.client.stream(spoken, voice, params, on_chunk=on_chunk, success=done,
                                            failure=lambda e: self._on_failed(take, e), label="regenerate"))
        self._set_state("generating")
        self.timer.start()
        return True

    def stop(self) -> None:
        """Cancel synthesis (the engine stops within one chunk) and flush the audio buffer."""
        for job in self.jobs:
            job.cancel()
        self.jobs = []
        self.player.stop()
        self._fixed_span = None
        if self.take is not None and not self.take.complete:
            self.take.complete = True
            self.takeFinished.emit(self.take)
        self.sentenceHeard.emit(None)
        if self.live:
            self._set_state("live")
        else:
            self.timer.stop()
            self._set_state("idle")

    # --- live typing --------------------------------------------------------------------------------

    def start_live(self, voice_name: str) -> None:
        self.stop()
        self.live = True
        self.live_spoken, self.live_queued = [], []
        self._live_index = 0
        self._start_take(Take("(live typing)", voice_name, self.client.sample_rate))
        self._set_state("live")

    def say_live(self, sentence: str, start: int, end: int, voice, params: dict) -> None:
        """Queue one typed sentence behind the ones already queued; spoken exactly once."""
        if not self.live:
            return
        take, index = self.take, self._live_index
        self._live_index += 1
        self.live_queued.append(sentence)
        state = {"first": True}

        def on_chunk(sc):
            if state["first"]:
                state["first"] = False
                self.player.begin_segment(estimate_seconds(sentence))
            take.add_audio(index, sentence, (start, end), sc.chunk.samples)
            self.chunks_received += 1
            self.player.feed(sc.chunk.samples, sc.compute_s)
            self.takeChanged.emit(take)

        def done(_result):
            self.jobs = [j for j in self.jobs if not j.finished]
            self.player.end_segment()
            self.live_spoken.append(sentence)

        self.jobs.append(self.client.stream(sentence, voice, {**params, **self.stream_options}, on_chunk=on_chunk,
                                            success=done, failure=lambda e: self._on_failed(take, e),
                                            label="live sentence"))
        self.timer.start()

    def stop_live(self) -> None:
        self.live = False
        self.stop()

    # --- engine callbacks ------------------------------------------------------------------------

    def _start_take(self, take: Take, cast=()) -> None:
        """`cast`: the script's other speakers, named in the take's provenance after its voice."""
        info = self.client.info or {}
        take.provenance = Provenance.from_info(info, [take.voice_name, *cast], bool(info.get("watermark")))
        self.take = take
        self.player.reset()
        self._base_frame = 0
        self._fixed_span = None
        self.chunks_received = 0
        self._progress = (0, 0)
        self._started_at = time.perf_counter()
        self.takeStarted.emit(take)
        self.timer.start()

    def _on_chunk(self, take: Take, sc, offset: int, index_base: int) -> None:
        c = sc.chunk
        span = (offset + int(c.span[0]), offset + int(c.span[1]))
        take.add_audio(index_base + int(c.sentence_index), c.text, span, c.samples)
        self.chunks_received += 1
        self.player.feed(c.samples, sc.compute_s)
        self._progress = (int(c.sentence_index) + (1 if c.is_last else 0), int(c.n_sentences))
        self.statusText.emit(f"Sentence {min(c.sentence_index + 1, c.n_sentences)} of {c.n_sentences}")
        self.takeChanged.emit(take)

    def _on_done(self, take: Take, result: dict) -> None:
        self.jobs = [j for j in self.jobs if not j.finished]
        take.seed = result.get("seed")
        if result.get("likeness") is not None:
            take.likeness = result["likeness"]
        take.complete = True
        self._progress = (self._progress[1], self._progress[1])
        self.player.end_segment()
        secs = time.perf_counter() - self._started_at
        self.statusText.emit(f"Generated {take.duration:.1f} s of audio in {secs:.1f} s "
                             f"(seed {take.seed})")
        self.takeFinished.emit(take)

    def _on_failed(self, take: Take, e: BaseException) -> None:
        self.jobs = [j for j in self.jobs if not j.finished]
        if isinstance(e, Cancelled):
            return
        self.player.end_segment()
        self.error.emit(f"Synthesis failed: {error_text(e)}")
        if not take.complete:
            take.complete = True
            self.takeFinished.emit(take)

    # --- the clock ----------------------------------------------------------------------------------

    def _set_state(self, state: str) -> None:
        if state != self.state:
            self.state = state
            self.stateChanged.emit(state)

    def _tick(self) -> None:
        st = self.player.snapshot()
        take = self.take
        error = self.player.take_error()  # reported once
        if error:
            self.error.emit(error)
        if take is not None:
            frame = self._base_frame + int(st.played_s * take.sample_rate)
            total = take.duration
            if self._fixed_span is not None:
                span = self._fixed_span
            else:
                s = take.sentence_at(frame) if (st.playing and not st.buffering) else None
                span = s.span if s else None
            self.sentenceHeard.emit(span)
            done, n = self._progress
            if self.jobs and n and not self.live:
                frac = done / n
            else:
                frac = (frame / take.frames) if take.frames else 0.0
            self.position.emit(frame / take.sample_rate, total, frac)
        busy = bool(self.jobs)
        if self.live:
            self._set_state("live")
        elif busy:
            self._set_state("generating")
        elif not st.drained:
            self._set_state("playing")
        else:
            self._fixed_span = None
            self.sentenceHeard.emit(None)
            self._set_state("idle")
            self.timer.stop()
