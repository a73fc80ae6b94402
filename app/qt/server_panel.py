"""The "Local API server" of the desktop app: app.server's OpenAI-compatible speech server,
run in-process on its own threads with the app's model file and voice library.

`ServerPanel` owns the server (`ServerHandle`, which loads its own Engine from the same model
file), a status-bar button (state, copy the URL, open the settings) and the preferences dialog
(on/off, port, key, which library voices are exposed). Starting, stopping and restarting
happen off the GUI thread; state changes come back through a Qt signal.
"""

from __future__ import annotations

import os
import secrets
import threading

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QDialog,
    QDialogButtonBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QRadioButton,
    QSpinBox,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from app.qt.settings import Setting
from app.server.config import DEFAULT_PORT, ServerConfig


class ServerPrefs:
    """The server's settings, in the app's QSettings (keys under server/)."""

    _fields: dict[str, Setting] = {}

    enabled = Setting("server/enabled", bool, False)
    port = Setting("server/port", int, DEFAULT_PORT)
    api_key = Setting("server/api_key", str, "")
    all_voices = Setting("server/all_voices", bool, True)
    voices = Setting("server/voices", list, [])  # file stems, when not all_voices

    def __init__(self, qsettings):
        self.qsettings = qsettings


def server_available() -> str | None:
    """None when FastAPI and uvicorn are installed; else what to install."""
    import importlib.util

    if not all(importlib.util.find_spec(m) for m in ("fastapi", "uvicorn")):
        return "The local API server needs FastAPI and uvicorn: pip install 'chatterbox-studio[server]'."
    return None


class ServerController(QObject):
    """Runs at most one server; every blocking step happens on a plain thread."""

    stateChanged = Signal(str, str)  # state ("off", "starting", "running", "failed", "stopping"), detail

    def __init__(self, parent=None):
        super().__init__(parent)
        self.handle = None
        self.state, self.detail = "off", ""
        self._lock = threading.Lock()
        self._generation = 0
        self.stateChanged.connect(self._remember)

    def _remember(self, state: str, detail: str) -> None:
        self.state, self.detail = state, detail

    def start(self, config: ServerConfig) -> None:
        """(Re)start with `config`; returns at once."""
        problem = server_available()
        if problem:
            self.stateChanged.emit("failed", problem)
            return
        from app.server.runner import ServerHandle

        with self._lock:
            self._generation += 1
            gen = self._generation
            old, self.handle = self.handle, None

        def on_state(state: str, detail: str) -> None:  # from the server's thread
            if gen == self._generation:
                self.stateChanged.emit("off" if state == "stopped" else state, detail)

        def run() -> None:
            if old is not None:
                old.stop()
            if gen != self._generation:
                return
            handle = ServerHandle(config, on_state=on_state)
            with self._lock:  # start() only spawns its thread; under the lock, stop() sees it started
                if gen != self._generation:
                    return
                self.handle = handle
                handle.start()

        self.stateChanged.emit("starting", "loading the model")
        threading.Thread(target=run, name="api-server-start", daemon=True).start()

    def stop(self) -> None:
        """Stop serving; returns at once."""
        with self._lock:
            self._generation += 1
            old, self.handle = self.handle, None
        if old is None:
            self.stateChanged.emit("off", "")
            return
        self.stateChanged.emit("stopping", "")

        def run() -> None:
            old.stop()
            self.stateChanged.emit("off", "")

        threading.Thread(target=run, name="api-server-stop", daemon=True).start()


