#include "text/grapheme_tokenizer.h"

#include <algorithm>
#include <utility>

#include "core/errors.h"
#include "text/text_norm.h"
#include "text/text_unicode.h"

namespace cbs {

namespace mtl_detail {

struct CodepointRange {
    uint32_t lo, hi;
};
struct LowerEntry {
    uint32_t cp;
    uint32_t to[3];
};
struct NfkdEntry {
    uint32_t cp;
    uint32_t offset;
    uint32_t len;
};
struct CccRange {
    uint32_t lo, hi;
    uint8_t ccc;
};

#include "text/mtl_unicode_tables.inc"

template <size_t N>
static bool in_ranges(const CodepointRange (&table)[N], uint32_t cp) {
    auto it = std::upper_bound(std::begin(table), std::end(table), cp,
                               [](uint32_t v, const CodepointRange& r) { return v < r.lo; });
    if (it == std::begin(table)) return false;
    --it;
    return cp >= it->lo && cp <= it->hi;
}

static uint8_t ccc_of(uint32_t cp) {
    auto it = std::upper_bound(std::begin(kCccRanges), std::end(kCccRanges), cp,
                               [](uint32_t v, const CccRange& r) { return v < r.lo; });
    if (it == std::begin(kCccRanges)) return 0;
    --it;
    return (cp >= it->lo && cp <= it->hi) ? it->ccc : 0;
}

static const LowerEntry* lower_of(uint32_t cp) {
    auto it = std::lower_bound(std::begin(kLowerMap), std::end(kLowerMap), cp,
                               [](const LowerEntry& e, uint32_t v) { return e.cp < v; });
    return (it != std::end(kLowerMap) && it->cp == cp) ? it : nullptr;
}

static const NfkdEntry* nfkd_of(uint32_t cp) {
    auto it = std::lower_bound(std::begin(kNfkdIndex), std::end(kNfkdIndex), cp,
                               [](const NfkdEntry& e, uint32_t v) { return e.cp < v; });
    return (it != std::end(kNfkdIndex) && it->cp == cp) ? it : nullptr;
}

static bool valid(uint32_t cp) { return cp < unicode::kInvalidBase; }
static bool case_ignorable(uint32_t cp) { return valid(cp) && in_ranges(kCaseIgnorable, cp); }
static bool cased_only(uint32_t cp) { return valid(cp) && in_ranges(kCasedOnly, cp); }
static bool is_lo(uint32_t cp) { return valid(cp) && in_ranges(kLoRanges, cp); }
static bool hf_word(uint32_t cp) { return valid(cp) && in_ranges(kHfWordRanges, cp); }
static bool hf_space(uint32_t cp) { return valid(cp) && in_ranges(kHfSpaceRanges, cp); }

static std::vector<uint32_t> cps_of(const std::string& s) {
    std::vector<uint32_t> out;
    for (const auto& c : unicode::decode_utf8(s)) out.push_back(c.cp);
    return out;
}

static std::string utf8_of(const std::vector<uint32_t>& cps) {
    std::string out;
    for (uint32_t c : cps) unicode::append_utf8(out, c);
    return out;
}

}  // namespace mtl_detail

using namespace mtl_detail;

// --- lower / NFKD / Korean ---------------------------------------------------------------------

namespace mtl_text {

std::string py_lower(const std::string& utf8) {
    const std::vector<uint32_t> in = cps_of(utf8);
    std::vector<uint32_t> out;
    out.reserve(in.size());
    for (size_t i = 0; i < in.size(); ++i) {
        const uint32_t c = in[i];
        if (c == 0x3A3) {  // CPython handle_capital_sigma
            ptrdiff_t j = static_cast<ptrdiff_t>(i) - 1;
            while (j >= 0 && case_ignorable(in[j])) --j;
            bool final_sigma = j >= 0 && cased_only(in[j]);
            if (final_sigma && i + 1 < in.size()) {
                size_t k = i + 1;
                while (k < in.size() && case_ignorable(in[k])) ++k;
                final_sigma = k == in.size() || !cased_only(in[k]);
            }
            out.push_back(final_sigma ? 0x3C2 : 0x3C3);
            continue;
        }
        const LowerEntry* e = valid(c) ? lower_of(c) : nullptr;
        if (!e) {
            out.push_back(c);
            continue;
        }
        for (uint32_t t : e->to)
            if (t) out.push_back(t);
    }
    return utf8_of(out);
}

std::string nfkd(const std::string& utf8) {
    std::vector<uint32_t> out;
    for (uint32_t c : cps_of(utf8)) {
        if (c >= 0xAC00 && c <= 0xD7A3) {  // Hangul syllables (algorithmic)
            const uint32_t s = c - 0xAC00;
            out.push_back(0x1100 + s / 588);
            out.push_back(0x1161 + (s % 588) / 28);
            if (s % 28) out.push_back(0x11A7 + s % 28);
            continue;
        }
        const NfkdEntry* e = valid(c) ? nfkd_of(c) : nullptr;
        if (!e) {
            out.push_back(c);
            continue;
        }
        out.insert(out.end(), kNfkdData + e->offset, kNfkdData + e->offset + e->len);
    }
    // canonical ordering: a stable sort of every run of non-starters by combining class
    for (size_t i = 0; i < out.size();) {
        if (!valid(out[i]) || ccc_of(out[i]) == 0) {
            ++i;
            continue;
        }
        size_t j = i;
        while (j < out.size() && valid(out[j]) && ccc_of(out[j]) != 0) ++j;
        std::stable_sort(out.begin() + i, out.begin() + j,
                         [](uint32_t a, uint32_t b) { return ccc_of(a) < ccc_of(b); });
        i = j;
    }
    return utf8_of(out);
}

std::string korean_normalize(const std::string& utf8) {
    std::vector<uint32_t> out;
    for (uint32_t c : cps_of(utf8)) {
        if (c >= 0xAC00 && c <= 0xD7AF) {  // the reference's range, U+D7A4..D7AF included
            const uint32_t base = c - 0xAC00;
            out.push_back(0x1100 + base / (21 * 28));
            out.push_back(0x1161 + (base % (21 * 28)) / 28);
            if (base % 28 > 0) out.push_back(0x11A7 + base % 28);
        } else {
            out.push_back(c);
        }
    }
    size_t a = 0, b = out.size();  // str.strip()
    while (a < b && unicode::is_py_space(out[a])) ++a;
    while (b > a && unicode::is_py_space(out[b - 1])) --b;
    return utf8_of(std::vector<uint32_t>(out.begin() + a, out.begin() + b));
}

}  // namespace mtl_text

// --- the tokenizer ------------------------------------------------------------------------------

static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

GraphemeTokenizer::GraphemeTokenizer(const ModelFile& model) {
    const std::string& path = model.path();
    if (!model.has_key("chatterbox.tokenizer.model") ||
        model.get_string("chatterbox.tokenizer.model") != "chatterbox-grapheme")
        throw ModelError(path + ": no Multilingual grapheme tokenizer (chatterbox.tokenizer.model)");
    tokens_ = model.get_string_array("tokenizer.ggml.tokens");
    for (size_t i = 0; i < tokens_.size(); ++i) vocab_.emplace(tokens_[i], static_cast<int32_t>(i));

    const auto ids = model.get_int_array("chatterbox.added_tokens.id");
    const auto norm = model.get_int_array("chatterbox.added_tokens.normalized");
    if (norm.size() != ids.size()) throw ModelError(path + ": added token arrays differ in length");
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || ids[i] >= static_cast<int64_t>(tokens_.size()))
            throw ModelError(path + ": added token id out of range");
        added_.push_back({tokens_[ids[i]], static_cast<int32_t>(ids[i]), norm[i] != 0});
    }
    // longest first: the first match at a position is the longest
    std::stable_sort(added_.begin(), added_.end(),
                     [](const Added& a, const Added& b) { return a.content.size() > b.content.size(); });

    if (model.has_key("chatterbox.tokenizer.merges_a")) {
        const auto ma = model.get_string_array("chatterbox.tokenizer.merges_a");
        const auto mb = model.get_string_array("chatterbox.tokenizer.merges_b");
        if (ma.size() != mb.size()) throw ModelError(path + ": merge arrays differ in length");
        for (size_t r = 0; r < ma.size(); ++r) {
            auto ia = vocab_.find(ma[r]), ib = vocab_.find(mb[r]), im = vocab_.find(ma[r] + mb[r]);
            if (ia == vocab_.end() || ib == vocab_.end() || im == vocab_.end())
                throw ModelError(path + ": merge " + std::to_string(r) + " names a token not in the vocabulary");
            merges_.emplace(pair_key(ia->second, ib->second), std::make_pair(static_cast<int32_t>(r), im->second));
        }
    }
    unk_id_ = static_cast<int32_t>(model.get_int("chatterbox.tokenizer.unk_id"));
    start_id_ = static_cast<int32_t>(model.get_int("tokenizer.ggml.bos_token_id"));
    stop_id_ = static_cast<int32_t>(model.get_int("tokenizer.ggml.eos_token_id"));
    languages_ = model.get_string_array("chatterbox.tokenizer.languages");

    if (model.has_key("chatterbox.cangjie.glyphs")) {
        const auto glyphs = model.get_string_array("chatterbox.cangjie.glyphs");
        const auto codes = model.get_string_array("chatterbox.cangjie.codes");
        if (glyphs.size() != codes.size()) throw ModelError(path + ": Cangjie arrays differ in length");
        std::unordered_map<std::string, std::vector<std::string>> cj2word;
        for (size_t i = 0; i < glyphs.size(); ++i) {
            word2cj_[glyphs[i]] = codes[i];
            cj2word[codes[i]].push_back(glyphs[i]);
        }
        for (const auto& [glyph, code] : word2cj_) {
            const auto& list = cj2word[code];
            cj_index_[glyph] = static_cast<int32_t>(std::find(list.begin(), list.end(), glyph) - list.begin());
        }
    }
}

