"""Typed settings over QSettings (Picard-style): one descriptor per key, with its type and default.

    s = Settings()                 # the user's settings (organisation/app names from QApplication)
    s.model_path = "/models/chatterbox-turbo-q4_0.gguf"
    s.temperature                  # -> float, the default when never set

QSettings stores strings on some platforms (INI files, Linux), so every read converts
back to the declared type and falls back to the default when the stored value is junk.
"""

from __future__ import annotations

import os

from PySide6.QtCore import QByteArray, QSettings

from engine_native import options as schema
from engine_native.errors import ParameterError


class Setting:
    """A typed QSettings key; used as a class attribute of `Settings`."""

    def __init__(self, key: str, type_: type, default):
        self.key, self.type, self.default = key, type_, default

    def __set_name__(self, owner, name):
        owner._fields[name] = self

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        raw = obj.qsettings.value(self.key, None)
        if raw is None:
            return self.default
        try:
            return self.convert(raw)
        except (TypeError, ValueError):
            return self.default

    def __set__(self, obj, value):
        obj.qsettings.setValue(self.key, self.convert(value))

    def convert(self, raw):
        if self.type is bool:
            if isinstance(raw, str):
                if raw.lower() in ("true", "1", "yes"):
                    return True
                if raw.lower() in ("false", "0", "no", ""):
                    return False
                raise ValueError(raw)
            return bool(raw)
        if self.type is QByteArray:
            return raw if isinstance(raw, QByteArray) else QByteArray(raw)
        if self.type is list:
            if isinstance(raw, str):
                return [raw] if raw else []
            return [str(v) for v in raw]
        if self.type in (int, float) and isinstance(raw, bool):
            raise TypeError("a boolean is not a number")
        return self.type(raw)


class OptionSetting(Setting):
    """A synthesis option of the engine's schema (engine_native.options): its type and range
    come from there, and its default is None, meaning "the loaded model's default". A value
    outside the range (an older version's, or edited by hand) reads as None too."""

    def __init__(self, key: str, option: str):
        super().__init__(key, float, None)
        self.option = option

    def convert(self, raw):
        if raw is None:
            return None
        if isinstance(raw, str):
            raw = float(raw)
        if isinstance(raw, bool):
            raise TypeError("a boolean is not a number")
        try:
            return schema.check(self.option, raw)
        except ParameterError as e:
            raise ValueError(str(e)) from None

    def __set__(self, obj, value):
        if value is None:
            obj.qsettings.remove(self.key)
        else:
            obj.qsettings.setValue(self.key, self.convert(value))


class Settings:
    """Everything the app remembers between runs."""

    _fields: dict[str, Setting] = {}

    model_path = Setting("engine/model_path", str, "")
    model_choice_made = Setting("engine/model_choice_made", bool, False)
    threads = Setting("engine/threads", int, 0)  # 0: let the engine choose
    # "" = a Multilingual model decodes with its own S3Gen; else a Turbo or Nano file whose
    # S3Gen and HiFT decode it (Engine's decoder: faster, the decoder's sound)
    decoder = Setting("engine/decoder", str, "")
    device = Setting("engine/device", str, "auto")  # "auto" (the fastest present), "cpu", "cuda:0", "vulkan:0"...
    voice = Setting("voice/current", str, "")  # "" = the model's built-in voice, else a .voice.gguf path
    output_device = Setting("audio/output_device", str, "")  # "" = the system default
    preset = Setting("synthesis/preset", str, "Quality")
    seed = Setting("synthesis/seed", int, -1)  # -1: a new random seed per take
    watermark = Setting("synthesis/watermark", bool, True)  # the Perth watermark on what the engine speaks
    temperature = OptionSetting("sampling/temperature", "temperature")
    top_k = OptionSetting("sampling/top_k", "top_k")
    top_p = OptionSetting("sampling/top_p", "top_p")
    repetition_penalty = OptionSetting("sampling/repetition_penalty", "repetition_penalty")
    min_p = OptionSetting("sampling/min_p", "min_p")
    cfm_steps = OptionSetting("sampling/cfm_steps", "cfm_steps")
    max_tokens = OptionSetting("sampling/max_tokens", "max_tokens")
    prompt_seconds = OptionSetting("sampling/prompt_seconds", "prompt_seconds")
    exaggeration = OptionSetting("sampling/exaggeration", "exaggeration")  # Multilingual models only
    cfg_weight = OptionSetting("sampling/cfg_weight", "cfg_weight")
    language = Setting("synthesis/language", str, "")  # "" = detect from the text (Multilingual models)
    sampling_customised = Setting("sampling/customised", bool, False)  # False: use the model's defaults
    sampling_panel_open = Setting("ui/sampling_panel_open", bool, False)
    tour_shown = Setting("ui/tour_shown", bool, False)  # the first-run tour (app.qt.tour) was shown
    decoder_tip_shown = Setting("ui/decoder_tip_shown", bool, False)  # the status bar named the Multilingual decoder once
    theme = Setting("ui/theme", str, "dark")
    geometry = Setting("ui/geometry", QByteArray, QByteArray())
    window_state = Setting("ui/window_state", QByteArray, QByteArray())
    last_open_dir = Setting("ui/last_open_dir", str, "")
    script = Setting("editor/script", str, "")
    best_of = Setting("script/best_of", int, 1)  # takes per sentence; the best likeness is kept
    casts = Setting("script/casts", str, "{}")
    book_job = Setting("book/job", str, "")  # JSON: the audiobook being rendered or paused (app.core.book.job.BookJob)
    book_casts = Setting("book/casts", str, "{}")  # JSON: book file -> its cast {name: voice}  # JSON: cast key (app.qt.script_panels.cast_key) -> {name: voice}

    SAMPLING_KEYS = schema.SAMPLING  # None: the model's default (prompt_seconds: the voice's whole prompt)

    def __init__(self, qsettings: QSettings | None = None):
        self.qsettings = qsettings if qsettings is not None else QSettings()

    def sampling(self) -> dict:
        return {k: getattr(self, k) for k in self.SAMPLING_KEYS}

    def set_sampling(self, values: dict) -> None:
        for k in self.SAMPLING_KEYS:
            if k in values:
                setattr(self, k, values[k])

    def sync(self) -> None:
        self.qsettings.sync()

    def replace_prefix(self, old: str, new: str) -> int:
        """Rewrites every stored path under the folder `old` to lie under `new` (the data folder
        moved: app.core.paths.migrate_legacy_data_dir); returns how many values changed."""
        old, new = old.rstrip("/\\"), new.rstrip("/\\")
        changed = 0
        for key in self.qsettings.allKeys():
            value = self.qsettings.value(key)
            if isinstance(value, str) and old + os.sep in value:
                self.qsettings.setValue(key, value.replace(old + os.sep, new + os.sep))
                changed += 1
        return changed