class ServerDialog(QDialog):
    """Preferences: on/off, port, key, exposed voices; the URL to copy."""

    def __init__(self, panel: "ServerPanel", parent=None):
        super().__init__(parent)
        self.panel = panel
        self.setWindowTitle("Local API server")
        self.setMinimumWidth(460)
        prefs = panel.prefs
        lay = QVBoxLayout(self)
        intro = QLabel("An OpenAI-compatible speech endpoint on this computer (POST /v1/audio/speech) for "
                       "Open WebUI, SillyTavern, scripts and other tools. Only this computer can reach it.")
        intro.setWordWrap(True)
        lay.addWidget(intro)
        self.enabled = QCheckBox("Run the local API server")
        self.enabled.setChecked(prefs.enabled)
        lay.addWidget(self.enabled)
        form = QFormLayout()
        self.port = QSpinBox()
        self.port.setRange(1024, 65535)
        self.port.setValue(prefs.port if 1024 <= prefs.port <= 65535 else DEFAULT_PORT)
        form.addRow("Port", self.port)
        key_row = QWidget()
        kl = QHBoxLayout(key_row)
        kl.setContentsMargins(0, 0, 0, 0)
        self.key = QLineEdit(prefs.api_key)
        self.key.setPlaceholderText("none: any local program may use it")
        kl.addWidget(self.key, 1)
        gen = QPushButton("Generate")
        gen.setToolTip("A new random key")
        gen.clicked.connect(lambda: self.key.setText("cbs-" + secrets.token_urlsafe(18)))
        kl.addWidget(gen)
        form.addRow("API key", key_row)
        lay.addLayout(form)
        self.all_voices = QRadioButton("Offer every voice in the library")
        self.some_voices = QRadioButton("Offer only the checked voices")
        group = QButtonGroup(self)
        group.addButton(self.all_voices)
        group.addButton(self.some_voices)
        (self.all_voices if prefs.all_voices else self.some_voices).setChecked(True)
        lay.addWidget(self.all_voices)
        lay.addWidget(self.some_voices)
        self.voice_list = QListWidget()
        chosen = set(prefs.voices)
        for stem, name in panel.library_voices():
            item = QListWidgetItem(f"{name}  ({stem})")
            item.setData(Qt.UserRole, stem)
            item.setFlags(item.flags() | Qt.ItemIsUserCheckable)
            item.setCheckState(Qt.Checked if stem in chosen else Qt.Unchecked)
            self.voice_list.addItem(item)
        self.voice_list.setEnabled(not prefs.all_voices)
        self.some_voices.toggled.connect(self.voice_list.setEnabled)
        lay.addWidget(self.voice_list, 1)
        note = QLabel("The built-in voice is always offered, as \"default\".")
        note.setObjectName("Muted")
        lay.addWidget(note)
        url_row = QHBoxLayout()
        self.status = QLabel()
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextSelectableByMouse)
        url_row.addWidget(self.status, 1)
        self.copy = QPushButton("Copy URL")
        self.copy.clicked.connect(panel.copy_url)
        url_row.addWidget(self.copy)
        lay.addLayout(url_row)
        buttons = QDialogButtonBox(QDialogButtonBox.Apply | QDialogButtonBox.Close)
        buttons.button(QDialogButtonBox.Apply).clicked.connect(self.apply)
        buttons.rejected.connect(self.reject)
        buttons.button(QDialogButtonBox.Close).clicked.connect(self.accept)
        lay.addWidget(buttons)
        self.accepted.connect(self.apply)
        panel.controller.stateChanged.connect(self._show_state)
        self._show_state(panel.controller.state, panel.controller.detail)

    def _show_state(self, state: str, detail: str) -> None:
        self.status.setText(self.panel.describe(state, detail))
        self.copy.setEnabled(state == "running")

    def checked_voices(self) -> list[str]:
        out = []
        for i in range(self.voice_list.count()):
            item = self.voice_list.item(i)
            if item.checkState() == Qt.Checked:
                out.append(item.data(Qt.UserRole))
        return out

    def apply(self) -> None:
        p = self.panel.prefs
        p.enabled = self.enabled.isChecked()
        p.port = self.port.value()
        p.api_key = self.key.text().strip()
        p.all_voices = self.all_voices.isChecked()
        p.voices = self.checked_voices()
        self.panel.apply()


