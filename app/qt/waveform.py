"""A waveform view: min/max peaks per pixel column, speech/silence bands, the chosen window(s)
with draggable edges, and a playhead. Used by the transport (the current take, growing while
it streams) and by the Voice Lab (the source recording)."""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPainterPath, QPen, QPixmap
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.qt import theme
from engine_native.engine import NOMINAL_SAMPLE_RATE

EDGE_GRAB_PX = 7
MIN_SPAN_S = 0.5


class WaveformView(QWidget):
    windowChanged = Signal(list)  # [(start_s, end_s), ...] after an edge drag
    seekRequested = Signal(float)

    def __init__(self, parent=None, *, editable: bool = False, compact: bool = False):
        super().__init__(parent)
        self.editable = editable
        self._samples = np.zeros(0, np.float32)
        self._rate = NOMINAL_SAMPLE_RATE  # until set_audio() gives the take's rate
        self._span_s = 0.0  # the x axis covers max(audio, expected) seconds
        self._expected_s = 0.0
        self._peaks: tuple[np.ndarray, np.ndarray] | None = None
        self._regions: list[tuple[float, float, str]] = []  # (start, end, "speech" | "speech2" | "silence")
        self.windows: list[list[float]] = []
        self._marks: list[float] = []  # sentence boundaries
        self._pixmap: QPixmap | None = None  # background, regions, waveform and marks: redrawn only on change
        self.playhead: float | None = None
        self.placeholder = ""
        self._drag: tuple[int, int] | None = None  # (window index, 0 start / 1 end)
        self.setMouseTracking(True)
        self.setMinimumHeight(56 if compact else 120)
        self.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Expanding if not compact else QSizePolicy.Fixed)
        if compact:
            self.setFixedHeight(64)

    # --- data ---------------------------------------------------------------------------------

    @property
    def regions(self):
        return self._regions

    @regions.setter
    def regions(self, value):
        self._regions = list(value)
        self.redraw()

    @property
    def marks(self):
        return self._marks

    @marks.setter
    def marks(self, value):
        self._marks = list(value)
        self.redraw()

    def redraw(self) -> None:
        """Draw everything again (the cached background too): after a theme change, say."""
        self._pixmap = None
        self.update()

    def set_audio(self, samples: np.ndarray, rate: int, expected_s: float = 0.0) -> None:
        x = np.asarray(samples, np.float32)
        self._samples = x.mean(axis=1) if x.ndim == 2 else x.reshape(-1)
        self._rate = int(rate)
        self._expected_s = float(expected_s)
        self._peaks = None
        self.redraw()

    def append(self, samples: np.ndarray) -> None:
        self._samples = np.concatenate([self._samples, np.asarray(samples, np.float32).reshape(-1)])
        self._peaks = None
        self.redraw()

    def clear(self) -> None:
        self.set_audio(np.zeros(0, np.float32), self._rate)
        self.regions, self.windows, self.marks = [], [], []
        self.playhead = None

    @property
    def n_samples(self) -> int:
        return int(self._samples.size)

    @property
    def duration(self) -> float:
        return self._samples.size / self._rate if self._rate else 0.0

    def set_windows(self, spans) -> None:
        self.windows = [[float(a), float(b)] for a, b in spans]
        self.update()

    def set_playhead(self, seconds: float | None) -> None:
        if seconds != self.playhead:
            self.playhead = seconds
            self.update()

    # --- geometry -----------------------------------------------------------------------------

    def _extent(self) -> float:
        return max(self.duration, self._expected_s, 1e-6)

    def _x(self, t: float) -> float:
        return t / self._extent() * max(1, self.width())

    def _t(self, x: float) -> float:
        return min(max(0.0, x / max(1, self.width()) * self._extent()), self.duration)

    def _compute_peaks(self) -> tuple[np.ndarray, np.ndarray]:
        w = max(1, self.width())
        n = self._samples.size
        cols = max(1, int(round(w * n / (self._extent() * self._rate)))) if n else 0
        if cols == 0:
            return np.zeros(0), np.zeros(0)
        edges = np.linspace(0, n, cols + 1).astype(np.int64)
        x = self._samples
        if n >= cols:
            lo = np.minimum.reduceat(x, edges[:-1])
            hi = np.maximum.reduceat(x, edges[:-1])
        else:
            lo = hi = x[np.minimum(edges[:-1], n - 1)]
        return lo, hi

    def resizeEvent(self, e):
        self._peaks = None
        self._pixmap = None
        super().resizeEvent(e)

    # --- painting -----------------------------------------------------------------------------

    def _rounded(self) -> QPainterPath:
        path = QPainterPath()
        path.addRoundedRect(QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5), 6, 6)
        return path

    def _render_static(self) -> QPixmap:
        """Background, speech/silence bands, the waveform and sentence marks."""
        c = theme.colors()
        ratio = self.devicePixelRatioF()
        pm = QPixmap(int(self.width() * ratio), int(self.height() * ratio))
        pm.setDevicePixelRatio(ratio)
        pm.fill(Qt.transparent)
        p = QPainter(pm)
        p.setRenderHint(QPainter.Antialiasing)
        bg = self._rounded()
        p.fillPath(bg, QColor(c.base))
        p.setClipPath(bg)
        h, mid = self.height(), self.height() / 2
        for a, b, kind in self._regions:
            col = QColor({"speech": c.speech, "speech2": c.speech2}.get(kind, c.silence))
            col.setAlphaF(0.55)
            p.fillRect(QRectF(self._x(a), 0, self._x(b) - self._x(a), h), col)
        if self._samples.size:
            if self._peaks is None:
                self._peaks = self._compute_peaks()
            lo, hi = self._peaks
            scale = (h / 2 - 4) / max(0.05, float(max(np.max(np.abs(lo)), np.max(np.abs(hi)))))
            path = QPainterPath()
            xs = np.arange(lo.size) + 0.5
            top, bottom = mid - hi * scale, mid - lo * scale
            path.moveTo(QPointF(xs[0], top[0]))
            for x, y in zip(xs[1:].tolist(), top[1:].tolist()):
                path.lineTo(x, y)
            for x, y in zip(xs[::-1].tolist(), bottom[::-1].tolist()):
                path.lineTo(x, y)
            path.closeSubpath()
            p.setPen(QPen(QColor(c.wave), 1))
            fill = QColor(c.wave)
            fill.setAlphaF(0.75)
            p.setBrush(fill)
            p.drawPath(path)
        else:
            p.setPen(QPen(QColor(c.border), 1, Qt.DashLine))
            p.drawLine(QPointF(8, mid), QPointF(self.width() - 8, mid))
            if self.placeholder:
                p.setPen(QColor(c.muted))
                p.drawText(self.rect(), Qt.AlignCenter, self.placeholder)
        p.setPen(QPen(QColor(c.border), 1, Qt.DotLine))
        for t in self._marks:
            p.drawLine(QPointF(self._x(t), 4), QPointF(self._x(t), h - 4))
        p.end()
        return pm

    def paintEvent(self, _e):
        c = theme.colors()
        if self._pixmap is None or self._pixmap.deviceIndependentSize().toSize() != self.size():
            self._pixmap = self._render_static()
        p = QPainter(self)
        p.setRenderHint(QPainter.Antialiasing)
        p.drawPixmap(0, 0, self._pixmap)
        bg = self._rounded()
        p.setClipPath(bg)
        h, mid = self.height(), self.height() / 2
        sel = QColor(c.window_sel)
        for a, b in self.windows:
            xa, xb = self._x(a), self._x(b)
            shade = QColor(sel)
            shade.setAlphaF(0.14)
            p.fillRect(QRectF(xa, 0, xb - xa, h), shade)
            p.setPen(QPen(sel, 2))
            for x in (xa, xb):
                p.drawLine(QPointF(x, 0), QPointF(x, h))
                if self.editable:
                    p.setBrush(sel)
                    p.drawRoundedRect(QRectF(x - 4, mid - 12, 8, 24), 3, 3)
        if self.playhead is not None and self.duration > 0:
            x = self._x(self.playhead)
            p.setPen(QPen(QColor(c.playhead), 2))
            p.drawLine(QPointF(x, 0), QPointF(x, h))
        p.setClipping(False)
        p.setPen(QPen(QColor(c.border), 1))
        p.setBrush(Qt.NoBrush)
        p.drawPath(bg)
        p.end()

    # --- dragging the window edges ------------------------------------------------------------------

    def _edge_at(self, x: float) -> tuple[int, int] | None:
        best, dist = None, EDGE_GRAB_PX + 1
        for i, (a, b) in enumerate(self.windows):
            for j, t in enumerate((a, b)):
                d = abs(self._x(t) - x)
                if d < dist:
                    best, dist = (i, j), d
        return best

    def mousePressEvent(self, e):
        x = e.position().x()
        if self.editable and e.button() == Qt.LeftButton:
            self._drag = self._edge_at(x)
            if self._drag:
                return
        if e.button() == Qt.LeftButton and self.duration > 0:
            self.seekRequested.emit(self._t(x))

    def mouseMoveEvent(self, e):
        x = e.position().x()
        if self._drag is None:
            if self.editable:
                self.setCursor(Qt.SizeHorCursor if self._edge_at(x) else Qt.ArrowCursor)
            return
        self.move_edge(*self._drag, self._t(x))

    def mouseReleaseEvent(self, e):
        if self._drag is not None:
            self._drag = None
            self.windowChanged.emit([tuple(w) for w in self.windows])

    def move_edge(self, index: int, which: int, t: float) -> None:
        """Move one edge of window `index` (0: start, 1: end) to `t`, keeping windows apart."""
        a, b = self.windows[index]
        lo = self.windows[index - 1][1] if index > 0 else 0.0
        hi = self.windows[index + 1][0] if index + 1 < len(self.windows) else self.duration
        if which == 0:
            self.windows[index][0] = min(max(lo, t), b - MIN_SPAN_S)
        else:
            self.windows[index][1] = max(min(hi, t), a + MIN_SPAN_S)
        self.update()
