"""The expandable sampling settings panel (under the toolbar): temperature, top-k/p, penalties,
CFM steps, token budget and seed, and a Multilingual model's exaggeration and guidance; plus the
quality/speed presets that set the CFM steps, and the watermark switch."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QDoubleSpinBox,
    QFrame,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
)

from app.qt.settings import Settings
from engine_native import options as schema

#: Toolbar presets -> the engine's stream presets (engine_native.engine.PRESETS): "Quality" is the
#: reference model; "Low latency" speaks sooner (small first chunk, one CFM step, a shorter
#: S3Gen prompt) at a little cost in detail and likeness.
PRESET_KEYS = {"Quality": "quality", "Low latency": "low-latency"}
STREAM_KEYS = ("first_chunk_tokens", "chunk_tokens")


def engine_preset(name: str, presets: dict | None = None) -> dict:
    """A toolbar preset's engine settings: the loaded model's (`Engine.presets`), else the
    engine's general ones."""
    if presets is None:
        from engine_native.engine import PRESETS as presets
    return dict(presets.get(PRESET_KEYS.get(name, ""), {}))


PRESETS = list(PRESET_KEYS)

WATERMARK_NOTE = ("Marks generated speech as machine-made (Resemble AI's Perth watermark), as the official "
                  "Chatterbox does.")


FIELDS = [  # key, label, step, decimals, tooltip; type and range come from the engine's options schema
    ("temperature", "Temperature", 0.05, 2, "Higher: livelier, less predictable"),
    ("top_k", "Top-k", 10, 0, "Sample only from the k most likely tokens"),
    ("top_p", "Top-p", 0.01, 2, "Nucleus sampling: keep tokens up to this probability mass"),
    ("min_p", "Min-p", 0.01, 2, "Drop tokens below this fraction of the best one"),
    ("repetition_penalty", "Repetition penalty", 0.05, 2, "Discourage repeated speech tokens"),
    ("cfm_steps", "CFM steps", 1, 0, "Flow-matching steps in the vocoder front end: quality vs speed"),
    ("max_tokens", "Max tokens", 50, 0, "Speech token budget per sentence (25 per second)"),
    ("prompt_seconds", "Voice prompt", 1.0, 1,
     "Seconds of the voice's reference S3Gen attends to (whole: the reference; shorter: faster)"),
    ("exaggeration", "Exaggeration", 0.05, 2, "Emotion intensity: 0.5 is neutral; higher is more expressive"),
    ("cfg_weight", "Guidance", 0.05, 2,
     "How closely speech follows the text and voice (classifier-free guidance); 0 turns it off"),
]
#: Options only some models take (a Multilingual model's); shown and sent only when the loaded
#: model has a default for them.
MODEL_OPTIONS = schema.MTL
#: Spin boxes that also offer 0, shown as a word: the voice's whole prompt; top-k off (a
#: Multilingual model samples without top-k, as the reference does).
ZERO_TEXT = {"prompt_seconds": "whole", "top_k": "off"}


def spin_range(key: str, step: float) -> tuple[float, float]:
    """The schema's range as a spin box can hold it (an open end moves in by one step);
    the voice prompt and top-k also offer 0 (ZERO_TEXT)."""
    opt = schema.option(key)
    lo = opt.min + (step if opt.min_open else 0)
    hi = opt.max - (step if opt.max_open else 0)
    return (0 if key in ZERO_TEXT else lo), hi


