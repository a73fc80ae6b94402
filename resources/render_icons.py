"""Render resources/chatterbox-studio.svg into the PNG sizes a desktop asks for.

Uses Qt's own SVG renderer (PySide6 is already a dependency), so no extra tool is
needed:  QT_QPA_PLATFORM=offscreen python resources/render_icons.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

SIZES = (16, 32, 48, 64, 128, 256, 512)
HERE = Path(__file__).resolve().parent


def render(svg: Path = HERE / "chatterbox-studio.svg", out_dir: Path = HERE / "icons") -> list[Path]:
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import Qt
    from PySide6.QtGui import QGuiApplication, QImage, QPainter
    from PySide6.QtSvg import QSvgRenderer

    app = QGuiApplication.instance() or QGuiApplication(sys.argv[:1])  # noqa: F841  (QPainter needs one)
    renderer = QSvgRenderer(str(svg))
    if not renderer.isValid():
        raise SystemExit(f"render_icons: {svg} is not a valid SVG")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for size in SIZES:
        image = QImage(size, size, QImage.Format.Format_ARGB32_Premultiplied)
        image.fill(Qt.GlobalColor.transparent)
        painter = QPainter(image)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform)
        renderer.render(painter)
        painter.end()
        path = out_dir / f"chatterbox-studio-{size}.png"
        if not image.save(str(path), "PNG"):
            raise SystemExit(f"render_icons: cannot write {path}")
        written.append(path)
    return written


if __name__ == "__main__":
    for p in render():
        print(p)
