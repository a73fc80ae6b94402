"""Make an audiobook, step two: the render. Each chapter's progress, the time left, Pause and
Resume, Cancel, a Play button on every finished chapter (through the app's player, while the
rest renders), and a summary at the end.

The render is EngineClient.render_book (app.core.book.render on the engine thread), a background
job: a Play in the studio stops it within a sentence and it goes on afterwards. Finished
sentences and chapters stay in the parts folder the command line uses (OUT.parts/), so Pause,
a model switch, closing the app or a crash lose at most the sentence under way; the job is
kept in the settings (Settings.book_job) until the audiobook is written or cancelled, and the
app shows it paused at the next start. Cancel stops and forgets the job; its finished chapters
stay in the parts folder and can still be written into an audiobook of their own. Writing the
file (loudness, AAC, chapters, cover) runs in the background (app.core.book.job.write_book).
"""

from __future__ import annotations

import html
import os
import shutil
import threading
import time

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from app.core.long_render import format_eta
from app.core.provenance import Provenance
from app.qt.background import BackgroundOp, error_text
from engine_native.errors import Cancelled

PLAY_BLOCK_S = 5.0      # a finished chapter goes to the player this much at a time ...
PLAY_AHEAD_S = 30.0     # ... and never more than this far ahead of what has been heard


def summary_html(lines: list[str]) -> str:
    """The summary's lines (app.core.book.job.summary_lines: a label, then the words) as a table."""
    rows = []
    for line in lines:
        label, _sep, text = line.partition(" ")
        rows.append(f"<tr><td style='padding-right:12px; color:gray'>{html.escape(label.capitalize())}</td>"
                    f"<td>{html.escape(text.strip())}</td></tr>")
    return "<table>" + "".join(rows) + "</table>"


def load_book(job):
    """The job's book, read again and reviewed as the job says (off the GUI thread)."""
    from app.core.book import import_book

    return job.apply(import_book(job.book_path))


