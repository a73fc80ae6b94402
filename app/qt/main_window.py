"""The main window: lays out the studio (voice library, script editor, transport) and the Voice
Lab page, and wires its parts together, each a module of what the user sees:

- app.qt.toolbar: the toolbar's widgets and the ⋯ menu
- app.qt.model_actions: the model (loading, the model manager, the welcome dialog) and the devices
- app.qt.voice_actions: the voice picker, the library, adding voices, samples
- app.qt.language_picker: a Multilingual model's language
- app.qt.script_actions: playing the script, regenerating, cast, lexicon, best-of, export
- app.qt.take_actions: the transport, the take history and exporting a take
- app.qt.book_actions: making an audiobook of a book (the review, then the render)

Here besides: the error banner (app.qt.error_banner), files opened on the window (app.qt.file_opener:
from the command line, a second launch, a drop: app.qt.drops), the first-run tour, the theme, and
closing.
"""

from __future__ import annotations

import gc
import os

from PySide6.QtCore import Qt
from PySide6.QtGui import QIcon, QKeySequence, QShortcut
from PySide6.QtWidgets import (QApplication, QFileDialog, QLabel, QMainWindow, QSplitter, QStackedWidget, QVBoxLayout,
                               QWidget)

from app.core.paths import app_data_dir, app_icon
from app.core.player import Player
from app.core.voice_library import VARIANT_NAMES, VoiceStore
from app.qt import theme
from app.qt.background import error_text
from app.qt.book_actions import BookActions
from app.qt.drops import DropFilter, dropped_files
from app.qt.engine_client import EngineClient
from app.qt.error_banner import ErrorBanner
from app.qt.file_opener import FileOpener
from app.qt.language_picker import LanguagePicker
from app.qt.model_actions import ModelActions
from app.qt.playback import PlaybackController
from app.qt.sampling_panel import PRESETS, SamplingPanel
from app.qt.script_actions import ScriptActions
from app.qt.script_editor import SAMPLE_SCRIPT, ScriptEditor
from app.qt.server_panel import ServerPanel
from app.qt.settings import Settings
from app.qt.take_actions import TakeActions
from app.qt.toolbar import MainToolbar
from app.qt.transport import Transport
from app.qt.voice_actions import VoiceActions
from app.qt.voice_lab_view import VoiceLabView
from app.qt.library_panel import VoiceLibraryPanel
from app.qt.waveform import WaveformView

def default_data_dir() -> str:
    return app_data_dir()


def freeze_heap() -> None:
    """Exempt the objects alive now (modules, widgets, the loaded model's Python side) from the
    cyclic garbage collector: a full collection walks every tracked object on the GUI thread,
    40-60 ms for the app's ~57,000 objects on a 2-core machine (more under load), a visible
    stall at random moments. What is frozen is long-lived; refcounting still frees it. (No
    collection first: it would be that stall; freezing is a constant-time splice.)"""
    gc.freeze()


