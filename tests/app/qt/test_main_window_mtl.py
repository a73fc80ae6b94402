"""The app with a Multilingual model: the language picker (Auto names its guess), exaggeration
and guidance in the sampling panel, a take in a chosen language, a voice made with another
model variant re-made from the recording kept beside it, and the picker gone again for a
Turbo-family model. Real engine, reduced-size random MTL weights (`mtl-small`, F32), real
window (offscreen), real audio output (the ALSA null device in CI)."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("pytestqt")
from PySide6.QtCore import Qt  # noqa: E402

from tests.helpers import audio_fixtures  # noqa: E402
from tests.helpers.main_window import _close, _make_window, _wait, load_and_wait  # noqa: E402

MAX_TOKENS = 30


@pytest.fixture(scope="module")
def mtl_model():
    from tests.helpers.models import model_path

    return str(model_path("mtl", "f32", size="small"))


@pytest.fixture(scope="module")
def window(qapp, mtl_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("studio-mtl")
    w = _make_window(folder)
    w.resize(1280, 780)
    w.show()
    load_and_wait(w, mtl_model)
    w.sampling_panel.spins["max_tokens"].setValue(MAX_TOKENS)
    w.sampling_panel.spins["cfm_steps"].setValue(2)
    w.sampling_panel.seed_random.setChecked(False)
    w.sampling_panel.seed_spin.setValue(3)
    yield w
    _close(w)


def _combo_codes(w) -> list:
    return [w.toolbar.language_combo.itemData(i) for i in range(w.toolbar.language_combo.count())]


def test_language_picker_lists_the_models_languages_and_names_its_guess(window, qtbot):
    w = window
    assert w.toolbar.language_combo.isVisibleTo(w)
    codes = _combo_codes(w)
    assert codes[0] == "" and len(codes) == 1 + len(w.client.languages) == 24
    assert set(codes[1:]) == set(w.client.languages)
    w.toolbar.language_combo.setCurrentIndex(0)
    for text, name in [("今天天气很好。", "Chinese"), ("Καλημέρα σας, φίλοι μου.", "Greek"),
                       ("Привет, как дела?", "Russian")]:
        w.editor.set_text(text)
        _wait(qtbot, lambda n=name: w.toolbar.language_combo.itemText(0) == f"Auto · {n}", 5, f"the guess {name}")
    assert w.params()["language"] is None  # Auto: the engine guesses per text (and logs it)
    w.toolbar.language_combo.setCurrentIndex(w.toolbar.language_combo.findData("fr"))
    assert w.settings.language == "fr" and w.params()["language"] == "fr"


def test_sampling_panel_offers_exaggeration_and_guidance_with_the_models_defaults(window):
    w = window
    panel = w.sampling_panel
    for key in ("exaggeration", "cfg_weight"):
        assert panel.spins[key].isVisibleTo(panel)
        assert key in w.client.defaults
    panel.spins["exaggeration"].setValue(0.8)
    p = w.params()
    assert p["exaggeration"] == pytest.approx(0.8) and p["cfg_weight"] == pytest.approx(panel.spins["cfg_weight"].value())
    # the reference samples a Multilingual model without top-k: the panel shows "off" and sends None
    assert w.client.defaults["top_k"] is None and panel.spins["top_k"].text() == "off" and p["top_k"] is None


def test_a_take_in_the_chosen_language_plays(window, qtbot):
    w = window
    w.library.select("")
    w.toolbar.language_combo.setCurrentIndex(w.toolbar.language_combo.findData("fr"))
    w.editor.set_text("Bonjour à tous.")
    qtbot.mouseClick(w.editor.play_button, Qt.LeftButton)
    c = w.controller
    _wait(qtbot, lambda: c.state == "idle" and c.take is not None and c.take.frames > 0, 600, "the take")
    assert not w.last_error, w.last_error
    audio = c.take.samples
    assert c.take.duration > 0.2 and np.isfinite(audio).all() and np.abs(audio).max() > 0


def test_a_voice_of_another_variant_is_remade_from_its_recording(window, qtbot, tmp_path):
    """A library voice saved by a Turbo-family model, with its recording beside it: the
    Multilingual model re-makes it (on the engine thread) and speaks with it; the library
    says which model it was made with."""
    if not audio_fixtures.tools_available():
        pytest.skip("the recording fixture needs its tools")
    from app.qt.library_panel import subtitle
    from engine_native import Engine
    from tests.helpers.models import model_path

    w = window
    rec = audio_fixtures.build_recording(str(tmp_path), layout=(0.5, 7.0, 0.5))
    nano = Engine(str(model_path("nano", "q4_0")))
    voice = nano.voice_from_audio(rec.samples, rec.rate)
    del nano
    path = w.store.add(voice, "Nano speaker", clip=(rec.samples, rec.rate))
    assert os.path.exists(path[: -len(".voice.gguf")] + ".wav")
    w.library.reload(select=path)
    _wait(qtbot, lambda: not w.library.busy, 60, "the library read")
    entry = w.library.current_entry()
    assert entry.path == path and entry.variant == "nano" and "Nano" in subtitle(entry)
    assert "re-made" in w.library.list.currentItem().toolTip()
    w.editor.set_text("Hello again.")
    w.toolbar.language_combo.setCurrentIndex(w.toolbar.language_combo.findData("en"))
    qtbot.mouseClick(w.editor.play_button, Qt.LeftButton)
    c = w.controller
    _wait(qtbot, lambda: c.state == "idle" and c.take is not None and c.take.frames > 0, 600, "the take")
    assert not w.last_error, w.last_error
    remade = w.client.worker._voices[path][1]
    assert remade.variant == "mtl" and remade.meta.get("remade_from") == "nano"


def test_the_decoder_menu_loads_turbos_decoder_and_one_gone_leaves_the_models_own(window, qtbot, tmp_path):
    """The ⋯ menu's Multilingual decoder: Turbo's S3Gen and HiFT decode the model's speech (the
    model reloads with it, the model button says so, a take plays); a decoder file gone since
    leaves the model's own S3Gen, and the status bar says why."""
    from tests.helpers.models import model_path

    w, models = window, window.models
    turbo = str(model_path("turbo"))
    loaded = []
    w.client.modelChanged.connect(loaded.append)
    try:
        models.fill_decoder_menu()  # no Turbo or Nano in the models folder yet: the menu says where one comes from
        first, *rest = models.decoder_menu.actions()
        assert first.text().startswith("Its own") and first.isChecked() and rest[-1].text().startswith("Get Turbo or Nano")
        models.set_decoder(turbo)
        _wait(qtbot, lambda: loaded and loaded[-1], 300, "the model with Turbo's decoder")
        assert loaded[-1]["decoder"] == turbo and loaded[-1]["variant"] == "mtl"
        assert w.toolbar.model_button.text().endswith("Turbo decoder")
        models.fill_decoder_menu()
        assert [a.text() for a in models.decoder_menu.actions() if a.isChecked()] == [os.path.basename(turbo)]
        w.editor.set_text("Bonjour à tous.")
        qtbot.mouseClick(w.editor.play_button, Qt.LeftButton)
        c = w.controller
        _wait(qtbot, lambda: c.state == "idle" and c.take is not None and c.take.frames > 0, 600, "the take")
        assert not w.last_error, w.last_error
        loaded.clear()
        models.set_decoder(str(tmp_path / "moved.gguf"))
        _wait(qtbot, lambda: loaded and loaded[-1], 300, "the model with its own S3Gen")
        assert loaded[-1]["decoder"] is None and "moved.gguf" in loaded[-1]["device_note"]
        assert not w.toolbar.model_button.text().endswith("Turbo decoder")
    finally:
        w.client.modelChanged.disconnect(loaded.append)
        loaded.clear()
        w.client.modelChanged.connect(loaded.append)
        models.set_decoder("")
        _wait(qtbot, lambda: loaded and loaded[-1], 300, "the model again")
        w.client.modelChanged.disconnect(loaded.append)


