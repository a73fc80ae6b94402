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
    silence: str
    window_sel: str
    playhead: str
    highlight_sentence: str
    error: str


DARK = Colors(
    window="#1e2126", base="#16181c", alt_base="#1b1e22", panel="#252930", text="#e3e6ea", muted="#8b929c",
    button="#2c3139", border="#363c45", accent="#4f9dff", accent_text="#ffffff", wave="#6fb3ff",
    wave_dim="#3a5a80", speech="#2f6b4a", silence="#3a2f33", window_sel="#ffcc66", playhead="#ff6b6b",
    highlight_sentence="#3a4f6e", error="#ff7b72",
)
LIGHT = Colors(
    window="#f3f4f6", base="#ffffff", alt_base="#f7f8fa", panel="#e9ebef", text="#1d2127", muted="#6a717c",
    button="#ffffff", border="#cfd4db", accent="#2f74d0", accent_text="#ffffff", wave="#2f74d0",
    wave_dim="#a9c4ea", speech="#cfe8d8", silence="#f1dede", window_sel="#d48a00", playhead="#d64545",
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
    app.setStyleSheet(STYLE.format(c=c))
    from app import icons

    icons.clear_cache()
    return c


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
QToolTip {{ border: 1px solid {c.border}; padding: 4px; }}
"""
