"""The Multilingual (MTL) part of the random-snapshot builder.

REFERENCE-VENV ONLY: imports torch and chatterbox (build.py dispatches here for
`--variant mtl`). Layout written (the file names `ChatterboxMultilingualTTS.from_local`
reads from `ResembleAI/chatterbox`):

    t3_mtl23ls_v2.safetensors   T3(T3Config.multilingual()) (Llama), perturbed
    s3gen.pt                    torch.save(S3Gen().state_dict())   (meanflow=False)
    ve.pt                       torch.save(VoiceEncoder().state_dict())
    conds.pt                    mtl_tts.Conditionals (150 prompt tokens, emotion_adv 0.5)
    grapheme_mtl_merged_expanded_v1.json   a synthetic grapheme BPE, exactly 2454 ids
    Cangjie5_TC.json            a synthetic "glyph\\tcode" list
    models--ResembleAI--chatterbox/refs/main + snapshots/<hash>/Cangjie5_TC.json
                                where `hf_hub_download(cache_dir=ckpt_dir)` finds it offline

Sizes: "full" is the real architecture (Llama_520M: 30 layers, FFN 4096). "small" is the
same architecture with 14 layers and FFN 1536 (for CI): the width stays 1024 because the
Perceiver is hard-wired to 1024, and 14 layers x 16 heads keep the AlignmentStreamAnalyzer's
fixed heads (12,15) (13,11) (9,2) valid, so the reference runs unpatched apart from the
Llama config it is given (`llama_config(size)`, registered as `Llama_520M` in the oracle
process when a small snapshot is loaded through `from_local`).
"""
from __future__ import annotations

import copy
import json
import random
import unicodedata

import torch

T3_FILE = "t3_mtl23ls_v2.safetensors"
S3GEN_FILE = "s3gen.pt"
VE_FILE = "ve.pt"
CONDS_FILE = "conds.pt"
TOKENIZER_FILE = "grapheme_mtl_merged_expanded_v1.json"
CANGJIE_FILE = "Cangjie5_TC.json"
HF_CACHE_REPO = "models--ResembleAI--chatterbox"
HF_CACHE_HASH = "c0ffee0000000000000000000000000000000001"   # any 40-hex commit id

TEXT_VOCAB = 2454          # T3Config.multilingual(): is_multilingual <=> 2454
SPEECH_VOCAB = 8194
N_SPEECH_CODES = 6561
PROMPT_LEN = 150           # speech_cond_prompt_len
SIZES = ("full", "small")
SMALL_OVERRIDES = {"num_hidden_layers": 14, "intermediate_size": 1536}

LANGUAGES = ("ar", "da", "de", "el", "en", "es", "fi", "fr", "he", "hi", "it", "ja", "ko",
             "ms", "nl", "no", "pl", "pt", "ru", "sv", "sw", "tr", "zh")
SPECIALS = ("[STOP]", "[UNK]", "[SPACE]", "[PAD]", "[SEP]", "[CLS]", "[MASK]")   # ids 0..6; [START] = 255
CJ_TOKENS = tuple(f"[cj_{c}]" for c in "abcdefghijklmnopqrstuvwxyz0123456789.")


def llama_config(size: str) -> dict:
    from chatterbox.models.t3.llama_configs import LLAMA_520M_CONFIG_DICT
    if size not in SIZES:
        raise ValueError(f"unknown MTL size {size!r}; expected one of {SIZES}")
    cfg = copy.deepcopy(LLAMA_520M_CONFIG_DICT)
    if size == "small":
        cfg.update(SMALL_OVERRIDES)
    return cfg


def use_size(size: str) -> None:
    """Make `T3Config.multilingual()` build `size` in this process (a no-op for full)."""
    from chatterbox.models.t3 import llama_configs
    llama_configs.LLAMA_CONFIGS["Llama_520M"] = llama_config(size)


def t3_config(size: str):
    from chatterbox.models.t3.modules.t3_config import T3Config
    use_size(size)
    return T3Config.multilingual()


# --------------------------------------------------------------------------
# The synthetic grapheme tokenizer
# --------------------------------------------------------------------------

def _rng_chars(lo: int, hi: int, *, cat_prefix: str = "") -> list[str]:
    out = []
    for cp in range(lo, hi + 1):
        c = chr(cp)
        cat = unicodedata.category(c)
        if cat in ("Cn", "Cs", "Co") or (cat_prefix and not cat.startswith(cat_prefix)):
            continue
        out.append(c)
    return out


