"""The main window: toolbar (model, voice, preset, sampling panel), voice library, script editor,
transport, the Voice Lab page, drag and drop, and readable error messages."""

from __future__ import annotations

import gc
import os

from PySide6.QtCore import QEvent, QObject, QStandardPaths, Qt, QTimer
from PySide6.QtGui import QAction, QActionGroup, QIcon, QKeySequence, QShortcut, QTextCursor
from PySide6.QtWidgets import (
    QApplication,
    QComboBox,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMenu,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QStackedWidget,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.qt import theme
from app.qt.background import BackgroundOp, error_text
from app.qt.engine_worker import EngineClient
from app.qt.icons import icon
from app.qt.playback import PlaybackController, estimate_seconds
from app.core.player import Player, output_devices
from app.qt.sampling_panel import PRESETS, SamplingPanel
from app.qt.script_editor import SAMPLE_SCRIPT, ScriptEditor
from app.qt.server_panel import ServerPanel
from app.qt.settings import Settings
from app.core.take import EXPORT_FORMATS, export_audio
from app.qt.transport import Transport
from app.qt.voice_lab_view import VoiceLabView
from app.qt.voice_library import BUILTIN, VARIANT_NAMES, VoiceLibraryPanel, VoiceStore

AUDIO_EXTENSIONS = {".wav", ".flac", ".mp3", ".ogg", ".opus", ".m4a", ".aac", ".wma", ".aiff", ".aif", ".mp4",
                    ".mkv", ".mov", ".webm", ".avi", ".m4v", ".caf", ".ac3", ".amr"}
SAMPLE_SENTENCE = "Hello! This is a short sample of my voice."
# resources/ sits beside the app package (site-packages or the frozen app's folder): app/qt/ -> two levels up.
APP_ICON = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "resources",
                        "chatterbox-studio.svg")


def default_data_dir() -> str:
    return QStandardPaths.writableLocation(QStandardPaths.AppDataLocation) or os.path.expanduser(
        "~/.local/share/chatterbox-studio")


def dropped_media(mime) -> str | None:
    """The first local audio/video file in a drag's data, if any."""
    if not mime.hasUrls():
        return None
    for url in mime.urls():
        if url.isLocalFile():
            path = url.toLocalFile()
            if os.path.splitext(path)[1].lower() in AUDIO_EXTENSIONS and os.path.isfile(path):
                return path
    return None


class _DropFilter(QObject):
    """Catches audio/video drops on the window's widgets that take drops themselves (the editor
    would insert the path). Installed on those widgets only, never on the application: an
    application-wide Python filter sees every event of the app (paints, timers), measured as a
    quarter of the GUI thread's CPU time. Drops elsewhere reach MainWindow.dropEvent."""

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        for w in window.findChildren(QWidget):
            if w.acceptDrops():
                w.installEventFilter(self)

    def eventFilter(self, obj, e):
        t = e.type()
        if t in (QEvent.DragEnter, QEvent.DragMove, QEvent.Drop) and isinstance(obj, QWidget) \
                and obj.window() is self.window:
            path = dropped_media(e.mimeData())
            if path:
                e.acceptProposedAction()
                if t == QEvent.Drop:
                    self.window.open_voice_lab(path)
                return True
        return False


class ErrorBanner(QFrame):
    def __init__(self, parent=None):
        super().__init__(parent)
        self.setObjectName("Card")
        lay = QHBoxLayout(self)
        lay.setContentsMargins(12, 8, 8, 8)
        self.label = QLabel("")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextSelectableByMouse)
        lay.addWidget(self.label, 1)
        self.action = QPushButton()
        self.action.hide()
        lay.addWidget(self.action)
        close = QToolButton()
        close.setText("✕")
        close.setAutoRaise(True)
        close.clicked.connect(self.hide)
        lay.addWidget(close)
        self._slot = None
        self.hide()

    def show_message(self, text: str, action: tuple[str, object] | None = None) -> None:
        self.label.setStyleSheet(f"color: {theme.colors().error};")
        self.label.setText(text)
        if self._slot is not None:
            self.action.clicked.disconnect(self._slot)
            self._slot = None
        if action:
            self.action.setText(action[0])
            self._slot = action[1]
            self.action.clicked.connect(self._slot)
            self.action.show()
        else:
            self.action.hide()
        self.show()


