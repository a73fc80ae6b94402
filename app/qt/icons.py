"""A small set of line icons drawn as 24x24 SVG, tinted to the palette's text colour."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QRectF, Qt
from PySide6.QtGui import QColor, QIcon, QPainter, QPixmap
from PySide6.QtSvg import QSvgRenderer

_STROKE = ('fill="none" stroke="{c}" stroke-width="1.8" stroke-linecap="round" '
           'stroke-linejoin="round"')
_FILL = 'fill="{c}" stroke="none"'

_PATHS = {
    "play": f'<path {_FILL} d="M8 5.5v13l10.5-6.5z"/>',
    "stop": f'<rect {_FILL} x="6.5" y="6.5" width="11" height="11" rx="1.5"/>',
    "add": f'<path {_STROKE} d="M12 5v14M5 12h14"/>',
    "voice": f'<g {_STROKE}><rect x="9" y="3" width="6" height="11" rx="3"/>'
             '<path d="M5.5 11a6.5 6.5 0 0 0 13 0M12 17.5V21M8.5 21h7"/></g>',
    "trash": f'<g {_STROKE}><path d="M4.5 7h15M10 7V4.5h4V7M6.5 7l1 13h9l1-13M10 11v6M14 11v6"/></g>',
    "rename": f'<g {_STROKE}><path d="M4 20h4L19 9l-4-4L4 16z"/><path d="M13.5 6.5l4 4"/></g>',
    "speaker": f'<g {_STROKE}><path d="M4 9.5h3.5L12 5.5v13l-4.5-4H4z"/>'
               '<path d="M15.5 9a4.5 4.5 0 0 1 0 6M18 6.5a8 8 0 0 1 0 11"/></g>',
    "export": f'<g {_STROKE}><path d="M12 4v11M7.5 10.5L12 15l4.5-4.5M5 19.5h14"/></g>',
    "open": f'<g {_STROKE}><path d="M3.5 6.5a1.5 1.5 0 0 1 1.5-1.5h4l2 2h8a1.5 1.5 0 0 1 1.5 1.5V18a1.5 1.5 0 0 1-1.5 '
            '1.5H5A1.5 1.5 0 0 1 3.5 18z"/></g>',
    "regenerate": f'<g {_STROKE}><path d="M19 12a7 7 0 1 1-2.05-4.95"/><path d="M19.5 4.5v4h-4"/></g>',
    "save": f'<g {_STROKE}><path d="M5 4.5h11l3 3V19.5H5z"/><path d="M8 4.5v5h7v-5M8 19.5v-5h8v5"/></g>',
    "keyboard": f'<g {_STROKE}><rect x="3" y="6.5" width="18" height="11" rx="2"/>'
                '<path d="M7 10.5h.01M10.3 10.5h.01M13.6 10.5h.01M17 10.5h.01M8 14h8"/></g>',
    "history": f'<g {_STROKE}><path d="M4.5 12a7.5 7.5 0 1 0 2.2-5.3"/><path d="M4 4.5v3.5h3.5M12 8v4.5l3 2"/></g>',
    "back": f'<g {_STROKE}><path d="M19 12H5M11 6l-6 6 6 6"/></g>',
    "sliders": f'<g {_STROKE}><path d="M5 6h9M18 6h1M5 12h3M12 12h7M5 18h11M19 18h0"/>'
               '<circle cx="16" cy="6" r="2"/><circle cx="10" cy="12" r="2"/><circle cx="18" cy="18" r="2"/></g>',
    "clone": f'<g {_STROKE}><path d="M3 12h2M6.5 8v8M10 5v14M13.5 9v6M17 7v10M20.5 11v2"/></g>',
    "search": f'<g {_STROKE}><circle cx="10.5" cy="10.5" r="6"/><path d="M15 15l5 5"/></g>',
    "model": f'<g {_STROKE}><rect x="6" y="6" width="12" height="12" rx="2"/>'
             '<path d="M9 3v3M15 3v3M9 18v3M15 18v3M3 9h3M3 15h3M18 9h3M18 15h3"/></g>',
    "up": f'<g {_STROKE}><path d="M12 19V5M6 11l6-6 6 6"/></g>',
    "down": f'<g {_STROKE}><path d="M12 5v14M6 13l6 6 6-6"/></g>',
    "check": f'<g {_STROKE}><path d="M5 12.5l4.5 4.5L19 7.5"/></g>',
    "ab": f'<g {_STROKE}><path d="M3.5 17l3.5-10 3.5 10M4.7 13.5h4.6M14 7h3.5a2.5 2.5 0 0 1 0 5H14zm0 5h4a2.5 2.5 0 0 1 '
          '0 5h-4z"/></g>',
}

_cache: dict[tuple[str, str], QIcon] = {}


def _pixmap(name: str, color: str, size: int, opacity: float = 1.0) -> QPixmap:
    body = _PATHS[name].format(c=color)
    svg = f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 24 24"><g opacity="{opacity}">{body}</g></svg>'
    renderer = QSvgRenderer(QByteArray(svg.encode()))
    pm = QPixmap(size, size)
    pm.fill(Qt.transparent)
    p = QPainter(pm)
    p.setRenderHint(QPainter.Antialiasing)
    renderer.render(p, QRectF(0, 0, size, size))
    p.end()
    return pm


def icon(name: str, color: QColor | str | None = None) -> QIcon:
    """The named icon in `color` (default: the application palette's text colour)."""
    from PySide6.QtWidgets import QApplication

    pal = QApplication.palette()
    c = QColor(color) if color is not None else pal.color(pal.ColorRole.ButtonText)
    key = (name, c.name())
    if key not in _cache:
        ic = QIcon()
        for size in (16, 20, 24, 32, 48):
            ic.addPixmap(_pixmap(name, c.name(), size), QIcon.Normal)
            ic.addPixmap(_pixmap(name, c.name(), size, 0.35), QIcon.Disabled)
        _cache[key] = ic
    return _cache[key]


def clear_cache() -> None:
    _cache.clear()
