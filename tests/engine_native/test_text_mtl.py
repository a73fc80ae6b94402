"""The Multilingual text front end, exact against the reference (chatterbox-tts 0.1.7).

Seams: `debug.punc_norm(text, variant="mtl")` <-> `mtl_tts.punc_norm`;
`debug.mtl_normalize` <-> lower + NFKD + language step; `debug.mtl_tokenize(model, text, lang)`
<-> `MTLTokenizer.text_to_tokens(text, language_id=lang)`: every one of the 23 languages plus
no language, >= 20 strings each (tests/helpers/mtl_corpus.py), Japanese with and without pykakasi.

The snapshot is the reduced MTL one by default (the tokenizer and Cangjie table are the same
at every size); `CBS_MTL_SIZE=full` runs the same tests on the full-size snapshot.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest

from engine_native import _core, debug
from tests.helpers.mtl_corpus import PUNC_NORM_CASES, corpus, flat
from tests.helpers.models import model_path
from tests.reference.cache import snapshot_dir
from tests.reference.runner import run_stage

SIZE = os.environ.get("CBS_MTL_SIZE", "small")


@pytest.fixture(scope="module")
def snap():
    return snapshot_dir("mtl", size=SIZE)


@pytest.fixture(scope="module")
def model(snap):
    return model_path("mtl", "f32", size=SIZE)


def _unicode_texts() -> list[str]:
    texts = []
    for base in range(0, 0x110000, 64):
        cps = [c for c in range(base, base + 64) if not 0xD800 <= c < 0xE000]
        if cps:
            texts.append("".join(map(chr, cps)))
    texts += ["ΟΔΟΣ", "ΟΔΟΣ.", "ΣΑΣ", "Σ", "AΣ", "AΣB", "A'Σ", "A\u0301Σ", "ΑΣ\u0301", "İstanbul",
              "a\u0328\u0301\u0316", "\u1e0b\u0323", "ǅ", "ﬃ", "①②", "がぱ", "ＡＢＣ，？！", "¨´"]
    return texts


@pytest.fixture(scope="module")
def ref(snap):
    """Every reference answer without pykakasi, from one reference process."""
    texts, langs = flat()
    out = run_stage("mtl_text", snap, texts=np.array(texts), langs=np.array(langs), kakasi=np.asarray(False),
                    punc_texts=np.array(PUNC_NORM_CASES + texts), unicode_texts=np.array(_unicode_texts()))
    return {"texts": texts, "langs": langs, **out}


@pytest.fixture(scope="module")
def ref_kakasi(snap):
    texts, langs = flat({"ja"})
    out = run_stage("mtl_text", snap, texts=np.array(texts), langs=np.array(langs), kakasi=np.asarray(True))
    return {"texts": texts, "langs": langs, **out}


def _have_kakasi() -> bool:
    try:
        import pykakasi  # noqa: F401
        return True
    except ImportError:
        return False


def test_punc_norm_mtl_is_exact(ref):
    texts = PUNC_NORM_CASES + ref["texts"]
    mine = [debug.punc_norm(t, variant="mtl") for t in texts]
    bad = [(t, m, str(r)) for t, m, r in zip(texts, mine, ref["punc_norm"]) if m != str(r)]
    assert not bad, bad[:5]
    # the Turbo flavour is untouched
    assert debug.punc_norm("a; b") == "A; b."
    assert debug.punc_norm("a; b", variant="mtl") == "A,  b."   # ";" -> ", " keeps the space after it


def test_lower_and_nfkd_match_python_for_every_codepoint(ref):
    """Chunks of 64 consecutive codepoints (every plane, no surrogates), plus Final_Sigma and
    canonical-ordering contexts, against Python 3.11's str.lower / NFKD."""
    texts = _unicode_texts()
    bad_lower = [t for t, r in zip(texts, ref["lower"]) if _core.mtl_py_lower(t) != str(r)]
    bad_nfkd = [t for t, r in zip(texts, ref["nfkd"]) if _core.mtl_nfkd(t) != str(r)]
    assert not bad_lower, [hex(ord(t[0])) for t in bad_lower[:5]]
    assert not bad_nfkd, [hex(ord(t[0])) for t in bad_nfkd[:5]]


