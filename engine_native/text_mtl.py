"""The Multilingual text front end: native normalisation and encoding, with the one step
that stays in Python between them (Japanese kanji -> hiragana through `pykakasi`).

    tok = MtlTokenizer("chatterbox-mtl.gguf")
    ids = tok.tokenize(punc_norm_mtl(text), "ja")        # == MTLTokenizer.text_to_tokens

`pykakasi` is GPL-3.0-or-later, so it is an optional extra (`pip install
'chatterbox-studio[ja]'`), never part of the MIT bundle. Without it Japanese text goes
through unchanged, exactly as the reference does without it (its ImportError branch), and
a warning says once what is missing and how to add it.
"""

from __future__ import annotations

import logging
import os
import threading
from pathlib import Path

import numpy as np

from engine_native import _core

log = logging.getLogger(__name__)

PYKAKASI_MISSING = ("Japanese: pykakasi is not installed, so kanji are passed through unconverted "
                    "(as the reference does without it). Add it with: pip install 'chatterbox-studio[ja]'")

_kakasi = None
_kakasi_state = None          # None: not tried; True: available; False: missing (warned once)
_kakasi_lock = threading.Lock()


def punc_norm_mtl(text: str) -> str:
    """`chatterbox.mtl_tts.punc_norm` (native)."""
    return _core.punc_norm_mtl(text)


def kakasi_available() -> bool:
    _load_kakasi()
    return bool(_kakasi_state)


def _load_kakasi():
    global _kakasi, _kakasi_state
    with _kakasi_lock:
        if _kakasi_state is None:
            try:
                import pykakasi
                _kakasi = pykakasi.kakasi()
                _kakasi_state = True
            except ImportError:
                _kakasi_state = False
                log.warning(PYKAKASI_MISSING)
        return _kakasi


def _is_kanji(c: str) -> bool:
    return 19968 <= ord(c) <= 40959


def _is_katakana(c: str) -> bool:
    return 12449 <= ord(c) <= 12538


def hiragana_normalize(text: str) -> str:
    """`tokenizer.hiragana_normalize`: kanji phrases -> hiragana (は/へ-initial ones get a
    leading space), everything else as written, then NFKD. Unchanged without pykakasi."""
    kakasi = _load_kakasi()
    if kakasi is None:
        return text
    out = []
    for r in kakasi.convert(text):
        inp, hira = r["orig"], r["hira"]
        if any(_is_kanji(c) for c in inp):
            if hira and hira[0] in ("は", "へ"):
                hira = " " + hira
            out.append(hira)
        else:
            out.append(inp)     # all-katakana and other phrases keep their original text
    return _core.mtl_nfkd("".join(out))


class MtlTokenizer:
    """The model's grapheme tokenizer with the Python language hooks."""

    def __init__(self, model):
        self.path = str(Path(os.fspath(model)).resolve())
        self._native = _core.GraphemeTokenizer(self.path)

    @property
    def languages(self) -> list[str]:
        return list(self._native.languages)

    @property
    def vocab_size(self) -> int:
        return self._native.vocab_size

    def normalize(self, text: str, lang: str | None = None) -> str:
        """lower + NFKD + the language step (`MTLTokenizer.encode` up to the tag)."""
        lang = lang or ""
        txt = self._native.normalize(text, lang)
        if lang == "ja":
            txt = hiragana_normalize(txt)
        return txt

    def tokenize(self, text: str, lang: str | None = None) -> np.ndarray:
        """`MTLTokenizer.text_to_tokens(text, language_id=lang)[0]`: int32 ids, no SOT/EOT."""
        lang = lang or ""
        return self._native.encode(self.normalize(text, lang), lang)