def test_the_status_bar_names_the_decoder_once_where_a_turbo_model_is_installed(window):
    """A Multilingual model loaded without a decoder while the models folder holds a Turbo model:
    the status bar says where the faster decoder is, once (remembered)."""
    from tests.helpers.models import model_path

    w = window
    link = os.path.join(w.models.models_dir(), "chatterbox-turbo-q4_0.gguf")
    os.makedirs(os.path.dirname(link), exist_ok=True)
    os.symlink(str(model_path("turbo")), link)
    try:
        assert not w.settings.decoder and not w.settings.decoder_tip_shown
        load_and_wait(w, str(model_path("mtl", "f32", size="small")))
        assert "Multilingual decoder" in w.statusBar().currentMessage() and w.settings.decoder_tip_shown
        assert any(a.text().startswith("Chatterbox Turbo's") for a in (w.models.fill_decoder_menu(),
                                                                       w.models.decoder_menu.actions())[1])
        w.statusBar().clearMessage()
        load_and_wait(w, str(model_path("mtl", "f32", size="small")))
        assert "Multilingual decoder" not in w.statusBar().currentMessage()  # once
    finally:
        os.remove(link)


def test_a_turbo_family_model_hides_the_picker_and_its_options(window, qtbot):
    from tests.helpers.models import model_path

    w = window
    load_and_wait(w, str(model_path("nano", "q4_0")))
    assert w.client.languages == {} and not any(a.isVisible() for a in w.toolbar.language_actions)
    _wait(qtbot, lambda: not w.toolbar.language_combo.isVisibleTo(w), 5, "the toolbar to hide the picker")
    assert not w.sampling_panel.spins["exaggeration"].isVisibleTo(w.sampling_panel)
    p = w.params()
    assert "language" not in p and "exaggeration" not in p and "cfg_weight" not in p
    assert p["top_k"] == w.client.defaults["top_k"] > 0  # Nano's own top-k back in the panel
