"""The Multilingual model's languages: their English names and a guess from the text.

`detect_language(text, codes)` looks at the writing system first (Hangul -> ko, kana ->
ja, Han without kana -> zh, Arabic, Hebrew, Devanagari, Greek, Cyrillic -> ru), and for
Latin script at letters only some languages use (ß, ñ, ø, ğ, ł, ...) and at a few very
common words. Text with nothing to go on is English. It is a guess for when the caller
gives no language: the app shows it and lets the user pick another.
"""

from __future__ import annotations

import re
from collections import Counter

NAMES = {
    "ar": "Arabic", "da": "Danish", "de": "German", "el": "Greek", "en": "English", "es": "Spanish",
    "fi": "Finnish", "fr": "French", "he": "Hebrew", "hi": "Hindi", "it": "Italian", "ja": "Japanese",
    "ko": "Korean", "ms": "Malay", "nl": "Dutch", "no": "Norwegian", "pl": "Polish", "pt": "Portuguese",
    "ru": "Russian", "sv": "Swedish", "sw": "Swahili", "tr": "Turkish", "zh": "Chinese",
}
# The Multilingual model's language codes (mtl_tts.SUPPORTED_LANGUAGES, in its order): the one
# list the converter (its tokenizer's tags) and the text front end read.
LANGUAGES = tuple(sorted(NAMES))

# Code point ranges of the scripts that name one language (of the 23).
_SCRIPTS = (
    ("ko", ((0xAC00, 0xD7AF), (0x1100, 0x11FF), (0x3130, 0x318F))),
    ("ja", ((0x3040, 0x309F), (0x30A0, 0x30FF), (0x31F0, 0x31FF), (0xFF66, 0xFF9F))),
    ("zh", ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0xF900, 0xFAFF), (0x20000, 0x2FA1F))),
    ("ar", ((0x0600, 0x06FF), (0x0750, 0x077F), (0xFB50, 0xFDFF), (0xFE70, 0xFEFF))),
    ("he", ((0x0590, 0x05FF), (0xFB1D, 0xFB4F))),
    ("hi", ((0x0900, 0x097F),)),
    ("el", ((0x0370, 0x03FF), (0x1F00, 0x1FFF))),
    ("ru", ((0x0400, 0x04FF),)),
)

# Latin letters that point at one language (or a few), and frequent short words (greetings too).
_LETTERS = {
    "ß": "de", "ä": "de sv fi", "ö": "de sv fi tr", "ü": "de tr", "ñ": "es", "¿": "es", "¡": "es",
    "á": "es pt", "í": "es pt", "ó": "es pt pl", "ú": "es pt", "ã": "pt", "õ": "pt", "ç": "fr pt tr",
    "é": "fr es pt it", "è": "fr it", "ê": "fr pt", "à": "fr it pt", "ù": "fr it", "ì": "it", "ò": "it",
    "œ": "fr", "å": "sv da no", "æ": "da no", "ø": "da no", "ğ": "tr", "ş": "tr", "ı": "tr",
    "ł": "pl", "ą": "pl", "ę": "pl", "ś": "pl", "ź": "pl", "ż": "pl", "ń": "pl", "ć": "pl",
}
_WORDS = {
    "en": "the and is are you of to it that this with was have what hello world there",
    "de": "der die das und ist nicht ich sie ein eine mit zu den hallo welt wir um uhr",
    "es": "el la los las que de y es en por para una un con hola mundo",
    "fr": "le la les et est que des une un pas je vous il dans bonjour monde ici",
    "it": "il lo gli e che di non è una un per sono della ciao mondo come stai ho",
    "pt": "o os que de e é não uma um para com você em olá ele disse",
    "nl": "de het een en is van ik niet dat je zijn met hallo wereld hoe gaat één twee",
    "sv": "och är att det jag inte en som på med för hej världen",
    "da": "og er at det jeg ikke en som på med til hej verden hvordan går hedder",
    "no": "og er at det jeg ikke en som på med til hei verden hvordan har heter god morgen",
    "fi": "ja on ei se että minä sinä olen mutta kun hei maailma mitä kuuluu hyvää",
    "pl": "i w nie jest to się na że z do jak",
    "tr": "ve bir bu da de için ne ben sen çok merhaba dünya",
    "ms": "dan yang di ini itu saya tidak ada dengan untuk selamat pagi apa khabar terima kasih",
    "sw": "na ya wa kwa ni za la katika mimi wewe habari yako asante sana dunia",
}
_WORD_SETS = {code: set(words.split()) for code, words in _WORDS.items()}
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)


def _script_of(c: str) -> str | None:
    o = ord(c)
    for code, ranges in _SCRIPTS:
        if any(lo <= o <= hi for lo, hi in ranges):
            return code
    return None


def detect_language(text: str, codes=None) -> str:
    """The likeliest of `codes` (default: all 23) for `text`; "en" when nothing points elsewhere."""
    allowed = set(codes) if codes is not None else set(NAMES)
    fallback = "en" if "en" in allowed else (sorted(allowed)[0] if allowed else "en")
    scripts = Counter(s for s in map(_script_of, text) if s)
    if scripts.get("ja") and "ja" in allowed:  # kana: Japanese, whatever the kanji around it
        return "ja"
    for code, _ in scripts.most_common():
        if code in allowed:
            return code
    score = Counter()
    lower = text.lower()
    for ch in lower:
        for code in _LETTERS.get(ch, "").split():
            score[code] += 2
    for w in _WORD.findall(lower):
        for code, words in _WORD_SETS.items():
            if w in words:
                score[code] += 1
    for code, _ in score.most_common():
        if code in allowed:
            return code
    return fallback
