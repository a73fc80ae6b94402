"""Expression tags: the paralinguistic tags a model's tokenizer holds as added tokens.

Chatterbox Turbo's GPT-2 tokenizer has added tokens such as `[laugh]`, `[chuckle]`,
`[clear throat]` or `[pause]`; written in the text, each becomes its one token id and T3
renders the sound. The converter stores the added tokens' ids in the model file
(`chatterbox.added_tokens.id`, with their flags); their text is the tokenizer's own
decoding of each id. An expression tag is an added token that is not special (not
`<|endoftext|>`) and is written `[words]`. A model without added tokens has none.

`punc_norm` leaves `[...]` alone and the tokenizer matches added tokens before BPE, so a
tag written exactly (lower case, as listed) reaches T3 as its id; `canonical_tags` fixes
the case of a tag typed as `[Laugh]`. A *timed* pause (`[pause 0.5s]`) is not a tag:
`engine_native.script` turns it into silence before any text reaches the tokenizer.
"""

from __future__ import annotations

import re

_TAG = re.compile(r"\[[^\[\]\s][^\[\]]*\]")
_KEY = "chatterbox.added_tokens.id"


def read_expression_tags(model_file, tokenizer) -> list[str]:
    """The tags of a loaded model (`_core.ModelFile`, `_core.Gpt2Tokenizer`), in id order."""
    if not model_file.has_key(_KEY):
        return []
    out = []
    for i in model_file.get_int_array(_KEY):
        text = tokenizer.decode([int(i)])
        if _TAG.fullmatch(text) and text not in out:
            out.append(text)
    return out


def find_tags(text: str, tags) -> list[tuple[int, int, str]]:
    """(start, end, tag) of every known tag in `text` (case-insensitive)."""
    known = {t.lower(): t for t in tags}
    return [(m.start(), m.end(), known[m.group(0).lower()]) for m in _TAG.finditer(text)
            if m.group(0).lower() in known]


def canonical_tags(text: str, tags) -> str:
    """`text` with every known tag written as the tokenizer holds it (`[Laugh]` -> `[laugh]`);
    the length of each tag is unchanged, so character spans stay valid."""
    if not tags:
        return text
    out, pos = [], 0
    for start, end, tag in find_tags(text, tags):
        out += [text[pos:start], tag]
        pos = end
    out.append(text[pos:])
    return "".join(out)


def model_expression_tags(path) -> list[str]:
    """The tags of a model file, from its metadata only (no weights loaded): for a front end
    that knows the model's path but not its Engine."""
    from engine_native import _core

    class _Meta:
        def __init__(self, reader):
            self.r = reader

        def has_key(self, k):
            return self.r.get_field(k) is not None

        def get_int_array(self, k):
            return [int(x) for x in self.r.get_field(k).contents()]

    from gguf import GGUFReader

    return read_expression_tags(_Meta(GGUFReader(str(path))), _core.Gpt2Tokenizer(str(path)))