const std::string& GraphemeTokenizer::token(int32_t id) const {
    if (id < 0 || id >= static_cast<int32_t>(tokens_.size()))
        throw ParameterError("token id " + std::to_string(id) + " out of range");
    return tokens_[id];
}

std::string GraphemeTokenizer::cangjie(const std::string& utf8) const {
    std::string out;
    for (const auto& c : unicode::decode_utf8(utf8)) {
        const std::string ch = utf8.substr(c.offset, c.len);
        if (is_lo(c.cp)) {
            auto it = word2cj_.find(ch);
            if (it != word2cj_.end()) {
                std::string code = it->second;
                const int32_t index = cj_index_.at(ch);
                if (index > 0) code += std::to_string(index);
                for (const auto& cc : unicode::decode_utf8(code)) out += "[cj_" + code.substr(cc.offset, cc.len) + "]";
                out += "[cj_.]";
                continue;
            }
        }
        out += ch;
    }
    return out;
}

std::string GraphemeTokenizer::normalize(const std::string& utf8, const std::string& lang) const {
    std::string txt = mtl_text::nfkd(mtl_text::py_lower(utf8));
    if (lang == "zh") return cangjie(txt);
    if (lang == "ko") return mtl_text::korean_normalize(txt);
    return txt;  // ja: the Python hook; he, ru: unchanged without dicta / the stresser
}

