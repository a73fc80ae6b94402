"""A Multilingual model's language picker in the toolbar: Auto (its entry names the language the
engine would guess for the script as it stands) or a fixed language, remembered in the
settings; hidden for a model without languages."""

from __future__ import annotations

from PySide6.QtCore import QObject, QTimer


class LanguagePicker(QObject):
    def __init__(self, window):
        super().__init__(window)
        self.settings = window.settings
        self.client = window.client
        self.editor = window.editor
        self.combo = window.toolbar.language_combo
        self.actions = window.toolbar.language_actions  # its label and the combo, shown together
        self.combo.currentIndexChanged.connect(self._chosen)
        self._guess_timer = QTimer(self, singleShot=True, interval=400)
        self._guess_timer.timeout.connect(self.show_guess)
        self.editor.edit.textChanged.connect(self._guess_timer.start)

    def fill(self, languages: dict) -> None:
        """The model's languages: Auto first, then by name; none hides the picker."""
        for a in self.actions:
            a.setVisible(bool(languages))
        self.combo.blockSignals(True)
        self.combo.clear()
        if languages:
            self.combo.addItem("Auto", "")
            for code, name in sorted(languages.items(), key=lambda kv: kv[1]):
                self.combo.addItem(f"{name} ({code})", code)
            self.combo.setCurrentIndex(max(0, self.combo.findData(self.settings.language)))
        self.combo.blockSignals(False)
        self.show_guess()

    def _chosen(self, i: int) -> None:
        code = self.combo.itemData(i)
        if code is not None:
            self.settings.language = code
            self.show_guess()

    def language(self) -> str | None:
        """The language for the next synthesis: None for Auto (the engine guesses per text) or
        for a model without languages."""
        code = self.settings.language
        return code if code and code in self.client.languages else None

    def show_guess(self) -> None:
        if not self.client.languages or self.combo.count() == 0:
            return
        guess = self.client.detect_language(self.editor.text())
        name = self.client.languages.get(guess or "", "")
        self.combo.setItemText(0, f"Auto · {name}" if name else "Auto")
