"""The main window's toolbar: the model button, the voice, language and quality pickers, the
sampling panel's switch, "Add voice…" and the ⋯ menu. Only the widgets: the window's parts
(app.qt.model_actions, .voice_actions, .language_picker, .script_actions) bind them and fill
the menu."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QComboBox, QLabel, QMenu, QSizePolicy, QToolBar, QToolButton, QWidget

from app.qt.icons import icon
from app.qt.sampling_panel import PRESETS


class MainToolbar(QToolBar):
    def __init__(self, parent=None):
        super().__init__("Main", parent)
        self.setObjectName("MainToolbar")
        self.setMovable(False)
        self.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        self.model_button = QToolButton()
        self.model_button.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        self.model_button.setToolTip("The model in use: click to open or convert another")
        self.addWidget(self.model_button)
        self.addSeparator()
        self.addWidget(QLabel("Voice"))
        self.voice_combo = QComboBox()
        self.voice_combo.setMinimumWidth(210)  # "Built-in (Multilingual)" whole
        self.voice_combo.setToolTip("The voice that speaks the script")
        self.addWidget(self.voice_combo)
        # A Multilingual model's language: auto-detect (the guess shown in the first entry) or fixed.
        self.language_combo = QComboBox()
        self.language_combo.setMinimumWidth(150)
        self.language_combo.setToolTip("The language the script is read in; Auto guesses it from the text's script")
        self.language_actions = [self.addWidget(QLabel("Language")), self.addWidget(self.language_combo)]
        self.addWidget(QLabel("Quality"))
        self.preset_combo = QComboBox()
        self.preset_combo.addItems(list(PRESETS) + ["Custom"])
        self.preset_combo.setToolTip("Quality: the reference model's steps and whole voice prompt. Low latency: "
                                     "speaks sooner (one CFM step, a shorter voice prompt), with a little less "
                                     "detail. Either streams against the voice prompt prepared once.")
        self.addWidget(self.preset_combo)
        self.sampling_button = QToolButton()
        self.sampling_button.setText("Sampling")
        self.sampling_button.setCheckable(True)
        self.sampling_button.setToolButtonStyle(Qt.ToolButtonTextBesideIcon)
        self.sampling_button.setToolTip("Show the sampling settings and the seed")
        self.addWidget(self.sampling_button)
        spacer = QWidget()
        spacer.setSizePolicy(QSizePolicy.Expanding, QSizePolicy.Preferred)
        self.addWidget(spacer)
        self.add_voice_action = QAction("Add voice…", self)
        self.addAction(self.add_voice_action)
        self.menu = QMenu(self)
        self.menu_button = QToolButton()
        self.menu_button.setText("⋯")
        self.menu_button.setPopupMode(QToolButton.InstantPopup)
        self.menu_button.setMenu(self.menu)
        self.addWidget(self.menu_button)

    def refresh_icons(self) -> None:
        self.model_button.setIcon(icon("model"))
        self.sampling_button.setIcon(icon("sliders"))
        self.add_voice_action.setIcon(icon("add"))