def character_inventory() -> list[str]:
    """The single characters of the vocabulary: what lower+NFKD text of the 23 languages
    reaches the BPE as, minus a few left out on purpose (they become [UNK])."""
    chars: list[str] = []
    chars += [chr(c) for c in range(0x21, 0x7F) if not chr(c).isupper() and chr(c) not in "[]"]
    chars += ["ß", "æ", "ø", "ð", "þ", "œ", "ı", "ł", "đ", "ħ", "ŋ", "¡", "¿", "«", "»", "°", "€", "£"]
    chars += _rng_chars(0x0300, 0x036F)                        # combining diacritics
    chars += _rng_chars(0x03B1, 0x03C9) + ["ς"]                # Greek lower-case (incl. final sigma)
    chars += _rng_chars(0x0430, 0x045F)                        # Cyrillic lower-case
    chars += _rng_chars(0x0600, 0x0655) + _rng_chars(0x0660, 0x0669)   # Arabic (+ digits)
    chars += _rng_chars(0x05B0, 0x05F4)                        # Hebrew points + letters
    chars += _rng_chars(0x0900, 0x0970)                        # Devanagari
    chars += _rng_chars(0x1100, 0x1112) + _rng_chars(0x1161, 0x1175) + _rng_chars(0x11A8, 0x11C2)  # jamo
    chars += _rng_chars(0x3041, 0x3096) + ["\u3099", "\u309a", "ゝ", "ゞ"]   # hiragana + voicing marks
    chars += _rng_chars(0x30A1, 0x30FA) + ["ー", "・"]        # katakana
    chars += ["、", "。", "「", "」", "『", "』", "〜", "–", "—", "‘", "’", "“", "”", "…"]
    chars += list("的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明其种声全工己话儿者向情部正名定女问力机给等几很业最间新什打便位因重被走电四第门相次东政海口使教西再平真听世气信北少关并内加化由却代军产入先山五太水万市眼体别处总才场师书比住员九笑性通目华报立马命张活难神数件安表原车白应路期叫死常提感金何更反合放做系计或司利受光王果亲界及今京务制解各任至清物台象记边共风战干接它许八特觉望直服毛林题建南度统色字请交爱让认算论百吃义科怎元社术结六功指思非流每青管夫连远资队跟带花快条院变联言权往展该领传近留红治决周保达办运武半候七必城父强步完革深区即求品士转量空甚众技轻程告江语英基派满式李息写呢识极令黄德收脸钱党倒未持取设始版双历越史商千片容研像找友孩站广改议形委早房音火际则首单据导影失拿网香似斯专石若兵弟谁校读志飞观争究包组造落视济喜离虽坐集编宝谈府拉黑且随格尽剑讲布杀微怕母调局根曾准团段终乐切级克精哪官示冷域读")
    seen, out = set(), []
    for c in chars:
        if c not in seen:
            seen.add(c)
            out.append(c)
    return out


# Words the merges are learnt from (frozen: changing them changes every MTL snapshot).
MERGE_WORDS = (
    "the there hello world this that with and have here where what which when their they "
    "der die das und nicht ist ein eine ich sie wir haben sein mit von zu den "
    "le la les et est une des pas pour dans que qui sur avec "
    "el los las una por para como pero más está "
    "il lo gli che non per sono della questo "
    "de het een van dat niet zijn met voor "
    "og det er en til jeg som på med har ikke "
    "och att som för med har inte till "
    "ja ei on se että ovat kanssa "
    "o a os um uma não com para mais "
    "i w z na nie się jest to że do "
    "bir ve bu da için ile çok daha "
    "dan yang ini itu untuk dengan tidak ada "
    "na ya kwa wa ni katika hii "
    "και το να η ο της του με για "
    "и в не на что с он как это по "
    "في من على إلى أن هذا "
    "של את זה על לא "
    "के है में की और से "
    "かな です ます こんにちは ありがとう "
).split()