def _no_kakasi(monkeypatch):
    import engine_native.text_mtl as tm
    monkeypatch.setattr(tm, "_kakasi", None)
    monkeypatch.setattr(tm, "_kakasi_state", False)


@pytest.mark.parametrize("kakasi", [False, True], ids=["no-pykakasi", "pykakasi"])
def test_normalize_is_exact_for_every_language(request, model, kakasi, monkeypatch):
    if kakasi and not _have_kakasi():
        pytest.skip("pykakasi (the `ja` extra) is not installed here")
    if not kakasi:
        _no_kakasi(monkeypatch)
    r = request.getfixturevalue("ref_kakasi" if kakasi else "ref")
    bad = [(lang, t, debug.mtl_normalize(model, t, lang), str(x))
           for t, lang, x in zip(r["texts"], r["langs"], r["normalized"]) if debug.mtl_normalize(model, t, lang) != str(x)]
    assert not bad, bad[:5]


@pytest.mark.parametrize("kakasi", [False, True], ids=["no-pykakasi", "pykakasi"])
def test_tokenize_is_exact_for_every_language(request, model, kakasi, monkeypatch):
    if kakasi and not _have_kakasi():
        pytest.skip("pykakasi (the `ja` extra) is not installed here")
    if not kakasi:
        _no_kakasi(monkeypatch)
    r = request.getfixturevalue("ref_kakasi" if kakasi else "ref")
    if not kakasi:
        assert set(r["langs"]) == set(corpus()) and len(set(r["langs"])) == 24
        assert min(r["langs"].count(lang) for lang in set(r["langs"])) >= 20
    ids, offs = r["ids"], r["offsets"]
    bad = [(lang, t) for i, (t, lang) in enumerate(zip(r["texts"], r["langs"]))
           if debug.mtl_tokenize(model, t, lang).tolist() != ids[offs[i]:offs[i + 1]].tolist()]
    assert not bad, bad[:5]


def test_language_steps_do_what_the_reference_does(model):
    tok = debug._mtl_tokenizer(model)
    native = tok._native
    assert native.cangjie_size > 0
    zh = tok.normalize("你好", "zh")
    assert zh.startswith("[cj_") and zh.endswith("[cj_.]") and "你" not in zh
    assert tok.normalize("你好", "") == "你好"                       # no step without zh
    assert tok.normalize("  안녕  ", "ko") == _core.mtl_nfkd("안녕")        # jamo, strip()ped
    assert tok.normalize("ΟΔΟΣ", "el") == "οδος"
    assert tok.normalize("ΟΔΟΣ", "el").endswith("ς")
    assert tok.tokenize("a", "EN")[0] == tok.tokenize("a", "en")[0]   # the tag is lower-cased
    assert sorted(tok.languages) == sorted(("ar da de el en es fi fr he hi it ja ko ms nl no pl pt ru sv sw "
                                            "tr zh").split())


def test_japanese_without_pykakasi_warns_once_and_passes_through(model, monkeypatch, caplog):
    import engine_native.text_mtl as tm
    monkeypatch.setattr(tm, "_kakasi", None)
    monkeypatch.setattr(tm, "_kakasi_state", None)
    monkeypatch.setitem(sys.modules, "pykakasi", None)
    tok = tm.MtlTokenizer(model)
    with caplog.at_level("WARNING", logger="engine_native.text_mtl"):
        a = tok.normalize("日本語", "ja")
        b = tok.normalize("東京", "ja")
    assert a == "日本語" and b == "東京"
    msgs = [r.message for r in caplog.records if "pykakasi" in r.message]
    assert len(msgs) == 1 and "chatterbox-studio[ja]" in msgs[0]