def device_label(d: dict) -> str:
    """A device as the menu shows it: "cuda:0 · NVIDIA H200 · 139 GiB"."""
    parts = [d["id"], d.get("description") or d.get("name") or ""]
    if d.get("type") != "cpu" and d.get("memory_total"):
        parts.append(f"{d['memory_total'] / 2**30:.0f} GiB")
    return " · ".join(p for p in parts if p)


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
        self.current_take = None
        self.setWindowTitle("Chatterbox Studio")
        if os.path.exists(APP_ICON):
            self.setWindowIcon(QIcon(APP_ICON))
        self.setAcceptDrops(True)
        self._build()
        self._connect()
        self.api_server = ServerPanel(self)  # the local API server: status-bar button, preferences
        self._drop_filter = _DropFilter(self)  # after _build: it filters the widgets built there
        self._wave_dirty = False
        self._wave_timer = QTimer(self)
        self._wave_timer.setInterval(150)
        self._wave_timer.timeout.connect(self._refresh_wave)
        self._wave_timer.start()
        if not self.settings.geometry.isEmpty():
            self.restoreGeometry(self.settings.geometry)
        else:
            self.resize(1280, 800)
        if not self.settings.window_state.isEmpty():
            self.restoreState(self.settings.window_state)
        self.editor.set_text(self.settings.script or SAMPLE_SCRIPT)
        self._model_changed(None)
        freeze_heap()


    # --- construction --------------------------------------------------------------------------------

    def _build(self) -> None:
        tb = self.addToolBar("Main")
        tb.setObjectName("MainToolbar")
        tb.setMovable(False)
        tb.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        self.model_button = QToolButton()
        self.model_button.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        self.model_button.setToolTip("The model in use: click to open or convert another")
        self.model_button.clicked.connect(lambda: self.choose_model())
        tb.addWidget(self.model_button)
        tb.addSeparator()
        tb.addWidget(QLabel("Voice"))
        self.voice_combo = QComboBox()
        self.voice_combo.setMinimumWidth(210)  # "Built-in (Multilingual)" whole
        self.voice_combo.setToolTip("The voice that speaks the script")
        tb.addWidget(self.voice_combo)
        # A Multilingual model's language: auto-detect (the guess shown in the first entry) or fixed.
        self.language_combo = QComboBox()
        self.language_combo.setMinimumWidth(150)
        self.language_combo.setToolTip("The language the script is read in; Auto guesses it from the text's script")
        self.language_actions = [tb.addWidget(QLabel("Language")), tb.addWidget(self.language_combo)]
        tb.addWidget(QLabel("Quality"))
        self.preset_combo = QComboBox()
        self.preset_combo.addItems(list(PRESETS) + ["Custom"])
        self.preset_combo.setToolTip("Quality: the reference model's steps and whole voice prompt. Low latency: "
                                     "speaks sooner (one CFM step, a shorter voice prompt), with a little less "
                                     "detail. Either streams against the voice prompt prepared once.")
        tb.addWidget(self.preset_combo)
        self.sampling_button = QToolButton()
        self.sampling_button.setText("Sampling")
        self.sampling_button.setCheckable(True)
        self.sampling_button.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        self.sampling_button.setToolTip("Show the sampling settings and the seed")
        tb.addWidget(self.sampling_button)
        spacer = QWidget()
        spacer.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Preferred)
        tb.addWidget(spacer)
        self.add_voice_action = QAction("Add voice…", self)
        self.add_voice_action.triggered.connect(lambda: self.add_voice())
        tb.addAction(self.add_voice_action)
        self.menu_button = QToolButton()
        self.menu_button.setText("⋯")
        self.menu_button.setPopupMode(QToolButton.InstantPopup)
        self.menu_button.setMenu(self._build_menu())
        tb.addWidget(self.menu_button)

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

        sb = self.statusBar()
        self.status_model = QLabel("No model")
        self.status_engine = QLabel("Idle")
        sb.addWidget(self.status_model, 1)
        sb.addPermanentWidget(self.status_engine)
        self.refresh_icons()
        self._sync_voice_combo()

    def _build_menu(self) -> QMenu:
        m = QMenu(self)
        m.addAction("Open model…", lambda: self.choose_model())
        m.addAction("Add voice from a recording…", lambda: self.add_voice())
        m.addSeparator()
        self.device_menu = m.addMenu("Audio output")
        self.device_menu.aboutToShow.connect(self._fill_device_menu)
        self.compute_menu = m.addMenu("Compute device")
        self.compute_menu.aboutToShow.connect(self._fill_compute_menu)
        self.threads_menu = m.addMenu("CPU threads")
        group = QActionGroup(self)
        for n in (0, 1, 2, 4, 8, 16):
            a = self.threads_menu.addAction("Automatic" if n == 0 else str(n))
            a.setCheckable(True)
            a.setChecked(self.settings.threads == n)
            a.triggered.connect(lambda _c=False, n=n: self.set_threads(n))
            group.addAction(a)
        theme_menu = m.addMenu("Appearance")
        for name in ("dark", "light"):
            theme_menu.addAction(name.capitalize(), lambda n=name: self.set_theme(n))
        m.addAction("Local API server…", lambda: self.api_server.open_dialog())
        m.addSeparator()
        m.addAction("Export take…", lambda: self.export_take())
        script = m.addMenu("Script")
        script.addAction("Cast…", lambda: self.edit_cast())
        script.addAction("Pronunciations…", lambda: self.edit_lexicon())
        self.assign_menu = script.addMenu("Speak selected lines with")
        self.assign_menu.aboutToShow.connect(self._fill_assign_menu)
        self.best_of_menu = script.addMenu("Best of N takes")
        best = QActionGroup(self)
        for n in (1, 2, 3, 4, 5):
            a = self.best_of_menu.addAction("1 (no extra takes)" if n == 1 else f"Best of {n}")
            a.setCheckable(True)
            a.setChecked(self.settings.best_of == n)
            a.triggered.connect(lambda _c=False, n=n: setattr(self.settings, "best_of", n))
            best.addAction(a)
        script.addAction("Export script…", lambda: self.export_script())
        return m

    def _fill_device_menu(self) -> None:
        self.device_menu.clear()
        group = QActionGroup(self.device_menu)
        for name in [""] + output_devices():
            a = self.device_menu.addAction(name or "System default")
            a.setCheckable(True)
            a.setChecked(name == self.settings.output_device)
            a.triggered.connect(lambda _c=False, n=name: self.set_output_device(n))
            group.addAction(a)

    def refresh_icons(self) -> None:
        self.model_button.setIcon(icon("model"))
        self.sampling_button.setIcon(icon("sliders"))
        self.add_voice_action.setIcon(icon("add"))
        self.library.refresh_icons()
        self.editor.refresh_icons()
        self.transport.refresh_icons()
        self.lab.refresh_icons()

    def _connect(self) -> None:
        c, ed, tr, lib = self.controller, self.editor, self.transport, self.library
        ed.playRequested.connect(self.play_text)
        ed.regenerateRequested.connect(self.regenerate_at)
        ed.liveToggled.connect(self._live_toggled)
        ed.live.sentenceTyped.connect(lambda s, a, b: c.say_live(s, a, b, self.voice_arg(), self.params()))
        ed.takeActivated.connect(self.show_take)
        tr.playClicked.connect(self.transport_play)
        tr.stopClicked.connect(c.stop)
        tr.exportClicked.connect(lambda: self.export_take())
        QShortcut(QKeySequence(Qt.Key_Escape), self, activated=c.stop)
        c.takeStarted.connect(self._take_started)
        c.takeChanged.connect(lambda _t: setattr(self, "_wave_dirty", True))
        c.takeFinished.connect(self._take_finished)
        c.sentenceHeard.connect(ed.highlight)
        c.position.connect(tr.set_time)
        c.stateChanged.connect(self._state_changed)
        c.statusText.connect(tr.status.setText)
        c.error.connect(self.show_error)
        lib.voiceChosen.connect(self._voice_chosen)
        lib.addRequested.connect(lambda: self.add_voice())
        lib.sampleRequested.connect(self.play_sample)
        lib.changed.connect(self._sync_voice_combo)
        lib.error.connect(self.show_error)
        self.voice_combo.currentIndexChanged.connect(self._voice_combo_changed)
        self.language_combo.currentIndexChanged.connect(self._language_chosen)
        self._guess_timer = QTimer(self, singleShot=True, interval=400)
        self._guess_timer.timeout.connect(self._show_language_guess)
        ed.edit.textChanged.connect(self._guess_timer.start)
        self.preset_combo.setCurrentText(self.settings.preset if self.settings.preset in PRESETS else "Custom")
        self.preset_combo.currentTextChanged.connect(self.sampling_panel.apply_preset)
        self.sampling_panel.presetChanged.connect(self._preset_shown)
        self.sampling_button.setChecked(self.settings.sampling_panel_open)
        self.sampling_button.toggled.connect(self._toggle_sampling)
        self.lab.backRequested.connect(self.show_studio)
        self.lab.voiceSaved.connect(self._voice_saved)
        self.lab.playAudio.connect(self.preview_audio)
        self.lab.stopAudio.connect(c.stop)
        self.lab.speakRequested.connect(
            lambda text, voice, name: c.play(text, 0, voice, self.params(), name, in_history=False))
        self.lab.error.connect(lambda t: self.statusBar().showMessage(t, 8000))
        self.client.modelChanged.connect(self._model_changed)
        self.client.busyChanged.connect(lambda b: self.status_engine.setText("Working…" if b else "Idle"))
        lib.select(self.settings.voice if os.path.exists(self.settings.voice or "") else BUILTIN)

    # --- model ---------------------------------------------------------------------------------------

    def load_model(self, path: str):
        self.status_model.setText(f"Loading {os.path.basename(path)}…")
        self.model_button.setText(f"Loading {os.path.basename(path)}…")

        def ok(info):
            self.settings.model_path = path
            self.settings.model_choice_made = True
            self.banner.hide()

        def bad(e):
            msg = error_text(e)
            if path not in msg:
                msg = f"{path}: {msg}"
            self.show_error(f"Could not load the model. {msg}", action=("Choose model…", lambda: self.choose_model()))

        return self.client.load_model(path, self.settings.threads, self.settings.device, success=ok, failure=bad)

    def choose_model(self, first_run: bool = False):
        """Open the model dialog (window-modal, no nested event loop); returns it."""
        from app.qt.model_dialog import ModelDialog

        dlg = ModelDialog(os.path.join(self.data_dir, "models"), self, first_run=first_run)
        self.model_dialog = dlg

        def finished(result: int) -> None:
            if result and dlg.model_path:
                self.load_model(dlg.model_path)
            elif first_run:
                self.settings.model_choice_made = True  # asked once; the model button asks again

        dlg.finished.connect(finished)
        dlg.open()
        return dlg

    def _model_changed(self, info) -> None:
        if info:
            variant = info.get("variant", "")
            name = f"{VARIANT_NAMES.get(variant, variant or '?')} · {info.get('quantization', '?')}"
            self.model_button.setText(name)
            self.status_model.setText(f"{os.path.basename(info.get('path', ''))} · {info.get('device', 'cpu')} · "
                                      f"{info.get('threads', '?')} threads · ggml {info.get('ggml_version', '')}")
            if info.get("device_note"):  # the device asked for could not be used: say so, it runs anyway
                self.statusBar().showMessage(info["device_note"], 15000)
            self.library.set_builtin_name(f"Built-in ({VARIANT_NAMES.get(variant, variant or 'model')})", variant)
            self.editor.tags.set_tags(self.client.expression_tags)
            self.sampling_panel.set_defaults(self.client.defaults, self.client.presets)
            self.player.rate = self.client.sample_rate
            freeze_heap()
            self._prepare_stream()
        else:
            self.model_button.setText("Choose a model…")
            self.status_model.setText("No model loaded")
        self._fill_languages(self.client.languages if info else {})
        self._sync_voice_combo()

    # --- languages (Multilingual models) ------------------------------------------------------------

    def _fill_languages(self, languages: dict) -> None:
        """Show the language picker for a model that has languages: Auto first, then by name."""
        for a in self.language_actions:
            a.setVisible(bool(languages))
        self.language_combo.blockSignals(True)
        self.language_combo.clear()
        if languages:
            self.language_combo.addItem("Auto", "")
            for code, name in sorted(languages.items(), key=lambda kv: kv[1]):
                self.language_combo.addItem(f"{name} ({code})", code)
            self.language_combo.setCurrentIndex(max(0, self.language_combo.findData(self.settings.language)))
        self.language_combo.blockSignals(False)
        self._show_language_guess()

    def _language_chosen(self, i: int) -> None:
        code = self.language_combo.itemData(i)
        if code is not None:
            self.settings.language = code
            self._show_language_guess()

    def language_arg(self) -> str | None:
        """The language for the next synthesis: None for Auto (the engine guesses per text) or
        for a model without languages."""
        code = self.settings.language
        return code if code and code in self.client.languages else None

    def _show_language_guess(self) -> None:
        """Auto's entry names the language the engine would pick for the script as it stands."""
        if not self.client.languages or self.language_combo.count() == 0:
            return
        guess = self.client.detect_language(self.editor.text())
        name = self.client.languages.get(guess or "", "")
        self.language_combo.setItemText(0, f"Auto · {name}" if name else "Auto")

    def _fill_compute_menu(self) -> None:
        from engine_native import devices

        self.compute_menu.clear()
        group = QActionGroup(self.compute_menu)
        for key, text in [("auto", "Automatic (the fastest present)")] + [(d["id"], device_label(d)) for d in devices()]:
            a = self.compute_menu.addAction(text)
            a.setCheckable(True)
            a.setChecked(self.settings.device == key)
            a.triggered.connect(lambda _c=False, k=key: self.set_device(k))
            group.addAction(a)

    def set_device(self, device: str) -> None:
        """Remember the compute device and load the model on it (if one is loaded)."""
        self.settings.device = device
        if self.settings.model_path and self.client.info:
            self.load_model(self.settings.model_path)

    def set_threads(self, n: int) -> None:
        self.settings.threads = n
        if self.settings.model_path and self.client.info:
            self.load_model(self.settings.model_path)

    def set_output_device(self, name: str) -> None:
        self.settings.output_device = name
        self.player.set_device(name or None)

    def set_theme(self, name: str) -> None:
        self.settings.theme = name
        theme.apply(QApplication.instance(), name)
        self.refresh_icons()
        from app.qt.waveform import WaveformView

        for wf in self.findChildren(WaveformView):
            wf._invalidate()
        self.update()

    # --- voices --------------------------------------------------------------------------------------

    def voice_arg(self) -> str:
        v = self.settings.voice
        return v if v and os.path.exists(v) else ""

    def voice_name(self) -> str:
        return self.library.name_of(self.voice_arg())

    def _sync_voice_combo(self) -> None:
        self.voice_combo.blockSignals(True)
        self.voice_combo.clear()
        for e in self.library.entries():
            self.voice_combo.addItem(icon("model" if not e.path else "voice"), e.name, e.path)
        i = self.voice_combo.findData(self.voice_arg())
        self.voice_combo.setCurrentIndex(max(0, i))
        self.voice_combo.blockSignals(False)

    def _voice_combo_changed(self, i: int) -> None:
        path = self.voice_combo.itemData(i)
        if path is not None:
            self.library.select(path)

    def _prepare_stream(self, *_) -> None:
        """The chosen voice readied for streaming with the current settings, in the background
        (Engine.prepare_stream): its first Play then speaks as soon as later ones do."""
        if self.client.info is not None:
            self.client.prepare_stream(self.voice_arg(), self.params())

    def _voice_chosen(self, path: str) -> None:
        changed = path != self.settings.voice
        self.settings.voice = path
        if changed:
            self._prepare_stream()
        i = self.voice_combo.findData(path)
        if i >= 0 and i != self.voice_combo.currentIndex():
            self.voice_combo.blockSignals(True)
            self.voice_combo.setCurrentIndex(i)
            self.voice_combo.blockSignals(False)

    def _voice_saved(self, path: str) -> None:
        self.library.reload(select=path)
        self._sync_voice_combo()
        self.statusBar().showMessage(f"Saved {os.path.basename(path)} to the library", 6000)

    def add_voice(self, path: str | None = None) -> None:
        if path is None:
            exts = " ".join(f"*{e}" for e in sorted(AUDIO_EXTENSIONS))
            path, _ = QFileDialog.getOpenFileName(self, "Clone a voice from a recording",
                                                  self.settings.last_open_dir or os.path.expanduser("~"),
                                                  f"Audio and video ({exts});;All files (*)")
            if not path:
                return
        self.settings.last_open_dir = os.path.dirname(path)
        self.open_voice_lab(path)

    def open_voice_lab(self, path: str):
        self.stack.setCurrentWidget(self.lab)
        return self.lab.open_file(path)

    def show_studio(self) -> None:
        self.stack.setCurrentWidget(self.studio_page)

    def play_sample(self, path: str) -> None:
        self.editor.live_button.setChecked(False)
        self.controller.play(SAMPLE_SENTENCE, 0, path, self.params(), self.library.name_of(path), in_history=False)

    def preview_audio(self, samples) -> None:
        self.controller.stop()
        self.player.reset()
        self.player.begin_segment(0.0)
        self.player.feed(samples)
        self.player.end_segment()

    # --- synthesis -----------------------------------------------------------------------------------

    def params(self) -> dict:
        """Engine options for the next synthesis: the sampling panel plus the preset's chunking,
        and a Multilingual model's language."""
        p = {**self.sampling_panel.params(), **self.sampling_panel.stream_options()}
        if self.client.languages:
            p["language"] = self.language_arg()
        return p

    def play_text(self, text: str, offset: int):
        if self.controller.live:
            self.editor.live_button.setChecked(False)
        return self.controller.play(text, offset, self.voice_arg(), self.params(), self.voice_name(),
                                    script=self.script_options(text))

    # --- scripts: cast, lexicon, best-of, export (app.qt.script_panels) ------------------------------

    lexicon_path: str | None = None  # None: the global lexicon (the CLI's too); tests point it elsewhere

    def script_options(self, text: str) -> dict | None:
        from app.qt.script_panels import load_cast, load_global_lexicon, script_options

        try:
            lexicon = load_global_lexicon(self.lexicon_path)
        except Exception as e:  # noqa: BLE001 - a broken lexicon file is reported, the script still plays
            self.statusBar().showMessage(f"Lexicon not used: {error_text(e)}", 8000)
            lexicon = None
        return script_options(text, load_cast(self.settings, self.editor.text()), lexicon, self.settings.best_of)

    def edit_cast(self):
        from app.qt.script_panels import CastDialog, load_cast, save_cast
        from engine_native.script import speaker_names

        text = self.editor.text()
        dlg = CastDialog(speaker_names(text), self.library.entries(), load_cast(self.settings, text), self)
        self.cast_dialog = dlg
        dlg.accepted.connect(lambda: save_cast(self.settings, text, dlg.cast()))
        dlg.open()
        return dlg

    def regenerate_at(self, pos: int) -> bool:
        """Regenerate the sentence at `pos` in its own voice (the cast's for its speaker) and
        with the lexicon, as the take was rendered."""
        from engine_native.script import speaker_at

        text, voice, lexicon = self.editor.text(), self.voice_arg(), None
        opts = self.script_options(text)
        if opts is not None:
            voice = opts["voices"].get(speaker_at(text, pos), voice)
            lexicon = opts["lexicon"]
        return self.controller.regenerate(pos, voice, self.params(), lexicon=lexicon)

    def _fill_assign_menu(self) -> None:
        self.assign_menu.clear()
        self.assign_menu.addAction(self.builtin_voice_label(), lambda: self.assign_selection("", self.builtin_voice_label()))
        for e in self.library.entries():
            self.assign_menu.addAction(e.name, lambda p=e.path, n=e.name: self.assign_selection(p, n))

    def builtin_voice_label(self) -> str:
        return self.client.builtin_voice_name or "Built-in"

    def assign_selection(self, voice_path: str, voice_name: str) -> str:
        """Give the selected lines (or the cursor's line) a speaker prefix named after the voice,
        and cast that name to the voice; one undo step. Returns the speaker name."""
        from app.qt.script_panels import load_cast, save_cast
        from engine_native.script import assign_speaker, speaker_label

        name = speaker_label(voice_name)
        cur = self.editor.edit.textCursor()
        text = self.editor.text()
        start, end = cur.selectionStart(), cur.selectionEnd()
        if end > start and text[end - 1] == "\n":
            end -= 1  # a selection that ends at a line's start leaves that line out
        a = text.rfind("\n", 0, start) + 1
        b = text.find("\n", end)
        b = len(text) if b < 0 else b
        cur.setPosition(a)
        cur.setPosition(b, QTextCursor.KeepAnchor)
        cur.insertText(assign_speaker(text[a:b], name))
        new_text = self.editor.text()
        cast = load_cast(self.settings, new_text)
        cast[name] = voice_path
        save_cast(self.settings, new_text, cast)
        self.statusBar().showMessage(f"Lines spoken by {voice_name} (as “{name}” in the cast).", 6000)
        return name

    def edit_lexicon(self, path: str | None = None):
        from app.qt.script_panels import LexiconEditor

        dlg = LexiconEditor(path or self.lexicon_path, self)
        self.lexicon_dialog = dlg
        dlg.hearRequested.connect(lambda say: self.controller.play(say, 0, self.voice_arg(), self.params(),
                                                                   self.voice_name(), in_history=False))
        dlg.open()
        return dlg

    def export_script(self, path: str | None = None):
        from app.qt.script_panels import export_script

        text = self.editor.text()
        if not text.strip():
            self.show_error("Nothing to export: the script is empty.")
            return None
        if path is None:
            filters = ";;".join(f"{label} (*.{ext})" for ext, (label, _s) in EXPORT_FORMATS.items())
            start = os.path.join(self.settings.last_open_dir or os.path.expanduser("~"), "script.wav")
            path, _ = QFileDialog.getSaveFileName(self, "Export script", start, filters)
            if not path:
                return None
        opts = self.script_options(text) or {}
        voices = {None: self.voice_arg(), **opts.get("voices", {})}

        def ok(r):
            self.statusBar().showMessage(f"Exported {r['seconds']:.1f} s to {r['path']}", 8000)

        def bad(e):
            from app.qt.engine_worker import Cancelled

            if isinstance(e, Cancelled):
                self.statusBar().showMessage("Export cancelled; exporting again resumes where it stopped", 8000)
            else:
                self.show_error(f"Export failed: {error_text(e)}")

        self.script_export = export_script(
            self.client, text, path, voices=voices, params={**self.params(), **self.controller.stream_options},
            lexicon=opts.get("lexicon"), best_of=self.settings.best_of, speakers=opts.get("speakers"),
            model_path=self.settings.model_path, parent=self, success=ok, failure=bad)
        return self.script_export

    def transport_play(self) -> None:
        """Replay the current take; without one, synthesize the script (or the selection)."""
        take = self.current_take
        if take is not None and take.complete and take.frames > 0 and not self.controller.live:
            self.controller.replay(take)
        else:
            self.editor.request_play()

    def _live_toggled(self, on: bool) -> None:
        if on:
            self.controller.start_live(self.voice_name())
        else:
            self.controller.stop_live()

    def _take_started(self, take) -> None:
        self.current_take = take
        self.transport.waveform.clear()
        self.transport.waveform.set_audio(take.samples, take.sample_rate,
                                          expected_s=0 if self.controller.live else estimate_seconds(take.text))
        self.transport.export_button.setEnabled(False)

    def _take_finished(self, take) -> None:
        self._refresh_wave()
        self.transport.export_button.setEnabled(take.frames > 0)
        if take.in_history and take.frames > 0:
            if self.controller.live or take.text == "(live typing)":
                take.text = " ".join(s.text for _a, _b, s in take.sentence_ranges())
            self.editor.add_take(take)
            self.editor.set_regen_take(take)
            if take.likeness is None and take.complete:
                self.score_take(take)

    def score_take(self, take, voice=None):
        """The take's likeness to its voice, computed on the engine thread; shown in the history."""
        samples = take.samples.copy()

        def ok(score):
            take.likeness = score
            self.editor.update_take(take)

        return self.client.likeness(samples, self.voice_arg() if voice is None else voice, success=ok,
                                    failure=lambda _e: None)

    def _refresh_wave(self) -> None:
        take = self.current_take
        if take is not None and (self._wave_dirty or self.transport.waveform.n_samples != take.frames):
            self._wave_dirty = False
            w = self.transport.waveform
            expected = 0 if take.complete or self.controller.live else estimate_seconds(take.text)
            w.set_audio(take.samples, take.sample_rate, expected_s=expected)
            w.marks = [a / take.sample_rate for a, _b, _s in take.sentence_ranges()[1:]]
            self.transport.export_button.setEnabled(take.frames > 0 and take.complete)
            if take.complete:
                self.editor.update_take(take)

    def show_take(self, take) -> None:
        self.controller.stop()
        self.current_take = take
        self.controller.take = take
        self._wave_dirty = True
        self._refresh_wave()
        self.transport.set_time(0.0, take.duration, 0.0)
        self.editor.set_regen_take(take)

    def _state_changed(self, state: str) -> None:
        self.transport.set_running(state in ("generating", "playing", "live"))
        self.status_engine.setText({"generating": "Generating…", "playing": "Playing", "live": "Live typing",
                                    "idle": "Idle"}.get(state, state))

    def _preset_shown(self, name: str) -> None:
        self.preset_combo.blockSignals(True)
        self.preset_combo.setCurrentText(name)
        self.preset_combo.blockSignals(False)
        self._prepare_stream()

    def _toggle_sampling(self, on: bool) -> None:
        self.sampling_panel.setVisible(on)
        self.settings.sampling_panel_open = on

    # --- export --------------------------------------------------------------------------------------

    def export_take(self, path: str | None = None):
        take = self.current_take
        if take is None or take.frames == 0:
            self.show_error("There is no take to export yet: play the script first.")
            return None
        if path is None:
            filters = ";;".join(f"{label} (*.{ext})" for ext, (label, _s) in EXPORT_FORMATS.items())
            start = os.path.join(self.settings.last_open_dir or os.path.expanduser("~"), "take.wav")
            path, _ = QFileDialog.getSaveFileName(self, "Export take", start, filters)
            if not path:
                return None
        samples, rate = take.samples.copy(), take.sample_rate

        def ok(_r):
            self.statusBar().showMessage(f"Exported {take.duration:.1f} s to {path}", 8000)

        return BackgroundOp(lambda _rep: export_audio(samples, rate, path), success=ok,
                            failure=lambda e: self.show_error(f"Export failed: {error_text(e)}")).start()

    # --- errors, drops, closing --------------------------------------------------------------------

    def show_error(self, text: str, action=None) -> None:
        self.last_error = text
        self.banner.show_message(text, action)
        self.statusBar().showMessage(text.splitlines()[0][:160], 10000)

    def dragEnterEvent(self, e):
        if dropped_media(e.mimeData()):
            e.acceptProposedAction()

    def dropEvent(self, e):
        path = dropped_media(e.mimeData())
        if path:
            e.acceptProposedAction()
            self.open_voice_lab(path)

    def closeEvent(self, e):
        self.settings.geometry = self.saveGeometry()
        self.settings.window_state = self.saveState()
        self.settings.script = self.editor.text()
        self.settings.sync()
        self.controller.stop()
        self.player.stop()
        self.api_server.shutdown()
        self.hide()  # gone at once; the engine thread still finishes its current chunk
        QApplication.processEvents()
        self.client.shutdown()
        super().closeEvent(e)
