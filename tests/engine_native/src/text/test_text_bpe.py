"""Text front end parity: engine_native.debug.tokenize / punc_norm against the reference
(the snapshot's HF tokenizer and chatterbox.tts_turbo.punc_norm), exact equality."""

from __future__ import annotations

import random

import numpy as np
import pytest

from engine_native import EngineError, _core, debug
from tests.helpers.models import model_path
from tests.reference.cache import snapshot_dir
from tests.reference.runner import run_stage

# The 19 paralinguistic added tokens of the Turbo tokenizer (tests/reference/build.py,
# which imports torch and so is not importable here).
TAGS = [
    "[laugh]", "[chuckle]", "[sigh]", "[gasp]", "[cough]", "[clear throat]",
    "[sniff]", "[groan]", "[shush]", "[whisper]", "[cry]", "[scream]",
    "[yawn]", "[hum]", "[sneeze]", "[breath]", "[pause]", "[angry]", "[happy]",
]

HAND = [
    "", " ", "  ", "\t", "\n", "\r\n", " \n ", "a", "A", "z", "0", "9", ".", "!", "?", ",", "'", '"', "-", "_",
    "é", "ß", "ñ", "Ω", "ж", "中", "😀", "\u0301", "\u00a0", "\u3000", "\x85", "\x1c", "\u200b", "\u2028",
    "Hello world.", "Hello world!", "hello, world", "The quick brown fox jumps over the lazy dog.",
    "It was 3:45 p.m. on 12/31/1999 -- and $1,234.56 was owed.",
    "Call +1 (555) 010-9999 or e-mail me@example.com!", "https://example.com/path?q=1&r=2#frag",
    "I'm sure it's fine, isn't it? We're here, they've gone, I'll go, he'd know.",
    "I'M SURE IT'S FINE, ISN'T IT? WE'RE HERE, THEY'VE GONE, I'LL GO, HE'D KNOW.",
    "'s 't 're 've 'm 'll 'd", "'S 'T 'RE 'VE 'M 'LL 'D", "''s", "'", "''", "'x", "rock'n'roll", "o'clock",
    "don't", "DON'T", "Don'T", "y'all'd've", "'tis", "’s curly", "dogs' bones",
    "1234567890", "3.14159", "1,000,000", "1e10", "0x1F", "٣٤٥ arabic digits", "²³ ½ ¾ Ⅻ ⅷ", "१२३",
    "...", "!!!", "?!?!", "---", "***", "......!!!???", "(a) [b] {c} <d>", "#hashtag @mention", "a+b=c; d*e/f",
    "  leading", "trailing  ", "trailing ", "multiple   spaces   inside", "tabs\tand\ttabs", "a\t\tb",
    "new\nline", "two\n\nlines", "crlf\r\nline", "mixed \t \n whitespace", "end with newline\n",
    "  ", "   ", "\t\t", "\n\n\n", " \t", "\t ", " a", "  a", "   a", "\ta", "\t a", " \ta", "a  ", "a \t",
    "word  .", "word  !", "x \u00a0y", "x\u00a0\u00a0y", "x\u3000y", "x\u2009y", "x\x85y", "x\x1cy", "x\u200by",
    "café crème brûlée", "naïve façade jalapeño", "Ærøskøbing Ångström", "Łódź Żółć", "Dvořák Škoda",
    "İstanbul ığdır", "ŉ ǆ ǅ ǈ", "ﬁnancial ﬂow", "straße STRASSE", "ΐ ΰ",
    "Καλημέρα κόσμε", "γειά σου", "Привет, мир!", "съешь же ещё этих мягких булок", "Ёжик",
    "你好，世界！", "日本語のテキストです。", "한국어 텍스트", "中文 English 混合",
    "مرحبا بالعالم", "שלום עולם", "नमस्ते दुनिया", "สวัสดีชาวโลก", "Բարեւ աշխարհ", "გამარჯობა",
    "😀😃😄", "👍🏽 thumbs", "👨‍👩‍👧‍👦 family", "🏳️‍🌈 flag", "❤️ love", "a😀b", "😀 😀", "🇺🇸🇬🇧",
    "e\u0301 vs é", "a\u0308\u0304", "Z\u0351\u0352\u0353algo", "\u0301start", "n\u0303o",
    "ⓐⓑⓒ circled", "ꭰꭱ cherokee", "ǳ digraph",
    "<|endoftext|>", "hi<|endoftext|>there", "<|endoftext|> <|endoftext|>", "<|endoftext|>[laugh]",
    "[laugh", "laugh]", "[Laugh]", "[LAUGH]", "[ laugh]", "[laugh ]", "[[laugh]]", "[laugh][laugh]",
    "[chuckle][laugh]", "[clear throat]", "[clear  throat]", "[clear throat] ahem", "hi [sigh] there",
    "[laugh]Hi", "[laugh] Hi", "[laugh]  Hi", "[laugh]\tHi", "Hi[laugh]", "Hi [laugh]", "Hi  [laugh]",
    "Hi [laugh] ", "Hi[laugh].", "Hi, [laugh]!", "([sigh])", "\"[gasp]\"", "[cough]...", "...[cough]",
    "[laugh]'s", "don't[laugh]", "123[hum]456", "é[sniff]ж", "😀[happy]😀", "[pause]\n[pause]",
    "So…  “quoted” — and – ‘single’: done", "…", "……", ": :", " , ", "a ,b", "a , b", "x—y–z",
    "“", "”", "‘’", "Wait:", "Really?", "No!", "Stop-", "Well,", "end.", "end. ", "end.  ", "end . ",
    "lowercase start", "élan vital", "ßtart", "ǆungla", "ﬁne", "ΐx", "ωmega", "ж", "ⓐ", "ꭰ", "ǅx",
    "ΐ", "ﬃ", "և", "ŉ", "ǰ",
]
HAND += [
    # Unicode 15 letters (unassigned in Python 3.11's Unicode 14 tables; HF's regex agrees: not \p{L})
    "a\U0001E030b", "a\U00011F04b", "x \U0001E030y", "x \u0CF3y", "a\U0001E4D0b", "a\U00031350b",
    # long inputs
    "a" * 1500, "ab " * 400, "Hello there, [laugh] how are you? " * 30, " " * 300 + "x", "😀" * 200,
]
HAND += TAGS
HAND += [f"{t} hello" for t in TAGS] + [f"hello {t}" for t in TAGS] + [f"a{t}b" for t in TAGS]