def learn_merges(words, n_merges: int) -> list[tuple[str, str]]:
    """Plain BPE learning over the NFKD'd characters of `words` (deterministic)."""
    seqs = [list(unicodedata.normalize("NFKD", w.lower())) for w in words]
    merges: list[tuple[str, str]] = []
    for _ in range(n_merges):
        counts: dict[tuple[str, str], int] = {}
        for s in seqs:
            for a, b in zip(s, s[1:]):
                counts[(a, b)] = counts.get((a, b), 0) + 1
        if not counts:
            break
        best = max(counts.items(), key=lambda kv: (kv[1], kv[0]))[0]
        merges.append(best)
        for s in seqs:
            i = 0
            while i < len(s) - 1:
                if (s[i], s[i + 1]) == best:
                    s[i:i + 2] = [s[i] + s[i + 1]]
                i += 1
    return merges


def grapheme_vocab(seed: int) -> tuple[dict[str, int], list[tuple[str, str]], list[dict]]:
    """(vocab, merges, added tokens) with exactly TEXT_VOCAB ids, [START] at 255."""
    tokens: list[str] = list(SPECIALS) + [f"[{lang}]" for lang in LANGUAGES] + list(CJ_TOKENS)
    chars = character_inventory()
    merges = learn_merges(MERGE_WORDS, 320)
    merged = [a + b for a, b in merges]
    # a few punctuation merges, so that punctuation runs exercise BPE too
    for a, b in ((".", "."), (",", ","), ("!", "?"), ("?", "!"), (".", "\"")):
        if (a, b) not in merges:
            merges.append((a, b))
            merged.append(a + b)
    body = []
    for t in chars + merged:
        if t not in body and t not in tokens:
            body.append(t)
    for t in body:
        if len(tokens) == 255:
            tokens.append("[START]")
        tokens.append(t)
    if len(tokens) <= 255:
        raise AssertionError("character inventory too small to place [START] at 255")
    if len(tokens) > TEXT_VOCAB:
        raise AssertionError(f"vocabulary too large: {len(tokens)} > {TEXT_VOCAB}")
    rng = random.Random(seed)
    while len(tokens) < TEXT_VOCAB:                           # filler, never produced by merges
        tokens.append("⟦f%04d%s⟧" % (len(tokens), rng.choice("xyz")))
    vocab = {t: i for i, t in enumerate(tokens)}
    assert vocab["[START]"] == 255 and vocab["[STOP]"] == 0 and len(vocab) == TEXT_VOCAB

    added = []
    for t in list(SPECIALS) + ["[START]"]:
        added.append(dict(id=vocab[t], content=t, single_word=False, lstrip=False, rstrip=False,
                          normalized=False, special=True))
    for lang in LANGUAGES:
        added.append(dict(id=vocab[f"[{lang}]"], content=f"[{lang}]", single_word=False, lstrip=False,
                          rstrip=False, normalized=False, special=True))
    for t in CJ_TOKENS:       # not special: the converter must keep both kinds
        added.append(dict(id=vocab[t], content=t, single_word=False, lstrip=False, rstrip=False,
                          normalized=True, special=False))
    added.sort(key=lambda a: a["id"])
    return vocab, merges, added


def write_grapheme_tokenizer(path, seed: int) -> None:
    from tokenizers import AddedToken, Tokenizer, models, pre_tokenizers
    vocab, merges, added = grapheme_vocab(seed)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens([AddedToken(a["content"], normalized=a["normalized"], special=True)
                            for a in added if a["special"]])
    tok.add_tokens([AddedToken(a["content"], normalized=a["normalized"], special=False)
                    for a in added if not a["special"]])
    if tok.get_vocab_size() != TEXT_VOCAB:
        raise AssertionError(f"tokenizer has {tok.get_vocab_size()} ids, expected {TEXT_VOCAB}")
    tok.save(str(path))


# --------------------------------------------------------------------------
# The synthetic Cangjie table
# --------------------------------------------------------------------------

CANGJIE_GLYPHS = "你好世界中文我们是的人在有这个他来说了不会天气很今上下大小学生明日月水火山木金土爱国家朋友语言谢再见早晚午饭吃喝茶电话书读写字"


def cangjie_entries(seed: int) -> list[str]:
    rng = random.Random(f"cangjie:{seed}")
    letters = "abcdefghijklmnopqrstuvwxyz"
    entries, codes = [], []
    for i, g in enumerate(CANGJIE_GLYPHS):
        if i % 7 == 3 and codes:                       # a shared code: index > 0 for the later glyphs
            code = rng.choice(codes)
        else:
            code = "".join(rng.choice(letters) for _ in range(rng.randint(1, 5)))
        codes.append(code)
        extra = "\tx" if i % 5 == 0 else ""            # extra fields are ignored ([:2])
        entries.append(f"{g}\t{code}{extra}")
    # a repeated glyph: the last code wins, its index counts its first occurrence in that list
    entries.append(f"{CANGJIE_GLYPHS[1]}\t{codes[3]}")
    entries.append(f"{CANGJIE_GLYPHS[2]}\t{codes[2]}")
    return entries


