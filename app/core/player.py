"""Streaming playback: a sounddevice OutputStream whose callback reads a thread-safe ring buffer.

The GUI thread pushes chunks as the engine makes them; the audio thread pulls. Playback
starts after an adaptive pre-roll: with generation speed r (seconds of audio per second
of compute, measured from the chunks) and R seconds of audio still to be generated,
starting with b >= R * (1 - r) / r buffered means the buffer never runs dry (production
stays ahead of playback for the whole utterance), so a slow machine starts later instead
of stuttering. If the estimate was wrong and the buffer does run dry, playback pauses
(silence, position held) and re-buffers with a fresh estimate: it never skips audio.

Nothing here touches Qt widgets; the owner polls `snapshot()` from a GUI timer.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

import numpy as np

#: Always buffer at least this much before starting (absorbs scheduling jitter).
MIN_PREROLL_S = 0.25
#: Safety factor on the computed pre-roll.
PREROLL_MARGIN = 1.15


class RingBuffer:
    """Mono float32 FIFO, one writer and one reader, lock-protected; grows when full."""

    def __init__(self, capacity: int = 1 << 18):
        self._buf = np.zeros(capacity, np.float32)
        self._read = 0  # absolute positions; index = pos % capacity
        self._write = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        with self._lock:
            return self._write - self._read

    def push(self, x: np.ndarray) -> None:
        x = np.asarray(x, np.float32).reshape(-1)
        with self._lock:
            need = self._write - self._read + x.size
            if need > self._buf.size:
                self._grow(need)
            cap = self._buf.size
            i = self._write % cap
            first = min(x.size, cap - i)
            self._buf[i:i + first] = x[:first]
            self._buf[:x.size - first] = x[first:]
            self._write += x.size

    def _grow(self, need: int) -> None:
        cap = self._buf.size
        while cap < need:
            cap *= 2
        data = self._peek_all()
        self._buf = np.zeros(cap, np.float32)
        self._buf[:data.size] = data
        self._read, self._write = 0, data.size

    def _peek_all(self) -> np.ndarray:
        cap = self._buf.size
        n = self._write - self._read
        i = self._read % cap
        return np.concatenate([self._buf[i:i + n], self._buf[:max(0, n - (cap - i))]])

    def pull(self, out: np.ndarray) -> int:
        """Fill `out` (1-D) from the front; returns how many frames were there."""
        with self._lock:
            n = min(out.size, self._write - self._read)
            cap = self._buf.size
            i = self._read % cap
            first = min(n, cap - i)
            out[:first] = self._buf[i:i + first]
            out[first:n] = self._buf[:n - first]
            self._read += n
        return n

    def clear(self) -> None:
        with self._lock:
            self._read = self._write = 0


@dataclass
class PlayerState:
    playing: bool  # the stream is open (possibly re-buffering)
    buffering: bool  # waiting for the pre-roll
    played_s: float  # audio actually sent to the device since reset()
    buffered_s: float
    fed_s: float
    preroll_s: float
    underruns: int
    speed: float | None  # measured generation speed (audio s / compute s)
    drained: bool  # every fed segment has played out
    error: str | None


def output_devices() -> list[str]:
    """Names of the devices that can play audio (empty when PortAudio finds none)."""
    try:
        import sounddevice as sd

        return [d["name"] for d in sd.query_devices() if d["max_output_channels"] > 0]
    except Exception:  # noqa: BLE001 - no audio system at all is a valid answer here
        return []


class Player:
    def __init__(self, sample_rate: int, device: str | None = None, warm_up: bool = True):
        self.rate = sample_rate
        self.device = device or None
        self.buffer = RingBuffer()
        self._lock = threading.Lock()
        self._pa_lock = threading.Lock()  # PortAudio calls are not thread-safe: one at a time
        self._stream = None
        self._playing = False  # True while the callback outputs audio (False: pre-roll / re-buffer)
        self._input_open = False  # the current segment may still get chunks
        self._expected_s = 0.0  # audio still expected for the current segment
        self._played = 0
        self._fed = 0
        self._underruns = 0
        self._speed: float | None = None
        self._preroll_s = MIN_PREROLL_S
        self._error: str | None = None
        self._clock_start: float | None = None
        self._clock_frames = 0
        self._max_ahead_s = 0.3
        if warm_up:
            threading.Thread(target=self._warm_up, name="audio-warm-up", daemon=True).start()

    def _warm_up(self) -> None:
        """Load PortAudio and open the device once, off the GUI thread: the first open parses the
        whole ALSA configuration (~0.2 s), which would otherwise stall the window at the first chunk."""
        with self._pa_lock:
            try:
                import sounddevice as sd

                with sd.OutputStream(samplerate=self.rate, channels=1, dtype="float32", device=self.device,
                                     latency="low"):
                    pass
            except Exception:  # noqa: BLE001 - reported when playback is really attempted
                pass

    # --- producer side (GUI thread) ----------------------------------------------------------

    def begin_segment(self, expected_s: float) -> None:
        """A new utterance will be fed; `expected_s` is its estimated length."""
        with self._lock:
            self._input_open = True
            self._expected_s = max(0.0, float(expected_s))
            self._preroll_s = self._compute_preroll()

    def feed(self, samples: np.ndarray, compute_s: float | None = None) -> None:
        """Queue audio; `compute_s` (how long the engine took for it) updates the speed estimate."""
        samples = np.asarray(samples, np.float32).reshape(-1)
        if samples.size == 0:
            return
        audio_s = samples.size / self.rate
        with self._lock:
            if compute_s and compute_s > 0:
                r = audio_s / compute_s
                self._speed = r if self._speed is None else 0.6 * self._speed + 0.4 * r
            self._expected_s = max(0.0, self._expected_s - audio_s)
            self._fed += samples.size
            if not self._playing:
                self._preroll_s = self._compute_preroll(rebuffer=self._underruns > 0)
        self.buffer.push(samples)
        self._ensure_stream()

    def end_segment(self) -> None:
        """No more audio for this utterance: play out whatever is buffered."""
        with self._lock:
            self._input_open = False
            self._expected_s = 0.0
        self._ensure_stream()

    def stop(self) -> None:
        """Stop now and flush everything buffered."""
        with self._lock:
            self._input_open = False
            self._playing = False
            self._expected_s = 0.0
        self.buffer.clear()
        self._close_stream()

    def reset(self) -> None:
        """Stop and zero the counters (a new take)."""
        self.stop()
        with self._lock:
            self._played = self._fed = self._underruns = 0
            self._error = None

    def set_device(self, name: str | None) -> None:
        self.stop()
        self.device = name or None

    def take_error(self) -> str | None:
        """The audio device's last error, if any, once: it is cleared as it is read."""
        with self._lock:
            error, self._error = self._error, None
        return error

    def snapshot(self) -> PlayerState:
        with self._lock:
            buffered = len(self.buffer)
            drained = not self._input_open and buffered == 0
            st = PlayerState(
                playing=self._stream is not None, buffering=self._stream is not None and not self._playing,
                played_s=self._played / self.rate, buffered_s=buffered / self.rate, fed_s=self._fed / self.rate,
                preroll_s=self._preroll_s, underruns=self._underruns, speed=self._speed, drained=drained,
                error=self._error)
        if drained and self._stream is not None:
            self._close_stream()
            st.playing = st.buffering = False
        return st

    # --- pre-roll ----------------------------------------------------------------------------

    def _compute_preroll(self, rebuffer: bool = False) -> float:
        """Seconds to buffer before (re)starting, from the speed r and R seconds still to come.

        Playing from buffer b while R more seconds arrive at speed r never runs dry when
        b >= R * (1 - r) / r (the buffer at the moment production ends is b + R - R / r >= 0).
        """
        r = self._speed
        remaining = self._expected_s
        if rebuffer:  # the estimate was short: assume at least a second more is coming
            remaining = max(remaining, 1.0)
        if r is None:  # nothing measured yet: keep a safety margin
            need = 0.5
        elif r >= 1.0:
            need = MIN_PREROLL_S
        else:
            need = remaining * (1.0 - r) / max(r, 1e-3) * PREROLL_MARGIN
        return max(MIN_PREROLL_S, need)

    # --- the stream ----------------------------------------------------------------------------

    def _ensure_stream(self) -> None:
        if self._stream is not None:
            return
        with self._pa_lock:
            self._open_stream()

    def _open_stream(self) -> None:
        import sounddevice as sd

        try:
            stream = sd.OutputStream(samplerate=self.rate, channels=1, dtype="float32", device=self.device,
                                     callback=self._callback, latency="low")
            with self._lock:
                self._playing = False
                self._clock_start = None
                self._clock_frames = 0
                self._max_ahead_s = float(stream.latency) + 0.1
            self._stream = stream
            stream.start()
        except Exception as e:  # noqa: BLE001 - no device, busy device...: audio off, app goes on
            self._stream = None
            with self._lock:
                self._error = f"Audio output is not available ({e}). The take is still kept for export."
                self._played = self._fed  # count it as "played" so a take finishes
            self.buffer.clear()

    def _close_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None:
            with self._pa_lock:
                try:
                    stream.abort()
                    stream.close()
                except Exception:  # noqa: BLE001
                    pass

    def _callback(self, outdata, frames, time_info, status) -> None:  # audio thread
        out = outdata[:, 0]
        self._pace(frames)
        with self._lock:
            if not self._playing:
                ready = len(self.buffer) / self.rate
                if ready >= self._preroll_s or (not self._input_open and ready > 0):
                    self._playing = True
        if not self._playing:
            out.fill(0)
            return
        n = self.buffer.pull(out)
        if n < frames:
            out[n:] = 0
        with self._lock:
            self._played += n
            if n < frames and self._input_open:  # ran dry mid-utterance: re-buffer, never skip
                self._underruns += 1
                self._playing = False
                self._preroll_s = self._compute_preroll(rebuffer=True)

    def _pace(self, frames: int) -> None:
        """Keep a clock-less sink (e.g. ALSA's null device) from pulling faster than real time.

        A real device calls back at its own pace and never gets more than its latency
        ahead of the wall clock, so this never sleeps there.
        """
        now = time.monotonic()
        if self._clock_start is None:
            self._clock_start = now
        ahead = self._clock_frames / self.rate - (now - self._clock_start)
        if ahead > self._max_ahead_s:
            time.sleep(min(ahead - self._max_ahead_s + 0.01, 0.2))
        self._clock_frames += frames
