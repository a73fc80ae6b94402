"""Audiobooks in the main window: ⋯ > "Make an audiobook…" (and a book file opened or dropped,
app.qt.file_opener) opens the review (app.qt.book_dialog); its Render opens the render view
(app.qt.book_render_view). One audiobook at a time: while one renders or waits paused, the menu
shows it. A job left paused or running when the app closed comes back paused at the next start."""

from __future__ import annotations

import os

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QFileDialog

from app.core.book import BOOK_EXTENSIONS, BookError
from app.core.book.job import BookJob
from app.qt.book_dialog import BookDialog
from app.qt.book_render_view import BookRenderView
from engine_native.options import random_seed

BOOK_FILTER = "Books (" + " ".join(f"*{e}" for e in sorted(BOOK_EXTENSIONS)) + ")"
ACTIVE = ("reading", "rendering", "writing", "paused", "failed")


class BookActions(QObject):
    def __init__(self, window):
        super().__init__(window)
        self.w = window
        self.dialog: BookDialog | None = None
        self.view: BookRenderView | None = None

    def add_menu(self, m) -> None:
        m.addAction("Make an audiobook…", lambda: self.make_audiobook())

    def make_audiobook(self, path: str | None = None):
        """The audiobook under way (shown again), else the review of a book (asked for when not given)."""
        if self.view is not None and self.view.state in ACTIVE:
            self.view.show()
            self.view.raise_()
            return self.view
        if path is None:
            start = self.w.settings.last_open_dir or os.path.expanduser("~")
            path, _ = QFileDialog.getOpenFileName(self.w, "Make an audiobook of", start, BOOK_FILTER)
            if not path:
                return None
            self.w.settings.last_open_dir = os.path.dirname(path)
        return self.review(path)

    def review(self, path: str) -> BookDialog:
        dlg = BookDialog(path, entries=self.w.library.entries(), voice=self.w.voices.voice(), settings=self.w.settings,
                         options={**self.w.params(), **self.w.controller.stream_options},
                         model_path=self.w.client.model_path or "", parent=self.w)
        dlg.accepted.connect(lambda: self.render(dlg))
        self.dialog = dlg
        dlg.open()
        return dlg

    def render(self, dlg: BookDialog) -> BookRenderView:
        seed = dlg.options.get("seed")
        job = dlg.job(seed if seed is not None and seed >= 0 else random_seed())
        return self._show(BookRenderView(self.w, job, job.apply(dlg.book)))

    def resume_saved(self) -> BookRenderView | None:
        """The job the app was rendering when it closed, shown paused (Resume goes on)."""
        text = self.w.settings.book_job
        if not text:
            return None
        try:
            job = BookJob.from_json(text)
        except BookError as e:
            self.w.settings.book_job = ""
            self.w.show_error(str(e))
            return None
        view = self._show(BookRenderView(self.w, job, start=False))
        self.w.statusBar().showMessage(f"The audiobook {os.path.basename(job.target)} is paused: Resume goes on "
                                       "where it stopped", 10000)
        return view

    def _show(self, view: BookRenderView) -> BookRenderView:
        self.view = view
        view.stateChanged.connect(lambda s, v=view: self._closed(v) if s == "closed" else None)
        view.show()
        return view

    def _closed(self, view: BookRenderView) -> None:
        if self.view is view:
            self.view = None
