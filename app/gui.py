"""Entry point of the desktop app (`chatterbox-studio` with no arguments)."""

from __future__ import annotations

import os
import sys

from PySide6.QtCore import QCoreApplication, QSettings, QTimer
from PySide6.QtWidgets import QApplication

ORG = "chatterbox-studio"
APP = "chatterbox-studio"


def make_app(argv: list[str] | None = None) -> QApplication:
    app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv)
    QCoreApplication.setOrganizationName(ORG)
    QCoreApplication.setApplicationName(APP)
    app.setApplicationDisplayName("Chatterbox Studio")
    app.setDesktopFileName("chatterbox-studio")
    return app


def user_settings():
    from app.settings import Settings

    return Settings(QSettings(QSettings.IniFormat, QSettings.UserScope, ORG, APP))


def create_main_window(settings=None, data_dir: str | None = None):
    """The main window as the app builds it (theme applied, saved model loading); not shown."""
    from app import theme
    from app.main_window import MainWindow

    app = make_app()
    settings = settings or user_settings()
    theme.apply(app, settings.theme)
    window = MainWindow(settings, data_dir)
    if settings.model_path and os.path.isfile(settings.model_path):
        window.load_model(settings.model_path)
    elif settings.model_path:
        window.show_error(f"The model file {settings.model_path} is gone.",
                          action=("Choose model…", lambda: window.choose_model()))
    return window


def run(argv: list[str] | None = None) -> int:
    app = make_app(argv)
    window = create_main_window()
    window.show()
    if not window.settings.model_choice_made and not window.settings.model_path:
        QTimer.singleShot(300, lambda: window.choose_model(first_run=True))
    return app.exec()


if __name__ == "__main__":
    raise SystemExit(run())
