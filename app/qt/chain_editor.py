"""The Voice Lab's filter chain as an editable list: presets, per-step on/off, order and parameters."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QVBoxLayout,
    QWidget,
)
from voice_lab.chain import PRESETS, STEP_KINDS, Chain, Step, preset

from app.qt.icons import icon

TITLES = {"highpass": "High-pass", "lowpass": "Low-pass", "equalizer": "EQ band", "denoise": "Denoise",
          "loudnorm": "Loudness", "limiter": "Limiter", "gain": "Gain"}
UNITS = {"f": "Hz", "w": "Hz", "g": "dB", "nr": "dB", "nf": "dBFS", "I": "LUFS", "TP": "dBTP", "LRA": "LU",
         "limit": "", "db": "dB"}
LABELS = {"f": "Frequency", "w": "Width", "g": "Gain", "nr": "Reduction", "nf": "Noise floor", "I": "Target",
          "TP": "True peak", "LRA": "Range", "limit": "Ceiling", "db": "Gain"}


def describe(step: Step) -> str:
    parts = []
    for k, v in step.params.items():
        unit = UNITS.get(k, "")
        parts.append(f"{v:g}{' ' + unit if unit else ''}")
    return f"{TITLES.get(step.kind, step.kind)}   {' · '.join(parts)}"


class ChainEditor(QWidget):
    changed = Signal()

    def __init__(self, parent=None):
        super().__init__(parent)
        self.chain = preset("clean")
        self.auto_name, self.auto_reason = "clean", ""
        lay = QVBoxLayout(self)
        lay.setContentsMargins(0, 0, 0, 0)
        lay.setSpacing(8)

        top = QHBoxLayout()
        self.preset_combo = QComboBox()
        self.preset_combo.currentIndexChanged.connect(self._preset_chosen)
        top.addWidget(QLabel("Preset"))
        top.addWidget(self.preset_combo, 1)
        lay.addLayout(top)
        self.reason = QLabel("")
        self.reason.setObjectName("Muted")
        self.reason.setWordWrap(True)
        lay.addWidget(self.reason)

        self.list = QListWidget()
        self.list.setMinimumHeight(120)
        self.list.itemChanged.connect(self._item_toggled)
        self.list.currentRowChanged.connect(self._show_params)
        lay.addWidget(self.list, 1)

        row = QHBoxLayout()
        row.setSpacing(6)
        self.add_button = QPushButton(" Add")
        menu = QMenu(self.add_button)
        for kind in STEP_KINDS:
            menu.addAction(TITLES.get(kind, kind), lambda k=kind: self.add_step(k))
        self.add_button.setMenu(menu)
        self.remove_button = QPushButton()
        self.remove_button.setToolTip("Remove the selected step")
        self.remove_button.clicked.connect(self.remove_step)
        self.up_button = QPushButton()
        self.up_button.setToolTip("Move up")
        self.up_button.clicked.connect(lambda: self.move_step(-1))
        self.down_button = QPushButton()
        self.down_button.setToolTip("Move down")
        self.down_button.clicked.connect(lambda: self.move_step(1))
        for b in (self.add_button, self.remove_button, self.up_button, self.down_button):
            row.addWidget(b)
        row.addStretch(1)
        lay.addLayout(row)

        self.params_box = QWidget()
        self.params_form = QFormLayout(self.params_box)
        self.params_form.setContentsMargins(0, 4, 0, 0)
        self.params_form.setHorizontalSpacing(10)
        lay.addWidget(self.params_box)
        self.refresh_icons()
        self._fill_presets()

    def refresh_icons(self) -> None:
        self.add_button.setIcon(icon("add"))
        self.remove_button.setIcon(icon("trash"))
        self.up_button.setIcon(icon("up"))
        self.down_button.setIcon(icon("down"))

    # --- presets --------------------------------------------------------------------------------------

    def _fill_presets(self) -> None:
        self.preset_combo.blockSignals(True)
        self.preset_combo.clear()
        self.preset_combo.addItem(f"Auto ({self.auto_name})", "auto")
        for name in PRESETS:
            self.preset_combo.addItem(name.capitalize(), name)
        self.preset_combo.addItem("Custom", "custom")
        self.preset_combo.blockSignals(False)

    def set_auto(self, name: str, reason: str) -> None:
        """The preset Voice Lab chose for this recording; selects it."""
        self.auto_name, self.auto_reason = name, reason
        self._fill_presets()
        self.preset_combo.setCurrentIndex(0)
        self._preset_chosen(0)

    def _preset_chosen(self, index: int) -> None:
        key = self.preset_combo.itemData(index)
        if key == "custom":
            return
        name = self.auto_name if key == "auto" else key
        self.chain = preset(name)
        self.reason.setText(self.auto_reason if key == "auto" else
                            ("Trusts the source: rumble filter and a safety limiter." if name == "clean" else
                             "Repairs lossy codecs: denoise, presence EQ, loudness and limiter."))
        self._rebuild()
        self.changed.emit()

    def _mark_custom(self) -> None:
        self.preset_combo.blockSignals(True)
        self.preset_combo.setCurrentIndex(self.preset_combo.count() - 1)
        self.preset_combo.blockSignals(False)
        self.chain.name = "custom"
        self.reason.setText("Edited by hand.")

    # --- the list -------------------------------------------------------------------------------------

    def set_chain(self, chain: Chain) -> None:
        self.chain = chain.copy()
        self._mark_custom()
        self._rebuild()
        self.changed.emit()

    def _rebuild(self, select: int = 0) -> None:
        self.list.blockSignals(True)
        self.list.clear()
        for step in self.chain.steps:
            it = QListWidgetItem(describe(step))
            it.setFlags(it.flags() | Qt.ItemIsUserCheckable)
            it.setCheckState(Qt.Checked if step.enabled else Qt.Unchecked)
            self.list.addItem(it)
        self.list.blockSignals(False)
        if self.chain.steps:
            self.list.setCurrentRow(min(select, len(self.chain.steps) - 1))
        self._show_params(self.list.currentRow())

    def _item_toggled(self, item: QListWidgetItem) -> None:
        row = self.list.row(item)
        on = item.checkState() == Qt.Checked
        if 0 <= row < len(self.chain.steps) and self.chain.steps[row].enabled != on:
            self.chain.steps[row].enabled = on
            self._mark_custom()
            self.changed.emit()

    def set_enabled(self, row: int, on: bool) -> None:
        self.list.item(row).setCheckState(Qt.Checked if on else Qt.Unchecked)

    def add_step(self, kind: str) -> None:
        self.chain.steps.append(Step(kind))
        self._mark_custom()
        self._rebuild(len(self.chain.steps) - 1)
        self.changed.emit()

    def remove_step(self) -> None:
        row = self.list.currentRow()
        if 0 <= row < len(self.chain.steps):
            del self.chain.steps[row]
            self._mark_custom()
            self._rebuild(row)
            self.changed.emit()

    def move_step(self, delta: int) -> None:
        row = self.list.currentRow()
        new = row + delta
        if 0 <= row < len(self.chain.steps) and 0 <= new < len(self.chain.steps):
            s = self.chain.steps
            s[row], s[new] = s[new], s[row]
            self._mark_custom()
            self._rebuild(new)
            self.changed.emit()

    # --- parameters -----------------------------------------------------------------------------------

    def _show_params(self, row: int) -> None:
        while self.params_form.rowCount():
            self.params_form.removeRow(0)
        has = 0 <= row < len(self.chain.steps)
        for b in (self.remove_button, self.up_button, self.down_button):
            b.setEnabled(has)
        if not has:
            return
        step = self.chain.steps[row]
        for name, (_default, lo, hi) in STEP_KINDS[step.kind].items():
            spin = QDoubleSpinBox()
            spin.setRange(lo, hi)
            spin.setDecimals(2 if hi - lo < 100 else 0)
            spin.setSingleStep(0.05 if hi - lo <= 1 else (1 if hi - lo < 200 else 10))
            spin.setValue(step.params[name])
            unit = UNITS.get(name, "")
            if unit:
                spin.setSuffix(" " + unit)
            spin.setKeyboardTracking(False)
            spin.valueChanged.connect(lambda v, r=row, n=name: self.set_param(r, n, v))
            self.params_form.addRow(LABELS.get(name, name), spin)

    def set_param(self, row: int, name: str, value: float) -> None:
        step = self.chain.steps[row]
        if step.params.get(name) == float(value):
            return
        step.params[name] = float(value)
        self.list.item(row).setText(describe(step))
        self._mark_custom()
        self.changed.emit()
