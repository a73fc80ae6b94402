"""The editor's script tools (pytest-qt): the model's expression tags in an insert menu and
as completions of "[", and timed pauses."""

from __future__ import annotations

import pytest

pytest.importorskip("pytestqt")

from app.qt.script_editor import ScriptEditor  # noqa: E402

TAGS = ["[laugh]", "[chuckle]", "[sigh]", "[clear throat]", "[pause]"]


@pytest.fixture
def editor(qtbot):
    ed = ScriptEditor()
    qtbot.addWidget(ed)
    ed.tags.set_tags(TAGS)
    ed.show()
    return ed


def test_insert_menu_offers_the_models_tags_and_timed_pauses(editor):
    names = [a.text() for a in editor.tags.menu.actions() if a.text()]
    assert names[:len(TAGS)] == TAGS and "[pause 0.5s]" in names
    editor.set_text("Well that was odd.")
    c = editor.edit.textCursor()
    c.setPosition(4)
    editor.edit.setTextCursor(c)
    next(a for a in editor.tags.menu.actions() if a.text() == "[laugh]").trigger()
    assert editor.text() == "Well [laugh] that was odd."
    next(a for a in editor.tags.menu.actions() if a.text() == "[pause 1s]").trigger()
    assert editor.text() == "Well [laugh] [pause 1s] that was odd."


def test_typing_a_bracket_completes_a_tag(editor, qtbot):
    editor.edit.setFocus()
    editor.set_text("")
    qtbot.keyClicks(editor.edit, "Oh [cl")
    assert editor.tags.completer.completionPrefix() == "[cl"
    assert editor.tags.completer.currentCompletion() == "[clear throat]"
    editor.tags.complete(editor.tags.completer.currentCompletion())
    assert editor.text() == "Oh [clear throat]"


def test_tags_of_a_model_file_are_read_from_its_metadata():
    from engine_native.tags import model_expression_tags
    from tests.helpers.models import model_path

    tags = model_expression_tags(model_path("nano", "q4_0"))
    assert len(tags) == 19 and tags[0] == "[laugh]" and "[pause]" in tags