class MainWindow(QMainWindow):
    def __init__(self, settings: Settings | None = None, data_dir: str | None = None):
        super().__init__()
        self.settings = settings or Settings()
        self.data_dir = data_dir or default_data_dir()
        self.store = VoiceStore(os.path.join(self.data_dir, "voices"))
        self.client = EngineClient(self)
        self.player = Player(self.client.sample_rate, self.settings.output_device or None)
        self.controller = PlaybackController(self.client, self.player, self)
        self.last_error = ""
        self.setWindowTitle("Chatterbox Studio")
        if os.path.exists(app_icon()):
            self.setWindowIcon(QIcon(app_icon()))
        self.tour_enabled = False  # the app (app.qt.gui.run) shows the first-run tour; tests and tools do not
        self.setAcceptDrops(True)
        self._build()
        self.models = ModelActions(self)
        self.voices = VoiceActions(self)
        self.language = LanguagePicker(self)
        self.script = ScriptActions(self)
        self.takes = TakeActions(self)
        self.books = BookActions(self)
        self._fill_menu()
        self._connect()
        self.statusBar().addWidget(self.models.status_label, 1)
        self.statusBar().addPermanentWidget(self.status_engine)
        self.api_server = ServerPanel(self)  # the local API server: status-bar button, preferences
        self.opener = FileOpener(self)
        self._drop_filter = DropFilter(self)  # after _build: it filters the widgets built there
        if not self.settings.geometry.isEmpty():
            self.restoreGeometry(self.settings.geometry)
        else:
            self.resize(1280, 800)
        if not self.settings.window_state.isEmpty():
            self.restoreState(self.settings.window_state)
        self.editor.set_text(self.settings.script or SAMPLE_SCRIPT)
        self._model_changed(None)
        self.books.resume_saved()
        freeze_heap()

    # --- construction --------------------------------------------------------------------------------

    def _build(self) -> None:
        self.toolbar = MainToolbar(self)
        self.addToolBar(self.toolbar)
        central = QWidget()
        outer = QVBoxLayout(central)
        outer.setContentsMargins(12, 10, 12, 12)
        outer.setSpacing(10)
        self.banner = ErrorBanner()
        outer.addWidget(self.banner)
        self.sampling_panel = SamplingPanel(self.settings)
        self.sampling_panel.setVisible(self.settings.sampling_panel_open)
        outer.addWidget(self.sampling_panel)
        self.stack = QStackedWidget()
        outer.addWidget(self.stack, 1)

        studio = QWidget()
        s_lay = QVBoxLayout(studio)
        s_lay.setContentsMargins(0, 0, 0, 0)
        s_lay.setSpacing(10)
        split = QSplitter(Qt.Horizontal)
        split.setChildrenCollapsible(False)
        self.library = VoiceLibraryPanel(self.store)
        self.library.setMinimumWidth(240)
        self.editor = ScriptEditor()
        split.addWidget(self.library)
        split.addWidget(self.editor)
        split.setStretchFactor(0, 0)
        split.setStretchFactor(1, 1)
        split.setSizes([290, 900])
        s_lay.addWidget(split, 1)
        self.transport = Transport()
        s_lay.addWidget(self.transport)
        self.stack.addWidget(studio)
        self.studio_page = studio

        self.lab = VoiceLabView(self.client, self.store)
        self.stack.addWidget(self.lab)
        self.setCentralWidget(central)
        self.status_engine = QLabel("Idle")
        self.refresh_icons()

    def _fill_menu(self) -> None:
        m = self.toolbar.menu
        m.addAction("Models…", lambda: self.models.open_manager())
        m.addAction("Add voice from a recording…", lambda: self.voices.add_voice())
        self.books.add_menu(m)
        m.addAction("Re-voice a recording…", lambda: self.revoice_recording())
        m.addSeparator()
        self.models.add_menus(m)
        appearance = m.addMenu("Appearance")
        for name in ("dark", "light"):
            appearance.addAction(name.capitalize(), lambda n=name: self.set_theme(n))
        m.addAction("Local API server…", lambda: self.api_server.open_dialog())
        m.addAction("Check a recording for a watermark…", lambda: self.check_watermark())
        m.addSeparator()
        m.addAction("Export take…", lambda: self.takes.export_take())
        self.script.add_menu(m)

    def refresh_icons(self) -> None:
        self.toolbar.refresh_icons()
        self.library.refresh_icons()
        self.editor.refresh_icons()
        self.transport.refresh_icons()
        self.lab.refresh_icons()

    def _connect(self) -> None:
        c, ed, tb = self.controller, self.editor, self.toolbar
        ed.playRequested.connect(self.script.play_text)
        ed.regenerateRequested.connect(self.script.regenerate_at)
        ed.liveToggled.connect(self._live_toggled)
        ed.live.sentenceTyped.connect(lambda s, a, b: c.say_live(s, a, b, self.voices.voice(), self.params()))
        QShortcut(QKeySequence(Qt.Key_Escape), self, activated=c.stop)
        c.sentenceHeard.connect(ed.highlight)
        c.error.connect(self.show_error)
        tb.preset_combo.setCurrentText(self.settings.preset if self.settings.preset in PRESETS else "Custom")
        tb.preset_combo.currentTextChanged.connect(self.sampling_panel.apply_preset)
        # A preset's CFM steps and voice prompt are the readied voice's key: ready it again.
        tb.preset_combo.currentTextChanged.connect(lambda _name: self.voices.prepare_stream())
        self.sampling_panel.presetChanged.connect(self._preset_shown)
        tb.sampling_button.setChecked(self.settings.sampling_panel_open)
        tb.sampling_button.toggled.connect(self._toggle_sampling)
        self.sampling_panel.watermarkToggled.connect(self._watermark_toggled)
        self.lab.backRequested.connect(self.show_studio)
        self.lab.revoiceRequested.connect(self.revoice_recording)
        self.lab.voiceSaved.connect(self.voices.saved)
        self.lab.playAudio.connect(self.preview_audio)
        self.lab.stopAudio.connect(c.stop)
        self.lab.speakRequested.connect(
            lambda text, voice, name: c.play(text, 0, voice, self.params(), name, in_history=False))
        self.lab.error.connect(lambda t: self.statusBar().showMessage(t, 8000))
        self.client.modelChanged.connect(self._model_changed)
        self.client.busyChanged.connect(lambda b: self.status_engine.setText("Working…" if b else "Idle"))

    def _model_changed(self, info) -> None:
        self.models.show_model(info)
        if info:
            variant = info.get("variant", "")
            self.library.set_builtin_name(f"Built-in ({VARIANT_NAMES.get(variant, variant or 'model')})", variant)
            self.editor.tags.set_tags(self.client.expression_tags)
            self.sampling_panel.set_defaults(self.client.defaults, self.client.presets)
            self.player.rate = self.client.sample_rate
            freeze_heap()
            self.voices.prepare_stream()
        self.language.fill(self.client.languages if info else {})
        self.voices.sync_combo()

    # --- what the parts share ------------------------------------------------------------------------

    def load_model(self, path: str):
        return self.models.load_model(path)

    def choose_model(self, first_run: bool = False):
        return self.models.choose_model(first_run)

    def params(self) -> dict:
        """Engine options for the next synthesis: the sampling panel plus the preset's chunking,
        and a Multilingual model's language."""
        p = {**self.sampling_panel.params(), **self.sampling_panel.stream_options()}
        if self.client.languages:
            p["language"] = self.language.language()
        return p

    def open_files(self, paths):
        """Files given to the app (command line, double-click, drop, a second launch), each opened
        for what it is: a model, a voice, a recording or a script (app.qt.file_opener)."""
        self.raise_()
        self.activateWindow()
        return self.opener.open(paths)

    def show_tour(self):
        """The first-run tour, once (the app only: app.qt.gui.run turns it on)."""
        if not self.tour_enabled:
            return None
        from app.qt.tour import show_once

        return show_once(self)

    def open_voice_lab(self, path: str):
        self.stack.setCurrentWidget(self.lab)
        return self.lab.open_file(path)

    def revoice_recording(self, path: str | None = None):
        """The Re-voice dialog for a recording (chosen here when not given); returns it."""
        from app.qt.revoice_dialog import RevoiceDialog

        if not path:
            start = self.settings.last_open_dir or os.path.expanduser("~")
            path, _ = QFileDialog.getOpenFileName(self, "Re-voice a recording", start)
            if not path:
                return None
        dialog = RevoiceDialog(self, path)
        dialog.show()
        return dialog

    def show_studio(self) -> None:
        self.stack.setCurrentWidget(self.studio_page)

    def preview_audio(self, samples) -> None:
        """Play audio that is not a take (the Voice Lab's A/B preview)."""
        self.controller.stop()
        self.player.reset()
        self.player.begin_segment(0.0)
        self.player.feed(samples)
        self.player.end_segment()

    def _live_toggled(self, on: bool) -> None:
        if on:
            self.controller.start_live(self.voices.name())
        else:
            self.controller.stop_live()

    def _preset_shown(self, name: str) -> None:
        combo = self.toolbar.preset_combo
        combo.blockSignals(True)
        combo.setCurrentText(name)
        combo.blockSignals(False)
        self.voices.prepare_stream()

    def check_watermark(self, path: str | None = None):
        """The watermark check dialog (one, kept); with `path`, that file checked at once."""
        from app.qt.watermark_dialog import WatermarkCheckDialog

        if getattr(self, "watermark_dialog", None) is None:
            self.watermark_dialog = WatermarkCheckDialog(self, self.settings.last_open_dir)
        self.watermark_dialog.show()
        self.watermark_dialog.raise_()
        if path:
            self.watermark_dialog.check(path)
        return self.watermark_dialog

    def _watermark_toggled(self, on: bool) -> None:
        """The setting; the loaded engine follows it for every later take (and the API server)."""
        self.settings.watermark = on
        if self.client.info is not None:
            def bad(e):
                self.sampling_panel.show_watermark(not on)
                self.settings.watermark = not on
                self.show_error(f"Cannot turn the watermark {'on' if on else 'off'}: {error_text(e)}")

            self.client.set_watermark(on, failure=bad)
        self.api_server.apply()

    def _toggle_sampling(self, on: bool) -> None:
        self.sampling_panel.setVisible(on)
        self.settings.sampling_panel_open = on

    def set_theme(self, name: str) -> None:
        self.settings.theme = name
        theme.apply(QApplication.instance(), name)
        self.refresh_icons()
        for wf in self.findChildren(WaveformView):
            wf.redraw()
        self.update()

    # --- errors, drops, closing --------------------------------------------------------------------

    def show_error(self, text: str, action=None) -> None:
        self.last_error = text
        self.banner.show_message(text, action)
        self.statusBar().showMessage(text.splitlines()[0][:160], 10000)

    def dragEnterEvent(self, e):
        if dropped_files(e.mimeData()):
            e.acceptProposedAction()

    def dropEvent(self, e):
        paths = dropped_files(e.mimeData())
        if paths:
            e.acceptProposedAction()
            self.open_files(paths)

    def closeEvent(self, e):
        self.settings.geometry = self.saveGeometry()
        self.settings.window_state = self.saveState()
        self.settings.script = self.editor.text()
        self.settings.sync()
        self.controller.stop()
        self.player.stop()
        self.api_server.shutdown()
        self.models.shutdown()  # a model download stops at its next chunk, kept for the next start
        self.hide()  # gone at once; the engine thread still finishes its current chunk
        QApplication.processEvents()
        self.client.shutdown()
        super().closeEvent(e)
