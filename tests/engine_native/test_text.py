"""engine_native/text.py: sentences of a text (split_text) for every script the models read."""

from __future__ import annotations

import pytest

from engine_native.text import split_text


def test_split_text():
    s = split_text("Hello there. how are you?I am fine!\nA list item\n...  \n  Dr.Who is here.  ")
    assert [x.text for x in s] == ["Hello there.", "how are you?", "I am fine!", "A list item", "Dr.Who is here."]
    text = "Mr. Smith went to St. Ives. Then he came back... Done"
    assert [text[x.start:x.end] for x in split_text(text)] == ["Mr. Smith went to St. Ives.", "Then he came back...",
                                                                "Done"]
    long = "word, " * 200 + "end."
    pieces = split_text(long)
    assert len(pieces) > 1 and all(len(p.text) <= 300 for p in pieces)
    assert split_text("... -- !!") == []
    # the Multilingual model's scripts: CJK full stops need no space; danda and ؟ do
    assert [x.text for x in split_text("你好。今天天气很好！真的吗？是的")] == ["你好。", "今天天气很好！", "真的吗？", "是的"]
    assert [x.text for x in split_text("नमस्ते। आप कैसे हैं?")] == ["नमस्ते।", "आप कैसे हैं?"]
    assert [x.text for x in split_text("مرحبا؟ كيف حالك.")] == ["مرحبا؟", "كيف حالك."]


@pytest.mark.timeout(60)
def test_splitting_is_linear_in_the_text():
    unit = "This is a sentence, Mr. Jones said. "   # one sentence; "Mr." must not split it
    big = unit * (1_000_000 // len(unit))           # 1 MB: a quadratic split never returns
    pieces = split_text(big)
    assert len(pieces) == big.count("said.") and pieces[0].text == unit.strip()
