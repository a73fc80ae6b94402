"""The model manager dialog (and the welcome dialog's way to it) on the offscreen platform: the
installed models listed with variant, precision, size, languages and source, "Use", a download
from the Hub stand-in (tests/helpers/hub_server.py) paused, shown as paused by a new dialog (a
restart) and resumed, its progress with speed and time left, and a failure shown as a message.
The download is the random Nano snapshot's small files under a catalogue entry of their own."""

from __future__ import annotations

import os
import shutil
import time

import pytest

pytest.importorskip("pytestqt")

from app.core.model_manager import ModelManager  # noqa: E402
from tests.helpers.hub_server import small_files_hub  # noqa: E402
from tests.helpers.main_window import _close, _make_window, _wait  # noqa: E402

@pytest.fixture
def hub_and_catalogue(tmp_path, monkeypatch):
    with small_files_hub(tmp_path, monkeypatch) as served:
        yield served


@pytest.fixture(scope="module")
def model():
    from tests.helpers.models import model_path

    return str(model_path("nano", "q4_0"))


def test_installed_models_are_listed_and_one_is_used(qtbot, tmp_path, model):
    from app.qt.model_manager_dialog import ModelManagerDialog

    models = tmp_path / "models"
    models.mkdir()
    placed = models / "chatterbox-nano-q4_0.gguf"
    os.link(model, placed) if os.stat(model).st_dev == os.stat(models).st_dev else shutil.copy(model, placed)
    ModelManager(str(models)).record(str(placed), {"repo": "ResembleAI/chatterbox-nano", "revision": "0123456789abcdef"})
    dlg = ModelManagerDialog(str(models))
    qtbot.addWidget(dlg)
    dlg.show()
    _wait(qtbot, lambda: dlg.models, 30, "the list")
    row = dlg.table.topLevelItem(0)
    cells = [row.text(c) for c in range(5)]
    print("\nrow:", cells)
    assert cells[0] == "Chatterbox Nano" and cells[1] == "q4_0" and cells[2].endswith(" MB") and cells[3] == "en"
    assert cells[4] == "ResembleAI/chatterbox-nano @ 0123456789"
    assert dlg.entry_notes["nano"].text() == "installed"
    chosen = []
    dlg.modelChosen.connect(chosen.append)
    dlg.table.setCurrentItem(row)
    dlg.use_button.click()
    assert chosen == [str(placed)] and not dlg.isVisible()


def test_a_download_pauses_resumes_after_a_restart_and_a_failure_is_a_message(qtbot, tmp_path, hub_and_catalogue):
    from app.qt.model_manager_dialog import ModelManagerDialog

    hub, catalogue = hub_and_catalogue
    models = str(tmp_path / "models")
    dlg = ModelManagerDialog(models, catalogue=catalogue)
    qtbot.addWidget(dlg)
    dlg.show()
    hub.hold["ve.safetensors"] = 2_000_000
    op = dlg.get("tiny", "q4_0")
    assert dlg.progress_frame.isVisible() and dlg.pause_button.isVisible()
    assert not dlg.get_buttons["tiny"].isEnabled()
    _wait(qtbot, lambda: "ve.safetensors" in dlg.detail.text(), 60, "ve.safetensors to download")
    progress_text = dlg.detail.text()
    print("\nprogress:", progress_text)
    assert "Downloading ve.safetensors" in progress_text and " of " in progress_text
    dlg.pause_button.click()
    assert dlg.detail.text() == "Pausing…"
    hub.release.set()
    _wait(qtbot, lambda: not op.running, 30, "the pause")
    _wait(qtbot, lambda: dlg.resume_button.isVisible(), 30, "the paused state")
    print("paused:", dlg.progress_title.text(), "|", dlg.detail.text())
    assert dlg.progress_title.text().startswith("Paused: Chatterbox Nano (q4_0)")
    assert dlg.discard_button.isVisible() and not dlg.pause_button.isVisible()
    assert dlg.get_buttons["tiny"].text() == " Resume" and dlg.entry_notes["tiny"].text().startswith("paused: ")
    dlg.hide()

    # A restart: a new dialog finds the paused download and resumes it.
    hub.hold.clear()
    again = ModelManagerDialog(models, catalogue=catalogue)
    qtbot.addWidget(again)
    again.show()
    _wait(qtbot, lambda: again.resume_button.isVisible(), 30, "the paused download in a new dialog")
    before = len(hub.gets("ve.safetensors"))
    op = again.resume()
    _wait(qtbot, lambda: not op.running, 120, "the download and conversion")
    assert hub.gets("ve.safetensors")[before].startswith("bytes=")  # resumed, not started over
    # The small files are not a whole snapshot: the conversion fails, and says why.
    print("message:", again.message.text())
    assert "no Chatterbox T3 checkpoint" in again.message.text() and "Traceback" not in again.message.text()
    assert again.get_buttons["tiny"].isEnabled()
    (pending,) = ModelManager(models, catalogue).pending()
    assert pending.have == pending.total  # every file is there (and verified), kept for another try
    d = again.discard("tiny")
    _wait(qtbot, lambda: not d.running, 30, "the discard")
    assert ModelManager(models, catalogue).pending() == []


def test_the_welcome_dialog_leads_to_the_model_manager(qtbot, tmp_path):
    w = _make_window(tmp_path)
    qtbot.addWidget(w)
    w.show()
    dlg = w.choose_model(first_run=True)
    assert dlg.windowTitle() == "Welcome" and dlg.download_button.isEnabled()
    dlg.download_button.click()
    _wait(qtbot, lambda: w.models.manager_dialog is not None and w.models.manager_dialog.isVisible(), 10,
          "the model manager")
    assert not dlg.isVisible() and w.settings.model_choice_made
    manager = w.models.manager_dialog
    assert [b.text() for b in manager.get_buttons.values()] == [" Download"] * 3
    # the toolbar's model button opens the same manager later
    manager.hide()
    w.toolbar.model_button.click()
    assert w.models.manager_dialog is manager and manager.isVisible()
    time.sleep(0.1)
    _close(w)
