"""The text front end: a request's text -> sentences -> T3's text token ids.

Turbo and Nano: `punc_norm` and the GPT-2 byte-level BPE. Multilingual: the request's
language (given, else guessed from the script: `engine_native.language`), the MTL
`punc_norm`, the grapheme tokenizer with its Python hooks (`engine_native.text_mtl`) and
the start/stop text tokens; a sentence over T3's text position table in ids is cut further
(`fit_budget`).
"""

from __future__ import annotations

import logging

import numpy as np

from engine_native import _core
from engine_native.errors import EmptyTextError, ParameterError
from engine_native.language import NAMES as LANGUAGE_NAMES, detect_language
from engine_native.text import MAX_TEXT_CHARS, Sentence, has_speech, iter_sentences, split_text

log = logging.getLogger(__name__)


def check_text(text) -> None:
    """EmptyTextError / ParameterError for what no synthesis can take."""
    if not isinstance(text, str):
        raise EmptyTextError(f"text must be a string; got {type(text).__name__}")
    if len(text) > MAX_TEXT_CHARS:
        raise ParameterError(f"the text is {len(text):,} characters long; one call takes at most "
                             f"{MAX_TEXT_CHARS:,} (split it into parts)")
    if not has_speech(text):
        raise EmptyTextError("there is nothing to say: the text is empty or only punctuation")


class TextFrontEnd:
    def __init__(self, file, tokenizer, config):
        self.tokenizer = tokenizer  # _core.Gpt2Tokenizer, or text_mtl.MtlTokenizer (Multilingual)
        self._file = file
        self._config = config
        self._expression_tags = None

    @property
    def languages(self) -> dict[str, str]:
        """The languages this model speaks, code -> English name ({} for Turbo and Nano)."""
        if not self._config.mtl:
            return {}
        return {c: LANGUAGE_NAMES.get(c, c) for c in sorted(self.tokenizer.languages)}

    def detect_language(self, text: str) -> str:
        if not isinstance(text, str):
            raise EmptyTextError(f"text must be a string; got {type(text).__name__}")
        return detect_language(text, self.languages or None)

    def language(self, language, text: str) -> str | None:
        """The request's language code (Multilingual), detected from `text` when None (the guess
        logged); ParameterError for a Turbo/Nano model given one or an unknown code."""
        if not self._config.mtl:
            if language is not None:
                raise ParameterError(f"language applies to Multilingual models only; this model is "
                                     f"{self._config.variant}")
            return None
        if language is None:
            guess = self.detect_language(text)
            log.info("language not given: detected %s (%s) from the text", guess, LANGUAGE_NAMES.get(guess, guess))
            return guess
        code = language.strip().lower() if isinstance(language, str) else None
        if code not in self.languages:
            raise ParameterError(f"unknown language {language!r}; this model speaks "
                                 f"{', '.join(self.languages)}")
        return code

    @property
    def expression_tags(self) -> list[str]:
        """The paralinguistic tags this model's tokenizer holds (engine_native.tags)."""
        if self._config.mtl:
            return []  # the grapheme tokenizer's added tokens are language tags and Cangjie codes
        if self._expression_tags is None:
            from engine_native.tags import read_expression_tags

            self._expression_tags = read_expression_tags(self._file, self.tokenizer)
        return list(self._expression_tags)

    def ids(self, sentence: str, language: str | None = None) -> list[int]:
        """T3's text token ids for one sentence."""
        c = self._config
        if c.mtl:  # mtl_tts.generate: punc_norm, the grapheme tokenizer, start/stop text tokens
            ids = self.tokenizer.tokenize(_core.punc_norm_mtl(sentence), language).astype(np.int32).tolist()
            return [c.text_start, *ids, c.text_stop]
        return self.tokenizer.encode(_core.punc_norm(sentence)).astype(np.int32).tolist()

    def sentences(self, text: str, cancel, language=None) -> list[Sentence] | None:
        """The text's sentences (None when cancelled while splitting: a huge paste can be stopped).
        Multilingual: a sentence over T3's text budget in tokens (Cangjie turns a Chinese glyph
        into about 6 ids) is cut further."""
        out = []
        for i, s in enumerate(iter_sentences(text)):
            out.extend(self.fit_budget(s, language) if self._config.mtl else (s,))
            if i % 1024 == 1023 and cancel.is_set():
                return None
        return out

    def fit_budget(self, s: Sentence, language) -> list[Sentence]:
        """`s`, or its pieces (cut as the splitter cuts long sentences, into ever smaller
        pieces) when its text ids exceed the Multilingual T3's text position table. Up to
        1/8 of the table in characters is taken as fitting (a Cangjie glyph is about 6 ids);
        the T3 session still refuses, by name, a sentence that does not."""
        limit_ids = self._config.max_text_ids
        if len(s.text) <= limit_ids // 8 or len(self.ids(s.text, language)) <= limit_ids:
            return [s]
        limit = len(s.text) // 2
        while limit > 1:
            pieces = [Sentence(p.text, s.start + p.start, s.start + p.end) for p in split_text(s.text, limit)]
            if all(len(self.ids(p.text, language)) <= limit_ids for p in pieces):
                return pieces
            limit //= 2
        raise ParameterError(f"a piece of text does not fit T3's {limit_ids} text tokens: {s.text[:40]!r}")
