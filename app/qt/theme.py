"""Fusion style with a dark (default) or light palette, and one small style sheet for spacing."""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QApplication


@dataclass(frozen=True)
class Colors:
    window: str
    base: str
    alt_base: str
    panel: str
    text: str
    muted: str
    button: str
    border: str
    accent: str
    accent_text: str
    wave: str
    wave_dim: str
    speech: str
    speech2: str  # the second speaker's speech in the Voice Lab
    silence: str
    window_sel: str
    playhead: str
    highlight_sentence: str
    error: str


DARK = Colors(
    window="#1e2126", base="#16181c", alt_base="#1b1e22", panel="#252930", text="#e3e6ea", muted="#8b929c",
    button="#2c3139", border="#363c45", accent="#4f9dff", accent_text="#ffffff", wave="#6fb3ff",
    wave_dim="#3a5a80", speech="#2f6b4a", speech2="#5b4b8a", silence="#3a2f33", window_sel="#ffcc66", playhead="#ff6b6b",
    highlight_sentence="#3a4f6e", error="#ff7b72",
)
LIGHT = Colors(
    window="#f3f4f6", base="#ffffff", alt_base="#f7f8fa", panel="#e9ebef", text="#1d2127", muted="#6a717c",
    button="#ffffff", border="#cfd4db", accent="#2f74d0", accent_text="#ffffff", wave="#2f74d0",
    wave_dim="#a9c4ea", speech="#cfe8d8", speech2="#ddd3f2", silence="#f1dede", window_sel="#d48a00", playhead="#d64545",
    highlight_sentence="#d6e6fb", error="#c0392b",
)

_current = DARK


def colors() -> Colors:
    return _current


def apply(app: QApplication, name: str = "dark") -> Colors:
    """Fusion + palette + style sheet for `name` ("dark" or "light")."""
    global _current
    c = _current = LIGHT if name == "light" else DARK
    app.setStyle("Fusion")
    pal = QPalette()
    role = QPalette.ColorRole
    for r, v in ((role.Window, c.window), (role.WindowText, c.text), (role.Base, c.base),
                 (role.AlternateBase, c.alt_base), (role.Text, c.text), (role.Button, c.button),
                 (role.ButtonText, c.text), (role.Highlight, c.accent), (role.HighlightedText, c.accent_text),
                 (role.ToolTipBase, c.panel), (role.ToolTipText, c.text), (role.PlaceholderText, c.muted),
                 (role.Link, c.accent), (role.Mid, c.border), (role.Midlight, c.panel), (role.Dark, c.base),
                 (role.Light, c.panel), (role.Shadow, "#000000")):
        pal.setColor(r, QColor(v))
    for r in (role.WindowText, role.Text, role.ButtonText):
        pal.setColor(QPalette.ColorGroup.Disabled, r, QColor(c.muted))
    app.setPalette(pal)
    app.setStyleSheet(STYLE.format(c=c, **_assets(c)))
    from app.qt import icons

    icons.clear_cache()
    return c


def _assets(c: Colors) -> dict:
    """Arrow and check-mark SVGs in the palette's colours, written once per colour set (QSS needs files)."""
    import os
    import tempfile

    folder = os.path.join(tempfile.gettempdir(), f"chatterbox-studio-theme-{os.getuid() if hasattr(os, 'getuid') else 0}")
    os.makedirs(folder, exist_ok=True)
    shapes = {
        "up": ("M6 15l6-6 6 6", c.text), "down": ("M6 9l6 6 6-6", c.text),
        "check": ("M5 12.5l4.5 4.5L19 7.5", c.accent_text),
    }
    out = {}
    for name, (d, color) in shapes.items():
        path = os.path.join(folder, f"{name}-{color.lstrip('#')}.svg")
        if not os.path.exists(path):
            with open(path, "w", encoding="utf-8") as f:
                f.write(f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><path d="{d}" fill="none" '
                        f'stroke="{color}" stroke-width="2.6" stroke-linecap="round" stroke-linejoin="round"/></svg>')
        out[name] = path.replace(os.sep, "/")
    return out


