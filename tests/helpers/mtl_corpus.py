"""Test strings for the Multilingual front end: >= 20 per language (23 + no language).

Each language has hand-written base sentences (its script's hard cases: Greek final
sigma, Turkish dotted I, German sharp s, Korean syllables, Chinese glyphs in and out of
the snapshot's Cangjie table, Japanese kana with voicing marks and kanji, fullwidth
punctuation, compatibility characters) and `variants()` derives more from them (case,
spacing, punctuation, digits), so that every language gets at least MIN_PER_LANGUAGE.
"""
from __future__ import annotations

MIN_PER_LANGUAGE = 20

BASE: dict[str, list[str]] = {
    "ar": ["مرحبا بالعالم.", "كيف حالك اليوم؟", "هذا اختبار، للنص العربي!", "الرقم ١٢٣ و 456", "قال: «نعم»"],
    "da": ["Hej verden!", "Hvordan går det?", "Æble, øl og åen.", "Jeg hedder Søren.", "DET ER GODT"],
    "de": ["Hallo Welt!", "Die Straße ist groß.", "ÄPFEL UND BÄUME", "Wir fahren um 8:30 Uhr...", "„Zitat“ – Ende"],
    "el": ["Καλημέρα κόσμε!", "ΟΔΟΣ ΚΑΙ ΔΡΟΜΟΣ", "Ο Σωκράτης είπε: «γνῶθι σαυτόν».", "Πώς είσαι;", "ΣΑΣ ΕΥΧΑΡΙΣΤΩ Σ"],
    "en": ["Hello world.", "It's a test — isn't it?", "Numbers: 1, 2 and ½ or ².", "SHOUTING ALL DAY!!", "café naïve résumé"],
    "es": ["¡Hola mundo!", "¿Cómo estás?", "El niño come piñata.", "MAÑANA LLUEVE", "Él dijo… sí"],
    "fi": ["Hei maailma!", "Mitä kuuluu?", "Hyvää yötä, äiti.", "KÖYHÄ JÄRVI", "Tämä on testi"],
    "fr": ["Bonjour le monde !", "Ça va ? Très bien.", "L'œuvre d'Éloïse.", "ÉCOLE ÉTÉ", "« Guillemets » ici"],
    "he": ["שלום עולם!", "מה שלומך?", "זה מבחן, של טקסט.", "אני אוהב קפה", "תודה רבה"],
    "hi": ["नमस्ते दुनिया!", "आप कैसे हैं?", "यह एक परीक्षण है।", "मुझे हिंदी पसंद है", "क़ ख़ ग़ ज़"],
    "it": ["Ciao mondo!", "Come stai?", "Perché è così?", "CITTÀ E UNIVERSITÀ", "L'ho già visto"],
    "ja": ["こんにちは、世界！", "ありがとうございます。", "日本語の文章です。", "カタカナとひらがな", "がぎぐげご ぱぴぷぺぽ",
           "今日は天気がいいです。", "東京へ行きます", "ｶﾀｶﾅ ﾃｽﾄ"],
    "ko": ["안녕하세요 세계!", "잘 지내세요?", "한국어 텍스트입니다.", " 감사합니다 ", "값 닭 읽다"],
    "ms": ["Selamat pagi dunia!", "Apa khabar?", "Saya suka makan nasi.", "TERIMA KASIH", "Ini ujian."],
    "nl": ["Hallo wereld!", "Hoe gaat het?", "Één twee drie.", "IJSBEER IJSSEL", "Dat is 'mooi'"],
    "no": ["Hei verden!", "Hvordan har du det?", "Blåbær og rømme.", "GOD MORGEN", "Jeg heter Øystein"],
    "pl": ["Witaj świecie!", "Jak się masz?", "Zażółć gęślą jaźń.", "ŁÓDŹ I GDAŃSK", "To jest test"],
    "pt": ["Olá mundo!", "Como você está?", "Não sei, ação!", "CORAÇÃO", "Ele disse: sim"],
    "ru": ["Привет, мир!", "Как дела?", "Ёлка и ёжик.", "МОСКВА — СТОЛИЦА", "Это тест; правда"],
    "sv": ["Hej världen!", "Hur mår du?", "Smörgåsbord är gott.", "ÅÄÖ ÄR BOKSTÄVER", "Det var en gång"],
    "sw": ["Habari dunia!", "Habari yako?", "Ninapenda chakula.", "ASANTE SANA", "Hii ni jaribio"],
    "tr": ["Merhaba dünya!", "Nasılsın?", "İSTANBUL VE IĞDIR", "Çok güzel şeyler.", "Işık ılık"],
    "zh": ["你好，世界！", "今天天气很好。", "我们是朋友", "中文和English混合", "谢谢！再见？", "这是龍鳳",
           "你好世界中文", "我爱学习写字。"],
    "": ["Hello there.", "No language at all!", "Ünïcödé wïthout tag", "ΟΔΟΣ", "안녕", "你好", "かな"],
}


def variants(s: str) -> list[str]:
    """Derived strings (deterministic, no duplicates)."""
    out = [s, s.upper(), s.lower(), s.title(), "  " + s + "  ", s.replace(" ", "   "),
           s + " " + s, s.rstrip(".!?。！？") , s + "...", s + " 42", "①" + s, s + "\t-", "ß " + s]
    seen, res = set(), []
    for t in out:
        if t not in seen:
            seen.add(t)
            res.append(t)
    return res


def corpus() -> dict[str, list[str]]:
    """{lang: strings} with at least MIN_PER_LANGUAGE strings for each of the 23 + ""."""
    out: dict[str, list[str]] = {}
    for lang, base in BASE.items():
        strings: list[str] = []
        for s in base:
            for v in variants(s):
                if v not in strings:
                    strings.append(v)
        out[lang] = strings
        assert len(strings) >= MIN_PER_LANGUAGE, (lang, len(strings))
    return out


def flat(langs=None) -> tuple[list[str], list[str]]:
    """(texts, langs) over every language (or the given ones)."""
    texts, codes = [], []
    for lang, strings in corpus().items():
        if langs is not None and lang not in langs:
            continue
        texts += strings
        codes += [lang] * len(strings)
    return texts, codes


PUNC_NORM_CASES = [
    "", "hello", "hello world", "  spaced   out  text  ", "Wait... what…", "a: b; c - d — e – f",
    "word ,comma", "“quoted” and ‘single’", "ends with!", "ends with?", "ends with-", "ends with,",
    "中文句号。", "中文逗号，", "顿号、", "问号？", "叹号！", "ß is lower", "ǆ digraph", "ﬁ ligature",
    "émile", "über", "ıstanbul", "trailing spaces   ", "\tTabs\tand\nnewlines\n", "...", "…", " - ",
    "a - b", "x;y;z", "ΟΔΟΣ", "όλα καλά", "привет", "안녕", "۱۲۳", "ǅ title digraph",
]
