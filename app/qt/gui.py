"""Entry point of the desktop app (`chatterbox-studio` with no arguments)."""

from __future__ import annotations

import os
import sys

from PySide6.QtCore import QCoreApplication, QSettings, QTimer
from PySide6.QtWidgets import QApplication

from app.core.paths import APP, ORG  # named once (engine_native.paths): the data folder and the settings file


def qt_problem() -> str | None:
    """A known-broken Qt binding for this Python, worded for the user; None when fine.

    PySide6 6.12.0 releases a reference to None/True/False on every call of a Qt method
    returning void or bool. Python 3.12+ makes those objects immortal, so nothing happens
    there; on 3.11 their count reaches zero within minutes and the interpreter aborts.
    """
    import PySide6

    if PySide6.__version__ == "6.12.0" and sys.version_info < (3, 12):
        return ("PySide6 6.12.0 crashes on Python 3.11 (it over-releases None, True and False). "
                "Install another version, e.g. pip install 'PySide6-Essentials>=6.6,<6.12'.")
    return None


def make_app(argv: list[str] | None = None) -> QApplication:
    app = QApplication.instance() or QApplication(argv if argv is not None else sys.argv)
    QCoreApplication.setOrganizationName(ORG)
    QCoreApplication.setApplicationName(APP)
    app.setApplicationDisplayName("Chatterbox Studio")
    app.setDesktopFileName("chatterbox-studio")
    return app


def user_settings():
    from app.qt.settings import Settings

    return Settings(QSettings(QSettings.IniFormat, QSettings.UserScope, ORG, APP))


def create_main_window(settings=None, data_dir: str | None = None):
    """The main window as the app builds it (theme applied, the saved model loading); not shown."""
    from app.qt import theme
    from app.qt.main_window import MainWindow

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


def run(argv: list[str] | None = None, files: list[str] | tuple = ()) -> int:
    """The app: hands `files` to an app already running for this user (and exits), else opens
    the window with them (app.qt.file_opener) and answers later launches (app.qt.single_instance)."""
    from app.core.open_files import MODEL, kind_by_name
    from app.core.paths import app_data_dir, legacy_data_dir, migrate_legacy_data_dir
    from app.qt.single_instance import InstanceServer, hand_off

    app = make_app(argv)
    if hand_off(files):
        return 0
    settings = user_settings()
    migrate_legacy_data_dir()
    settings.replace_prefix(legacy_data_dir(), app_data_dir())
    window = create_main_window(settings)
    window.tour_enabled = True
    window.instance_server = InstanceServer(window.open_files, parent=window)
    window.show()
    if files:
        QTimer.singleShot(0, lambda: window.open_files(list(files)))
    given_model = any(kind_by_name(f) == MODEL for f in files)
    if not settings.model_choice_made and not settings.model_path and not given_model:
        QTimer.singleShot(300, lambda: window.choose_model(first_run=True))
    return app.exec()


if __name__ == "__main__":
    raise SystemExit(run())