STYLE = """
QMainWindow, QDialog {{ background: {c.window}; }}
QToolBar {{ background: {c.panel}; border: none; border-bottom: 1px solid {c.border}; spacing: 8px; padding: 6px 10px; }}
QToolBar QLabel {{ color: {c.muted}; padding-left: 6px; }}
QStatusBar {{ background: {c.panel}; color: {c.muted}; border-top: 1px solid {c.border}; }}
QStatusBar QLabel {{ color: {c.muted}; padding: 0 8px; }}
QFrame#Card {{ background: {c.panel}; border: 1px solid {c.border}; border-radius: 8px; }}
QLabel#CardTitle {{ font-weight: 600; font-size: 11pt; color: {c.text}; }}
QLabel#Muted {{ color: {c.muted}; }}
QLabel#Value {{ color: {c.text}; font-weight: 600; }}
QLabel#Time {{ font-family: monospace; font-size: 11pt; color: {c.text}; }}
QLabel#Error {{ color: {c.error}; }}
QLabel#Banner {{ background: {c.alt_base}; border: 1px solid {c.border}; border-radius: 6px; padding: 8px 10px; }}
QPushButton, QToolButton {{ background: {c.button}; border: 1px solid {c.border}; border-radius: 6px; padding: 5px 12px; }}
QToolBar QToolButton {{ padding: 4px 8px; }}
QPushButton:hover, QToolButton:hover {{ border-color: {c.accent}; }}
QPushButton:checked, QToolButton:checked {{ background: {c.accent}; color: {c.accent_text}; border-color: {c.accent}; }}
QPushButton:disabled, QToolButton:disabled {{ color: {c.muted}; background: {c.panel}; }}
QPushButton#Primary {{ background: {c.accent}; color: {c.accent_text}; border-color: {c.accent}; font-weight: 600; }}
QPushButton#Primary:disabled {{ background: {c.panel}; color: {c.muted}; border-color: {c.border}; }}
QPushButton#Round {{ border-radius: 20px; min-width: 40px; max-width: 40px; min-height: 40px; max-height: 40px; padding: 0; }}
QLineEdit, QPlainTextEdit, QTextEdit, QListWidget, QTreeWidget, QSpinBox, QDoubleSpinBox, QComboBox {{
    background: {c.base}; border: 1px solid {c.border}; border-radius: 6px; padding: 4px 6px;
    selection-background-color: {c.accent}; }}
QComboBox {{ padding: 4px 8px; min-height: 20px; }}
QPlainTextEdit#Script {{ font-size: 12pt; padding: 10px; }}
QLineEdit:focus, QPlainTextEdit:focus, QSpinBox:focus, QDoubleSpinBox:focus, QComboBox:focus {{ border-color: {c.accent}; }}
QListWidget::item {{ padding: 7px 6px; border-radius: 5px; }}
QListWidget::item:selected {{ background: {c.accent}; color: {c.accent_text}; }}
QListWidget::item:hover:!selected {{ background: {c.alt_base}; }}
QProgressBar {{ background: {c.base}; border: 1px solid {c.border}; border-radius: 4px; max-height: 8px; text-align: center; }}
QProgressBar::chunk {{ background: {c.accent}; border-radius: 3px; }}
QSplitter::handle {{ background: {c.window}; }}
QGroupBox {{ border: 1px solid {c.border}; border-radius: 8px; margin-top: 14px; padding: 10px 8px 8px 8px; }}
QGroupBox::title {{ subcontrol-origin: margin; left: 10px; padding: 0 4px; color: {c.muted}; }}
QTabWidget::pane {{ border: none; }}
QScrollBar:vertical {{ background: transparent; width: 10px; margin: 2px; }}
QScrollBar::handle:vertical {{ background: {c.border}; border-radius: 4px; min-height: 24px; }}
QScrollBar::add-line, QScrollBar::sub-line {{ height: 0; width: 0; }}
QCheckBox {{ spacing: 6px; }}
QAbstractSpinBox {{ padding-right: 20px; padding-left: 6px; }}
QAbstractSpinBox:disabled, QLineEdit:disabled {{ color: {c.muted}; background: {c.alt_base}; }}
QAbstractSpinBox::up-button {{ subcontrol-origin: border; subcontrol-position: top right; width: 20px; border: none; background: transparent; }}
QAbstractSpinBox::down-button {{ subcontrol-origin: border; subcontrol-position: bottom right; width: 20px; border: none; background: transparent; }}
QAbstractSpinBox::up-arrow {{ image: url({up}); width: 10px; height: 10px; }}
QAbstractSpinBox::down-arrow {{ image: url({down}); width: 10px; height: 10px; }}
QAbstractSpinBox::up-arrow:disabled, QAbstractSpinBox::down-arrow:disabled {{ image: none; }}
QComboBox::drop-down {{ border: none; width: 24px; }}
QComboBox::down-arrow {{ image: url({down}); width: 10px; height: 10px; }}
QComboBox QAbstractItemView {{ background: {c.base}; border: 1px solid {c.border}; selection-background-color: {c.accent}; }}
QCheckBox::indicator, QListWidget::indicator, QTableView::indicator {{ width: 14px; height: 14px; border: 1px solid {c.muted}; border-radius: 4px; background: {c.base}; }}
QCheckBox::indicator:checked, QListWidget::indicator:checked, QTableView::indicator:checked {{ background: {c.accent}; border-color: {c.accent}; image: url({check}); }}
QPushButton::menu-indicator {{ image: url({down}); width: 9px; height: 9px; subcontrol-position: right center; subcontrol-origin: padding; right: 6px; }}
QToolButton::menu-indicator {{ image: none; width: 0; }}
QToolTip {{ border: 1px solid {c.border}; padding: 4px; }}
"""