void GraphemeTokenizer::split_added(const std::string& s, std::vector<Piece>& pieces, bool normalized_pass) const {
    std::vector<Piece> out;
    for (const Piece& p : pieces) {
        if (p.added_id >= 0) {
            out.push_back(p);
            continue;
        }
        size_t start = p.begin;
        size_t pos = p.begin;
        while (pos < p.end) {
            const Added* hit = nullptr;
            for (const Added& a : added_) {
                if (a.normalized != normalized_pass || a.content.empty()) continue;
                if (pos + a.content.size() <= p.end && s.compare(pos, a.content.size(), a.content) == 0) {
                    hit = &a;
                    break;
                }
            }
            if (!hit) {
                ++pos;
                continue;
            }
            if (pos > start) out.push_back({start, pos, -1});
            out.push_back({pos, pos + hit->content.size(), hit->id});
            pos += hit->content.size();
            start = pos;
        }
        if (p.end > start) out.push_back({start, p.end, -1});
    }
    pieces.swap(out);
}

void GraphemeTokenizer::bpe_word(const std::string& s, size_t begin, size_t end, std::vector<int32_t>& out) const {
    std::vector<int32_t> sym;
    const std::string word = s.substr(begin, end - begin);
    for (const auto& c : unicode::decode_utf8(word)) {
        auto it = vocab_.find(word.substr(c.offset, c.len));
        sym.push_back(it != vocab_.end() ? it->second : unk_id_);
    }
    if (unk_id_ < 0)
        for (int32_t id : sym)
            if (id < 0) throw ModelError("grapheme tokenizer: a character outside the vocabulary and no [UNK]");
    while (sym.size() > 1) {
        int32_t best_rank = -1, best_id = -1;
        size_t best_pos = 0;
        for (size_t i = 0; i + 1 < sym.size(); ++i) {
            auto it = merges_.find(pair_key(sym[i], sym[i + 1]));
            if (it != merges_.end() && (best_rank < 0 || it->second.first < best_rank)) {
                best_rank = it->second.first;
                best_id = it->second.second;
                best_pos = i;
            }
        }
        if (best_rank < 0) break;
        sym[best_pos] = best_id;
        sym.erase(sym.begin() + best_pos + 1);
    }
    out.insert(out.end(), sym.begin(), sym.end());
}

std::vector<int32_t> GraphemeTokenizer::encode(const std::string& preprocessed, const std::string& lang) const {
    std::string txt;
    if (!lang.empty()) {
        std::string tag = lang;
        for (char& ch : tag)
            if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
        txt = "[" + tag + "]";
    }
    txt += preprocessed;
    replace_all(txt, " ", "[SPACE]");

    std::vector<Piece> pieces{{0, txt.size(), -1}};
    split_added(txt, pieces, false);
    split_added(txt, pieces, true);

    std::vector<int32_t> ids;
    for (const Piece& p : pieces) {
        if (p.added_id >= 0) {
            ids.push_back(p.added_id);
            continue;
        }
        // Whitespace pre-tokenizer: runs of \w, runs of [^\w\s]; \s dropped
        const std::string seg = txt.substr(p.begin, p.end - p.begin);
        const auto chars = unicode::decode_utf8(seg);
        size_t i = 0;
        while (i < chars.size()) {
            const uint32_t c = chars[i].cp;
            if (hf_space(c)) {
                ++i;
                continue;
            }
            const bool w = hf_word(c);
            size_t j = i + 1;
            while (j < chars.size() && !hf_space(chars[j].cp) && hf_word(chars[j].cp) == w) ++j;
            const size_t b = chars[i].offset;
            const size_t e = chars[j - 1].offset + chars[j - 1].len;
            bpe_word(seg, b, e, ids);
            i = j;
        }
    }
    return ids;
}

}  // namespace cbs