class SamplingPanel(QFrame):
    changed = Signal()
    presetChanged = Signal(str)
    watermarkToggled = Signal(bool)

    def __init__(self, settings: Settings, parent=None):
        super().__init__(parent)
        self.settings = settings
        self.defaults: dict = {}
        self.top_k_off_by_default = False  # the loaded model samples without top-k (Multilingual)
        self.presets: dict | None = None  # the loaded model's (Engine.presets)
        self.setObjectName("Card")
        grid = QGridLayout(self)
        grid.setContentsMargins(14, 10, 14, 10)
        grid.setHorizontalSpacing(12)
        grid.setVerticalSpacing(6)
        self.spins, self.labels = {}, {}
        for i, (key, label, step, dec, tip) in enumerate(FIELDS):
            kind = schema.option(key).kind
            spin = QDoubleSpinBox() if kind is float else QSpinBox()
            lo, hi = spin_range(key, step)
            spin.setRange(kind(lo), kind(min(hi, 2**31 - 1)))
            spin.setSingleStep(step)
            if kind is float:
                spin.setDecimals(dec)
            if getattr(settings, key) is not None:
                spin.setValue(getattr(settings, key))
            if key in ZERO_TEXT:
                spin.setSpecialValueText(ZERO_TEXT[key])
            if key == "prompt_seconds":
                spin.setSuffix(" s")
            spin.setToolTip(tip)
            spin.setKeyboardTracking(False)
            spin.valueChanged.connect(lambda _v, k=key: self._edited(k))
            lab = QLabel(label)
            lab.setToolTip(tip)
            row, col = divmod(i, 4)
            grid.addWidget(lab, row, col * 2)
            grid.addWidget(spin, row, col * 2 + 1)
            self.spins[key] = spin
            self.labels[key] = lab
        self.seed_random = QCheckBox("New random seed for every take")
        self.seed_random.setToolTip("The take history shows which seed each take used")
        self.seed_spin = QSpinBox()
        self.seed_spin.setRange(0, 2**31 - 1)
        self.seed_spin.setToolTip("The same seed, text, voice and settings give the same audio")
        seed = settings.seed
        self.seed_random.setChecked(seed < 0)
        self.seed_spin.setValue(max(0, seed))
        self.seed_spin.setEnabled(seed >= 0)
        self.seed_random.toggled.connect(self._seed_changed)
        self.seed_spin.valueChanged.connect(self._seed_changed)
        seed_row = (len(FIELDS) + 3) // 4
        grid.addWidget(QLabel("Seed"), seed_row, 0)
        grid.addWidget(self.seed_spin, seed_row, 1)
        bottom = QHBoxLayout()
        bottom.addWidget(self.seed_random)
        bottom.addStretch(1)
        self.reset_button = QPushButton("Model defaults")
        self.reset_button.setToolTip("Reset every sampling setting to the values stored in the model")
        self.reset_button.clicked.connect(self.reset_to_defaults)
        bottom.addWidget(self.reset_button)
        grid.addLayout(bottom, seed_row, 2, 1, 6)
        self.watermark = QCheckBox("Watermark the speech")
        self.watermark.setChecked(settings.watermark)
        self.watermark.setToolTip(WATERMARK_NOTE + " Check a recording with ⋯ > Check a recording for a watermark…")
        self.watermark.toggled.connect(self.watermarkToggled)
        note = QLabel(WATERMARK_NOTE)
        note.setObjectName("Muted")
        note.setWordWrap(True)
        note.setTextInteractionFlags(Qt.NoTextInteraction)
        grid.addWidget(self.watermark, seed_row + 1, 0, 1, 2)
        grid.addWidget(note, seed_row + 1, 2, 1, 6)
        self._show_model_options()
        for col in (1, 3, 5, 7):
            grid.setColumnStretch(col, 1)

    def show_watermark(self, on: bool) -> None:
        """The switch's state without telling anyone (a change the engine refused goes back)."""
        self.watermark.blockSignals(True)
        self.watermark.setChecked(on)
        self.watermark.blockSignals(False)

    def set_defaults(self, defaults: dict, presets: dict | None = None) -> None:
        """The loaded model's defaults (and presets); they fill the panel unless the user customised it."""
        self.defaults = {k: v for k, v in defaults.items() if v is not None}
        self.presets = presets
        # A model whose default top-k is None samples without it: the panel shows "off".
        self.top_k_off_by_default = "top_k" in defaults and defaults["top_k"] is None
        if self.top_k_off_by_default:
            self.defaults["top_k"] = 0
        self._show_model_options()
        if not self.settings.sampling_customised:
            self._fill(self.defaults)
            self.apply_preset(self.settings.preset, announce=False)
        else:  # customised: keep the user's values, fill what was never set
            self._fill({k: v for k, v in self.defaults.items() if getattr(self.settings, k, 0) is None})

    def model_takes(self, key: str) -> bool:
        return key not in MODEL_OPTIONS or key in self.defaults

    def _show_model_options(self) -> None:
        for key in MODEL_OPTIONS:
            self.spins[key].setVisible(self.model_takes(key))
            self.labels[key].setVisible(self.model_takes(key))

    def reset_to_defaults(self) -> None:
        self.settings.sampling_customised = False
        self._fill({**self.defaults, "prompt_seconds": 0.0})
        self.apply_preset(self.settings.preset if self.settings.preset in PRESET_KEYS else "Quality")

    def _fill(self, values: dict) -> None:
        for key, spin in self.spins.items():
            if key in values and values[key] is not None:
                spin.blockSignals(True)
                spin.setValue(values[key])
                spin.blockSignals(False)
                self._store(key)

    def apply_preset(self, name: str, announce: bool = True) -> None:
        """Quality / Low latency: set the CFM steps and the prompt length the engine preset names."""
        if name not in PRESET_KEYS:
            return
        self.settings.preset = name
        preset = engine_preset(name, self.presets)
        values = {"cfm_steps": preset.get("cfm_steps", self.defaults.get("cfm_steps", self.spins["cfm_steps"].value())),
                  "prompt_seconds": preset.get("prompt_seconds") or 0.0}
        self._fill(values)
        if announce:
            self.changed.emit()

    def stream_options(self) -> dict:
        """Chunking for engine.stream from the preset (how soon the first audio comes)."""
        preset = engine_preset(self.settings.preset, self.presets)
        return {k: preset[k] for k in STREAM_KEYS if k in preset}

    def _store(self, key: str) -> None:
        value = self.spins[key].value()
        setattr(self.settings, key, None if key in ZERO_TEXT and value == 0 else value)

    def _edited(self, key: str) -> None:
        self._store(key)
        self.settings.sampling_customised = True
        if key in ("cfm_steps", "prompt_seconds"):
            self.settings.preset = "Custom"
            self.presetChanged.emit("Custom")
        self.changed.emit()

    def _seed_changed(self, *_a) -> None:
        rnd = self.seed_random.isChecked()
        self.seed_spin.setEnabled(not rnd)
        self.settings.seed = -1 if rnd else self.seed_spin.value()
        self.changed.emit()

    def params(self) -> dict:
        """Options for engine.stream / synthesize."""
        p = {key: spin.value() for key, spin in self.spins.items() if self.model_takes(key)}
        p["prompt_seconds"] = p["prompt_seconds"] or None  # 0 ("whole"): the voice's full prompt
        if p.get("top_k") == 0:  # "off": the model's own default where that is off, else no truncation
            p["top_k"] = None if self.top_k_off_by_default else int(schema.option("top_k").max)
        p["seed"] = None if self.seed_random.isChecked() else self.seed_spin.value()
        return p