def write_cangjie(out, seed: int) -> None:
    data = json.dumps(cangjie_entries(seed), ensure_ascii=False, indent=1) + "\n"
    (out / CANGJIE_FILE).write_text(data, encoding="utf-8")
    repo = out / HF_CACHE_REPO
    (repo / "refs").mkdir(parents=True, exist_ok=True)
    (repo / "refs" / "main").write_text(HF_CACHE_HASH)    # no newline: it is read unstripped
    snap = repo / "snapshots" / HF_CACHE_HASH
    snap.mkdir(parents=True, exist_ok=True)
    (snap / CANGJIE_FILE).write_text(data, encoding="utf-8")


# --------------------------------------------------------------------------
# Models and the built-in voice
# --------------------------------------------------------------------------

def build_t3(seed: int, size: str):
    from chatterbox.models.t3 import T3
    from .build import derive_seed, perturb_degenerate
    torch.manual_seed(derive_seed(seed, f"t3-mtl-{size}"))
    model = T3(t3_config(size))
    perturb_degenerate(model, derive_seed(seed, f"t3-mtl-{size}-perturb"))
    return model.eval()


def build_s3gen(seed: int):
    from chatterbox.models.s3gen import S3Gen
    from .build import derive_seed, perturb_degenerate
    torch.manual_seed(derive_seed(seed, "s3gen-mtl"))
    model = S3Gen()                        # meanflow=False: the standard CFM
    perturb_degenerate(model, derive_seed(seed, "s3gen-mtl-perturb"))
    return model.eval()


def make_conds(seed: int):
    from chatterbox.mtl_tts import Conditionals
    from chatterbox.models.t3.modules.cond_enc import T3Cond
    from .build import derive_seed
    g = torch.Generator().manual_seed(derive_seed(seed, "conds-mtl"))
    spk = torch.randn(1, 256, generator=g)
    spk = spk / spk.norm(dim=1, keepdim=True)
    t3 = T3Cond(
        speaker_emb=spk,
        cond_prompt_speech_tokens=torch.randint(0, N_SPEECH_CODES, (1, PROMPT_LEN), generator=g,
                                                dtype=torch.long),
        emotion_adv=0.5 * torch.ones(1, 1, 1),
    )
    gen = dict(
        prompt_token=torch.randint(0, N_SPEECH_CODES, (1, 250), generator=g, dtype=torch.long),
        prompt_token_len=torch.tensor([250], dtype=torch.long),
        prompt_feat=torch.randn(1, 500, 80, generator=g) * 2.0 - 5.0,
        prompt_feat_len=None,
        embedding=torch.randn(1, 192, generator=g),
    )
    return Conditionals(t3, gen)


def build_snapshot_mtl(seed: int, size: str, out, log=print) -> dict:
    import gc
    import time
    from .build import save_safetensors, check_finite
    timings = {}
    t0 = time.time()
    write_grapheme_tokenizer(out / TOKENIZER_FILE, seed)
    write_cangjie(out, seed)
    timings["tokenizer"] = time.time() - t0

    for name, fn, fname in (
        ("ve", lambda: __import__("tests.reference.build", fromlist=["build_ve"]).build_ve(seed), VE_FILE),
        ("t3", lambda: build_t3(seed, size), T3_FILE),
        ("s3gen", lambda: build_s3gen(seed), S3GEN_FILE),
    ):
        t0 = time.time()
        model = fn()
        sd = model.state_dict()
        if fname.endswith(".safetensors"):
            save_safetensors(sd, out / fname)
        else:
            check_finite(sd, fname)
            torch.save(sd, out / fname)
        del model, sd
        gc.collect()
        timings[name] = time.time() - t0
        log(f"[snapshot] {fname}: {timings[name]:.1f}s")

    t0 = time.time()
    make_conds(seed).save(out / CONDS_FILE)
    timings["conds"] = time.time() - t0
    return timings
