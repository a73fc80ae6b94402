"""The model and the devices: loading a model (the model button and the model manager, the
welcome dialog, the status bar's model line), the Multilingual decoder, the compute device and CPU threads (each
reloads the model), and the audio output device."""

from __future__ import annotations

import os

from PySide6.QtCore import QObject
from PySide6.QtGui import QActionGroup
from PySide6.QtWidgets import QLabel

from app.core.player import output_devices
from app.core.voice_library import VARIANT_NAMES
from app.qt.background import error_text

THREAD_CHOICES = (0, 1, 2, 4, 8, 16)  # 0: automatic


def device_label(d: dict) -> str:
    """A device as the menu shows it: "cuda:0 · NVIDIA H200 · 139 GiB"."""
    parts = [d["id"], d.get("description") or d.get("name") or ""]
    if d.get("type") != "cpu" and d.get("memory_total"):
        parts.append(f"{d['memory_total'] / 2**30:.0f} GiB")
    return " · ".join(p for p in parts if p)


class ModelActions(QObject):
    def __init__(self, window):
        super().__init__(window)
        self.w = window
        self.settings = window.settings
        self.client = window.client
        self.button = window.toolbar.model_button
        self.button.clicked.connect(lambda: self.choose_model())
        self.status_label = QLabel("No model")
        self.model_dialog = None     # the welcome dialog (the first start)
        self.manager_dialog = None   # the model manager

    def add_menus(self, m) -> None:
        """Audio output, Multilingual decoder, Compute device and CPU threads, into the ⋯ menu."""
        self.device_menu = m.addMenu("Audio output")
        self.device_menu.aboutToShow.connect(self.fill_device_menu)
        self.decoder_menu = m.addMenu("Multilingual decoder")
        self.decoder_menu.aboutToShow.connect(self.fill_decoder_menu)
        self.compute_menu = m.addMenu("Compute device")
        self.compute_menu.aboutToShow.connect(self.fill_compute_menu)
        self.threads_menu = m.addMenu("CPU threads")
        group = QActionGroup(self.threads_menu)
        for n in THREAD_CHOICES:
            a = self.threads_menu.addAction("Automatic" if n == 0 else str(n))
            a.setCheckable(True)
            a.setChecked(self.settings.threads == n)
            a.triggered.connect(lambda _c=False, n=n: self.set_threads(n))
            group.addAction(a)

    # --- the model ----------------------------------------------------------------------------------

    def load_model(self, path: str):
        name = os.path.basename(path)
        self.status_label.setText(f"Loading {name}…")
        self.button.setText(f"Loading {name}…")

        def ok(_info):
            self.settings.model_path = path
            self.settings.model_choice_made = True
            self.w.banner.hide()
            self.w.show_tour()

        def bad(e):
            msg = error_text(e)
            if path not in msg:
                msg = f"{path}: {msg}"
            self.w.show_error(f"Could not load the model. {msg}", action=("Choose model…", lambda: self.choose_model()))

        return self.client.load_model(path, self.settings.threads, self.settings.device,
                                      watermark=self.settings.watermark, decoder=self.settings.decoder,
                                      success=ok, failure=bad)

    def models_dir(self) -> str:
        return os.path.join(self.w.data_dir, "models")

    def choose_model(self, first_run: bool = False):
        """The first start: the welcome dialog; later: the model manager. Window-modal (no nested
        event loop); returns the dialog."""
        if not first_run:
            return self.open_manager()
        from app.qt.model_dialog import ModelDialog

        dlg = ModelDialog(self.models_dir(), self.w, first_run=True)
        self.model_dialog = dlg
        dlg.managerRequested.connect(self.open_manager)

        def finished(result: int) -> None:
            self.settings.model_choice_made = True  # asked once; the model button asks again
            if result and dlg.model_path:
                self.load_model(dlg.model_path)

        dlg.finished.connect(finished)
        dlg.open()
        return dlg

    def open_manager(self):
        """The model manager (kept: a download goes on while it is hidden); returns it."""
        from app.qt.model_manager_dialog import ModelManagerDialog

        if self.manager_dialog is None:
            self.manager_dialog = ModelManagerDialog(self.models_dir(), self.w,
                                                     current_model=lambda: self.settings.model_path
                                                     if self.client.info else "")
            self.manager_dialog.modelChosen.connect(self.load_model)
        self.manager_dialog.show()
        self.manager_dialog.raise_()
        self.manager_dialog.activateWindow()
        return self.manager_dialog

    def shutdown(self) -> None:
        if self.manager_dialog is not None:
            self.manager_dialog.shutdown()

    def show_model(self, info) -> None:
        """The model button and the status bar's line for the loaded model (None: none)."""
        if not info:
            self.button.setText("Choose a model…")
            self.status_label.setText("No model loaded")
            return
        variant = info.get("variant", "")
        dv = info.get("decoder_variant")
        decoder = f" · {VARIANT_NAMES.get(dv, dv)} decoder" if info.get("decoder") else ""
        self.button.setText(f"{VARIANT_NAMES.get(variant, variant or '?')} · {info.get('quantization', '?')}{decoder}")
        self.status_label.setText(f"{os.path.basename(info.get('path', ''))} · {info.get('device', 'cpu')} · "
                                  f"{info.get('threads', '?')} threads · ggml {info.get('ggml_version', '')}")
        if info.get("device_note"):  # the device asked for could not be used: say so, it runs anyway
            self.w.statusBar().showMessage(info["device_note"], 15000)
        elif variant == "mtl" and not info.get("decoder") and not self.settings.decoder_tip_shown \
                and len(self.decoder_choices()) > 1:  # once: a faster decoder is at hand
            self.settings.decoder_tip_shown = True
            self.w.statusBar().showMessage("Tip: ⋯ › Multilingual decoder speaks about 4x faster through the Turbo or "
                                           "Nano model you have", 30000)

    # --- the Multilingual decoder ---------------------------------------------------------------------

    def decoder_choices(self) -> list[tuple[str, str]]:
        """(path, label) of the decoders offered: "" (the Multilingual model's own S3Gen), then
        every Turbo or Nano model in the models folder (Engine's decoder)."""
        from app.core.model_manager import ModelManager

        out = [("", "Its own (the reference model's sound; slower)")]
        for m in ModelManager(self.models_dir()).installed():
            if m.variant in ("turbo", "nano"):
                out.append((m.file, f"{m.name}'s: about 4x faster, its sound ({os.path.basename(m.file)})"))
        chosen = self.settings.decoder
        if chosen and chosen not in {p for p, _ in out}:
            out.append((chosen, f"{os.path.basename(chosen)}"))  # chosen from elsewhere (the command line, a move)
        return out

    def fill_decoder_menu(self) -> None:
        self.decoder_menu.clear()
        group = QActionGroup(self.decoder_menu)
        choices = self.decoder_choices()
        for path, text in choices:
            a = self.decoder_menu.addAction(text)
            a.setCheckable(True)
            a.setChecked(self.settings.decoder == path)
            a.triggered.connect(lambda _c=False, p=path: self.set_decoder(p))
            group.addAction(a)
        if len(choices) == 1:  # nothing to choose yet: say where a decoder comes from
            self.decoder_menu.addSeparator()
            self.decoder_menu.addAction("Get Turbo or Nano (Models…) to decode faster", lambda: self.open_manager())

    def set_decoder(self, path: str) -> None:
        """Remember the Multilingual decoder; a loaded Multilingual model reloads with it."""
        self.settings.decoder = path
        if (self.client.info or {}).get("variant") == "mtl":
            self._reload()

    # --- devices ------------------------------------------------------------------------------------

    def fill_compute_menu(self) -> None:
        from engine_native import devices

        self.compute_menu.clear()
        group = QActionGroup(self.compute_menu)
        for key, text in [("auto", "Automatic (the fastest present)")] + [(d["id"], device_label(d)) for d in devices()]:
            a = self.compute_menu.addAction(text)
            a.setCheckable(True)
            a.setChecked(self.settings.device == key)
            a.triggered.connect(lambda _c=False, k=key: self.set_device(k))
            group.addAction(a)

    def fill_device_menu(self) -> None:
        self.device_menu.clear()
        group = QActionGroup(self.device_menu)
        for name in [""] + output_devices():
            a = self.device_menu.addAction(name or "System default")
            a.setCheckable(True)
            a.setChecked(name == self.settings.output_device)
            a.triggered.connect(lambda _c=False, n=name: self.set_output_device(n))
            group.addAction(a)

    def set_device(self, device: str) -> None:
        """Remember the compute device and load the model on it (if one is loaded)."""
        self.settings.device = device
        self._reload()

    def set_threads(self, n: int) -> None:
        self.settings.threads = n
        self._reload()

    def _reload(self) -> None:
        if self.settings.model_path and self.client.info:
            self.load_model(self.settings.model_path)

    def set_output_device(self, name: str) -> None:
        self.settings.output_device = name
        self.w.player.set_device(name or None)