class ServerPanel(QObject):
    """The server's place in the main window: a status-bar button, the dialog, and restarts
    when the app's model changes."""

    def __init__(self, window):
        super().__init__(window)
        self.window = window
        self.prefs = ServerPrefs(window.settings.qsettings)
        self.controller = ServerController(self)
        self._config_key = None
        self.button = QToolButton()
        self.button.setAutoRaise(True)
        self.button.setPopupMode(QToolButton.InstantPopup)
        menu = QMenu(self.button)
        self.copy_action = menu.addAction("Copy the API URL", self.copy_url)
        menu.addAction("Local API server settings…", self.open_dialog)
        self.button.setMenu(menu)
        window.statusBar().addPermanentWidget(self.button)
        self.controller.stateChanged.connect(self._show_state)
        window.client.modelChanged.connect(lambda _info: self.apply())
        self._show_state("off", "")
        self.dialog = None
        self.apply()

    # ---------------------------------------------------------------- state
    def url(self) -> str:
        return f"http://127.0.0.1:{self.prefs.port}/v1"

    def describe(self, state: str, detail: str) -> str:
        if state == "running":
            key = " (API key required)" if self.prefs.api_key else ""
            return f"Serving at {self.url()}{key}"
        if state == "starting":
            return f"Starting on port {self.prefs.port}…"
        if state == "stopping":
            return "Stopping…"
        if state == "failed":
            return f"The server could not start: {detail}"
        if self.prefs.enabled and not self._model():
            return "Off: waiting for a model"
        return "Off"

    def _show_state(self, state: str, detail: str) -> None:
        short = {"running": f"API · {self.url()}", "starting": "API · starting…", "stopping": "API · stopping…",
                 "failed": "API · failed"}.get(state, "API · off")
        self.button.setText(short)
        self.button.setToolTip(self.describe(state, detail))
        self.copy_action.setEnabled(state == "running")
        self.button.setVisible(self.prefs.enabled or state != "off")
        if state == "failed":
            self.window.statusBar().showMessage(self.describe(state, detail)[:160], 10000)

    def copy_url(self) -> None:
        QGuiApplication.clipboard().setText(self.url())
        self.window.statusBar().showMessage(f"Copied {self.url()}", 4000)

    # ---------------------------------------------------------------- running
    def _model(self) -> str:
        path = self.window.settings.model_path
        return path if path and os.path.isfile(path) and self.window.client.info else ""

    def library_voices(self) -> list[tuple[str, str]]:
        """(file stem, name) of the library's voices, as the library panel last read them."""
        return [(e.stem, e.name) for e in self.window.library.entries() if e.path]

    def config(self) -> ServerConfig | None:
        model = self._model()
        if not self.prefs.enabled or not model:
            return None
        threads = self.window.settings.threads or None
        return ServerConfig(model=model, port=self.prefs.port, api_key=self.prefs.api_key or None,
                            voices_dir=self.window.store.folder, threads=threads,
                            exposed_voices=None if self.prefs.all_voices else list(self.prefs.voices),
                            watermark=self.window.settings.watermark)

    def apply(self) -> None:
        """Start, restart or stop to match the settings and the loaded model (never blocks)."""
        cfg = self.config()
        key = None if cfg is None else (cfg.model, cfg.port, cfg.api_key, cfg.threads,
                                        None if cfg.exposed_voices is None else tuple(cfg.exposed_voices), cfg.watermark)
        if key == self._config_key and self.controller.state in ("running", "starting"):
            return
        self._config_key = key
        if cfg is None:
            if self.controller.handle is not None or self.controller.state != "off":
                self.controller.stop()
            else:
                self._show_state("off", "")
        else:
            self.controller.start(cfg)

    def open_dialog(self) -> ServerDialog:
        self.dialog = ServerDialog(self, self.window)
        self.dialog.open()
        return self.dialog

    def shutdown(self) -> None:
        self._config_key = None
        if self.controller.handle is not None:
            self.controller.stop()