class BookRenderView(QDialog):
    """One audiobook's render; `state` is "reading", "rendering", "paused", "writing", "done",
    "cancelled" or "failed"."""

    stateChanged = Signal(str)

    def __init__(self, window, job, book=None, *, start: bool = True):
        super().__init__(window)
        self.w, self.client, self.job, self.book = window, window.client, job, book
        self.state = ""
        self.engine_job = None
        self.result = self.report = self.plan = None
        self.done: dict[int, tuple[str, str]] = {}       # chapter number -> (title, its WAV) finished
        self.rows: list[tuple[int, object]] = []          # (number, Chapter) of the included chapters
        self.summary: list[str] = []
        self._starts: list[float] = []
        self._audio_at_start = 0.0
        self._play_stop: threading.Event | None = None
        self.setWindowTitle("Audiobook")
        self.setWindowModality(Qt.NonModal)
        self.resize(720, 520)
        self._build()
        if book is None:
            self._set_state("reading")
            BackgroundOp(lambda _r: load_book(job), success=lambda b: self._book_read(b, start),
                         failure=lambda e: self._fail(f"Cannot resume the audiobook: {error_text(e)}")).start()
        else:
            self._book_read(book, start)

    def _build(self) -> None:
        lay = QVBoxLayout(self)
        self.title_label = QLabel(os.path.basename(self.job.book_path))
        self.title_label.setStyleSheet("font-size: 15px; font-weight: 600;")
        lay.addWidget(self.title_label)
        self.target_label = QLabel(self.job.target)
        self.target_label.setObjectName("Muted")
        lay.addWidget(self.target_label)
        self.bar = QProgressBar()
        self.bar.setRange(0, 1000)
        lay.addWidget(self.bar)
        self.status_label = QLabel("")
        self.status_label.setWordWrap(True)
        lay.addWidget(self.status_label)
        self.table = QTableWidget(0, 4)
        self.table.setHorizontalHeaderLabels(["Chapter", "Progress", "", ""])
        h = self.table.horizontalHeader()
        h.setSectionResizeMode(0, QHeaderView.Stretch)
        h.setSectionResizeMode(1, QHeaderView.Fixed)
        h.resizeSection(1, 150)
        for col in (2, 3):
            h.setSectionResizeMode(col, QHeaderView.ResizeToContents)
        self.table.verticalHeader().setVisible(False)      # the titles carry the chapters' numbers
        self.table.setEditTriggers(QTableWidget.NoEditTriggers)
        self.table.setSelectionMode(QTableWidget.NoSelection)
        lay.addWidget(self.table, 1)
        self.summary_label = QLabel("")
        self.summary_label.setWordWrap(True)
        self.summary_label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        self.summary_label.hide()
        lay.addWidget(self.summary_label)
        row = QHBoxLayout()
        self.pause_button = QPushButton("Pause")
        self.pause_button.clicked.connect(self.toggle_pause)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop; the finished chapters are kept and can be written on their own")
        self.cancel_button.clicked.connect(self.cancel)
        self.write_button = QPushButton("Write the finished chapters")
        self.write_button.clicked.connect(self.write_finished)
        self.write_button.hide()
        self.close_button = QPushButton("Close")
        self.close_button.clicked.connect(self.close)
        row.addWidget(self.pause_button)
        row.addWidget(self.cancel_button)
        row.addWidget(self.write_button)
        row.addStretch(1)
        row.addWidget(self.close_button)
        lay.addLayout(row)

    # --- the book and its chapters ------------------------------------------------------------------

    def _book_read(self, book, start: bool) -> None:
        self.book = book
        self.title_label.setText(self.job.title or book.title)
        self.rows = book.included()
        sizes = [c.chars + len(c.title) for _n, c in self.rows]
        self._total = sum(sizes) or 1
        self._starts = [sum(sizes[:i]) for i in range(len(sizes))]
        self._sizes = sizes
        self.table.setRowCount(len(self.rows))
        self.bars: list[QProgressBar] = []
        for r, (n, c) in enumerate(self.rows):
            self.table.setItem(r, 0, QTableWidgetItem(f"{n}. {c.title}"))
            bar = QProgressBar()
            bar.setRange(0, 1000)
            bar.setTextVisible(False)
            bar.setFixedHeight(8)
            cell = QWidget()
            cell_lay = QHBoxLayout(cell)
            cell_lay.setContentsMargins(6, 0, 6, 0)
            cell_lay.addWidget(bar, 0, Qt.AlignVCenter)
            self.bars.append(bar)
            self.table.setCellWidget(r, 1, cell)
            self.table.setItem(r, 2, QTableWidgetItem("waiting"))
            play = QPushButton("▶ Play")
            play.setEnabled(False)
            play.setToolTip("Hear this chapter while the rest renders")
            play.clicked.connect(lambda _c=False, n=n: self.play_chapter(n))
            self.table.setCellWidget(r, 3, play)
        if start:
            self.render()
        else:
            self._set_state("paused")

    def _row(self, number: int) -> int:
        return next(r for r, (n, _c) in enumerate(self.rows) if n == number)

    # --- the render ---------------------------------------------------------------------------------

    def render(self) -> None:
        """Start, or go on from the parts folder."""
        if self.book is None or self.state in ("rendering", "writing", "done"):
            return
        if self.client.info is None:
            self._set_state("paused")
            self.status_label.setText("Load a model to render the audiobook; it goes on where it stopped.")
            return
        # The loaded model renders; parts keyed by another model's file are left as they are.
        self.job.model_path = self.client.model_path or self.job.model_path
        self.w.settings.book_job = self.job.to_json()
        self._set_state("rendering")
        self.status_label.setText("Starting…")
        self.engine_job = self.client.render_book(self.job, self.book, progress=self._event,
                                                  success=self._rendered, failure=self._stopped)

    def toggle_pause(self) -> None:
        if self.state == "rendering":
            self.pause()
        elif self.state == "paused":
            self.render()

    def pause(self) -> None:
        """Stop within a sentence; Resume (now or after a restart) goes on from the parts folder."""
        self._set_state("paused")
        self.status_label.setText("Paused: the finished sentences are kept; Resume goes on from there, "
                                  "also after the app is closed.")
        if self.engine_job is not None:
            self.engine_job.cancel()

    def cancel(self) -> None:
        """Stop and forget the job; the finished chapters stay (Write the finished chapters)."""
        if self.state not in ("rendering", "paused", "failed"):
            return
        running = self.state == "rendering"
        self._set_state("cancelled")
        self.w.settings.book_job = ""
        if running and self.engine_job is not None:
            self.engine_job.cancel()
        self._show_cancelled()

    def _show_cancelled(self) -> None:
        n = len(self.done)
        self.status_label.setText(f"Cancelled. {n} finished chapter{'s' if n != 1 else ''} kept in "
                                  f"{self.job.parts_folder}" + ("; write them into an audiobook of their own, or "
                                                                "make the audiobook again to go on." if n else "."))
        self.write_button.setVisible(n > 0)

    def _event(self, e) -> None:
        if self.state != "rendering":
            return
        r = e.chapter - 1
        frac = min(1.0, max(0.0, (e.fraction * self._total - self._starts[r]) / max(1, self._sizes[r])))
        bar = self.bars[r]
        if e.kind == "chapter-start":
            self._audio_at_start = e.audio_s
            self.table.item(r, 2).setText("rendering")
        elif e.kind == "piece":
            bar.setValue(round(frac * 1000))
            left_book = self._total * (1.0 - e.fraction)
            if e.eta_s is not None and left_book > 0:      # the book's pace, over what is left of the chapter
                eta = e.eta_s * self._sizes[r] * (1.0 - frac) / left_book
                self.table.item(r, 2).setText(f"{format_eta(eta)} left")
        elif e.kind == "chapter-done":
            number = self.rows[r][0]
            self.done[number] = (self.rows[r][1].title, e.path)
            bar.setValue(1000)
            self.table.item(r, 2).setText(f"done · {format_eta(e.audio_s - self._audio_at_start)}")
            self.table.cellWidget(r, 3).setEnabled(True)
        self.bar.setValue(round(e.fraction * 1000))
        left = "" if e.eta_s is None else f" · {format_eta(e.eta_s)} left"
        self.status_label.setText(f"Reading {e.title} ({e.chapter} of {e.chapters}) · {int(100 * e.fraction)}% of "
                                  f"the book{left} · {format_eta(e.audio_s)} of audio so far")

    def _stopped(self, e: BaseException) -> None:
        if isinstance(e, Cancelled):
            if self.state == "rendering":      # stopped from outside (a model load): go on later
                self._set_state("paused")
                self.status_label.setText("Paused (the model changed); Resume goes on where it stopped.")
            return
        self._fail(f"The audiobook stopped: {error_text(e)}")

    def _fail(self, text: str) -> None:
        self._set_state("failed")
        self.status_label.setText(text + "\nThe finished sentences are kept; Resume tries again.")

    def _rendered(self, result) -> None:
        self.result = result
        for c in result.chapters:
            self.done[c.number] = (c.title, c.path)
        self._write(result.chapters)

    def write_finished(self) -> None:
        """A cancelled render's finished chapters into the audiobook."""
        from app.core.book.job import chapter_files

        done = [(n, t, p) for n, (t, p) in self.done.items()]
        self._set_state("writing")
        BackgroundOp(lambda _r: chapter_files(done), success=self._write,
                     failure=lambda e: self._fail(f"Cannot read the finished chapters: {error_text(e)}")).start()

    def _write(self, chapters) -> None:
        from app.core.book.job import write_book

        self._set_state("writing")
        self.status_label.setText(f"Writing {self.job.target} (loudness to -18 LUFS, chapters, cover)…")
        self.bar.setValue(1000)
        job, book, rate = self.job, self.book, self.client.sample_rate
        narrator = self.w.library.name_of(job.voice)
        info = self.client.info or {}     # the engine that rendered it: its model and watermark switch
        made = Provenance.from_info(info, [narrator, *(self.w.library.name_of(v) for v in job.cast.values())],
                                    bool(info.get("watermark")))
        tags = job.tags(book, narrator, made)
        cover = (book.cover, book.cover_mime) if book.cover else None
        BackgroundOp(lambda _r: write_book(chapters, job.target, job.kind, rate, tags, cover,
                                           chapter_format=job.chapter_format),
                     success=self._written, failure=lambda e: self._fail(f"Cannot write the audiobook: "
                                                                         f"{error_text(e)}")).start()

    def _written(self, written) -> None:
        from app.core.book.job import summary_lines

        self.report, self.plan = written
        self.w.settings.book_job = ""
        self.summary = summary_lines(self.result, self.report, self.plan)
        self.summary_label.setText(summary_html(self.summary))
        self.summary_label.show()
        self._set_state("done")
        self.status_label.setText(f"Done: {self.report.path}")
        self.w.statusBar().showMessage(f"Wrote the audiobook {self.report.path}", 10000)

    def _set_state(self, state: str) -> None:
        self.state = state
        self.pause_button.setText("Resume" if state in ("paused", "failed") else "Pause")
        self.pause_button.setEnabled(state in ("rendering", "paused", "failed"))
        self.cancel_button.setEnabled(state in ("rendering", "paused", "failed"))
        if state != "cancelled":
            self.write_button.hide()
        self.stateChanged.emit(state)

    # --- hearing a finished chapter -----------------------------------------------------------------

    def play_chapter(self, number: int) -> BackgroundOp | None:
        """Play a finished chapter through the app's player, read from its WAV a few seconds at a time."""
        if number not in self.done:
            return None
        self.stop_playing()
        self.w.controller.stop()
        player, path, stop = self.w.player, self.done[number][1], threading.Event()
        player.reset()
        self._play_stop = stop

        def read(report) -> None:
            import soundfile as sf

            with sf.SoundFile(path) as f:
                block = int(PLAY_BLOCK_S * f.samplerate)
                report(f.frames / f.samplerate)
                for x in f.blocks(blocksize=block, dtype="float32"):
                    while len(player.buffer) > PLAY_AHEAD_S * f.samplerate and not stop.is_set():
                        time.sleep(0.1)
                    if stop.is_set():
                        return
                    report(x)

        def fed(x) -> None:
            if stop.is_set():
                return
            if isinstance(x, float):
                player.begin_segment(x)
            else:
                player.feed(x)

        return BackgroundOp(read, success=lambda _r: None if stop.is_set() else player.end_segment(),
                            failure=lambda e: self.status_label.setText(f"Cannot play: {error_text(e)}"),
                            progress=fed).start()

    def stop_playing(self) -> None:
        if self._play_stop is not None:
            self._play_stop.set()
            self._play_stop = None
            self.w.player.stop()

    # --- closing ------------------------------------------------------------------------------------

    def closeEvent(self, e) -> None:
        """Closing while it renders hides the view (the ⋯ menu brings it back); otherwise the view
        goes, and a written audiobook's parts folder with it."""
        self.stop_playing()
        if self.state in ("rendering", "writing", "reading"):
            self.w.statusBar().showMessage("The audiobook goes on rendering: ⋯ > Make an audiobook… shows it", 10000)
            e.accept()
            self.hide()
            return
        if self.state == "done":
            folder = self.job.parts_folder
            BackgroundOp(lambda _r: shutil.rmtree(folder, ignore_errors=True)).start()
        e.accept()                          # (not QDialog's: a view is not a question to reject)
        self.book = self.result = None      # the view stays the window's child until then; its book need not
        self.stateChanged.emit("closed")