FRAGMENTS = [
    "hello", "World", "the", "ÉCOLE", "straße", "Κόσμος", "мир", "中文", "テスト", "مرحبا", "123", "4.5",
    "1,000", "٣", "½", "'s", "'S", "'t", "'re", "'Re", "'ve", "'m", "'ll", "'LL", "'d", "'", "\"", "...",
    "!", "?", ",", ".", ":", ";", "—", "–", "…", "“", "”", "‘", "’", "(", ")", "-", "_", "@", "#", "$", "%",
    " ", " ", " ", "  ", "   ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\x85", "\x1c", "\u2009", "\u200b",
    "😀", "👍🏽", "👨‍👩‍👧", "❤️", "e\u0301", "\u0308", "ǆ", "ﬁ", "ß",
] + TAGS + ["<|endoftext|>", "[laugh", "sigh]"]


def random_strings(n: int, seed: int = 1234) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        k = rng.randint(1, 12)
        s = "".join(rng.choice(FRAGMENTS) for _ in range(k))
        if rng.random() < 0.3:
            s = s.lower()
        out.append(s)
    # a few random-codepoint strings across the BMP and beyond (no NUL, no surrogates)
    for _ in range(n // 5):
        cps = []
        for _ in range(rng.randint(1, 10)):
            while True:
                c = rng.choice([rng.randint(0x20, 0x7E), rng.randint(0xA0, 0x24F), rng.randint(0x370, 0x52F),
                                rng.randint(0x1, 0x1F), rng.randint(0x2000, 0x206F), rng.randint(0x3000, 0x9FFF),
                                rng.randint(0x1F300, 0x1FAFF), rng.randint(0x80, 0x10FFFF)])
                if not (0xD800 <= c <= 0xDFFF):
                    break
            cps.append(chr(c))
        out.append("".join(cps))
    return out


def _dedupe(xs):
    return list(dict.fromkeys(xs))


STRINGS = _dedupe(HAND + random_strings(250))


@pytest.fixture(scope="module")
def model():
    return model_path("turbo")


@pytest.fixture(scope="module")
def ref_punc_norm():
    out = run_stage("punc_norm", snapshot_dir("turbo"), texts=np.array(STRINGS))["texts"]
    return [str(s) for s in out]


@pytest.fixture(scope="module")
def tok_strings(ref_punc_norm):
    # raw strings plus the reference's normalised forms (what synthesis actually tokenises)
    return _dedupe(STRINGS + ref_punc_norm)


@pytest.fixture(scope="module")
def ref_tokens(tok_strings):
    out = run_stage("tokenize", snapshot_dir("turbo"), texts=np.array(tok_strings))
    ids, off = out["ids"], out["offsets"]
    return [ids[off[i]:off[i + 1]] for i in range(len(tok_strings))]


def test_string_set_is_large_and_varied():
    assert len(STRINGS) >= 300
    assert "" in STRINGS and all(t in STRINGS for t in TAGS)
    assert not any("\x00" in s for s in STRINGS)  # numpy unicode arrays would strip trailing NULs


def test_punc_norm_matches_reference(ref_punc_norm):
    got = [debug.punc_norm(s) for s in STRINGS]
    bad = [(s, g, r) for s, g, r in zip(STRINGS, got, ref_punc_norm) if g != r]
    print(f"punc_norm: {len(STRINGS) - len(bad)}/{len(STRINGS)} strings equal")
    assert not bad, f"{len(bad)} differ, first: {bad[:5]}"


def test_tokenize_matches_reference(model, tok_strings, ref_tokens):
    bad = []
    for s, ref in zip(tok_strings, ref_tokens):
        got = debug.tokenize(model, s)
        assert got.dtype == np.int32
        if not np.array_equal(got, ref):
            bad.append((s, got.tolist(), ref.tolist()))
    print(f"tokenize: {len(tok_strings) - len(bad)}/{len(tok_strings)} strings equal")
    assert not bad, f"{len(bad)} differ, first: {bad[:5]}"


def test_known_ids(model):
    assert debug.tokenize(model, "[laugh] hello").tolist() == [50257, 23748]
    assert debug.tokenize(model, "").tolist() == []


def test_decode_round_trip(model):
    tok = _core.Gpt2Tokenizer(str(model))
    assert tok.vocab_size == 50276 and tok.eos_id == 50256
    for s in STRINGS:
        assert tok.decode(tok.encode(s)) == s


def test_invalid_utf8_does_not_crash(model):
    tok = _core.Gpt2Tokenizer(str(model))
    for raw in [b"\xff", b"\xc3", b"a\xe2\x82", b"\xed\xa0\x80x", b"\xf8\x88\x80\x80\x80", b"ok \xc0\xaf [laugh]\xfe"]:
        ids = tok.encode(raw)  # bytes go straight to the C++ encoder
        assert tok.decode_bytes(ids.tolist()) == raw


def test_bad_model_files(tmp_path):
    with pytest.raises(EngineError, match="not found"):
        _core.Gpt2Tokenizer(str(tmp_path / "missing.gguf"))
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a gguf at all")
    with pytest.raises(EngineError, match="not a GGUF"):
        _core.Gpt2Tokenizer(str(junk))
    with pytest.raises(EngineError):
        _core.Gpt2Tokenizer(str(tmp_path))  # a directory


def test_decode_rejects_bad_ids(model):
    tok = _core.Gpt2Tokenizer(str(model))
    with pytest.raises(EngineError, match="out of range"):
        tok.decode([50276])
    with pytest.raises(EngineError, match="out of range"):
        tok.decode([-1])
