#include "text/text_bpe.h"

#include <algorithm>
#include <cstring>
#include <queue>

#include "text/text_unicode.h"

namespace cbs {

namespace {

constexpr int kTypeControl = 3, kTypeUserDefined = 4;  // gguf token types of added tokens

uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// The character that ends at byte `pos` (pos > lo), decoded leniently: (codepoint, start byte).
std::pair<uint32_t, size_t> char_before(const std::string& s, size_t lo, size_t pos) {
    size_t start = pos - 1;
    while (start > lo && pos - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    std::vector<unicode::Char> cs = unicode::decode_utf8(s.substr(start, pos - start));
    return {cs.back().cp, start + cs.back().offset};
}

// The character that starts at byte `pos` (pos < hi): (codepoint, byte length).
std::pair<uint32_t, size_t> char_at(const std::string& s, size_t pos, size_t hi) {
    std::vector<unicode::Char> cs = unicode::decode_utf8(s.substr(pos, std::min<size_t>(4, hi - pos)));
    return {cs.front().cp, cs.front().len};
}

// Approximation of the Rust regex \w (Alphabetic | Mark | Nd | Pc | Join_Control) by
// \p{L} | \p{N} | '_'; only used for single_word added tokens (none in Chatterbox models).
bool is_word_char(uint32_t cp) { return unicode::is_letter(cp) || unicode::is_number(cp) || cp == '_'; }

}  // namespace

Gpt2Tokenizer::Gpt2Tokenizer(const ModelFile& model) {
    const std::string& path = model.path();
    auto bad = [&](const std::string& what) { return EngineError(path + ": malformed tokenizer metadata: " + what); };

    tokens_ = model.get_string_array("tokenizer.ggml.tokens");
    if (tokens_.empty()) throw bad("tokenizer.ggml.tokens is empty");
    if (tokens_.size() > 0x7FFFFFFF) throw bad("too many tokens");
    const int32_t n_vocab = static_cast<int32_t>(tokens_.size());
    {
        std::vector<int64_t> types = model.get_int_array("tokenizer.ggml.token_type");
        if (types.size() != tokens_.size())
            throw bad("tokenizer.ggml.token_type has " + std::to_string(types.size()) + " entries for " +
                      std::to_string(tokens_.size()) + " tokens");
        token_types_.assign(types.begin(), types.end());
    }
    if (model.has_key("tokenizer.ggml.bos_token_id")) bos_id_ = static_cast<int32_t>(model.get_int("tokenizer.ggml.bos_token_id"));
    if (model.has_key("tokenizer.ggml.eos_token_id")) eos_id_ = static_cast<int32_t>(model.get_int("tokenizer.ggml.eos_token_id"));
    if (bos_id_ >= n_vocab || eos_id_ >= n_vocab) throw bad("bos/eos token id out of range");

    // Added tokens: the converter's per-token arrays, or (older files) the token types alone.
    if (model.has_key("chatterbox.added_tokens.id")) {
        std::vector<int64_t> ids = model.get_int_array("chatterbox.added_tokens.id");
        auto flags = [&](const char* name) {
            std::vector<int64_t> v = model.get_int_array(std::string("chatterbox.added_tokens.") + name);
            if (v.size() != ids.size())
                throw bad(std::string("chatterbox.added_tokens.") + name + " has " + std::to_string(v.size()) +
                          " entries for " + std::to_string(ids.size()) + " added tokens");
            return v;
        };
        auto special = flags("special"), lstrip = flags("lstrip"), rstrip = flags("rstrip"),
             normalized = flags("normalized"), single_word = flags("single_word");
        for (size_t i = 0; i < ids.size(); ++i) {
            if (ids[i] < 0 || ids[i] >= n_vocab) throw bad("added token id " + std::to_string(ids[i]) + " out of range");
            const int32_t id = static_cast<int32_t>(ids[i]);
            if (tokens_[id].empty()) throw bad("added token " + std::to_string(id) + " is empty");
            if (added_index_.count(id)) throw bad("added token id " + std::to_string(id) + " repeated");
            added_index_[id] = added_.size();
            added_.push_back({tokens_[id], id, special[i] != 0, lstrip[i] != 0, rstrip[i] != 0, normalized[i] != 0,
                              single_word[i] != 0});
        }
    } else {
        for (int32_t id = 0; id < n_vocab; ++id) {
            if ((token_types_[id] == kTypeControl || token_types_[id] == kTypeUserDefined) && !tokens_[id].empty()) {
                const bool special = token_types_[id] == kTypeControl;
                added_index_[id] = added_.size();
                added_.push_back({tokens_[id], id, special, false, false, !special, false});
            }
        }
    }

    // Token text -> id for the merges (ordinary tokens win over added ones of the same text).
    std::unordered_map<std::string, int32_t> vocab;
    vocab.reserve(tokens_.size());
    for (int32_t id = 0; id < n_vocab; ++id)
        if (!added_index_.count(id)) vocab.emplace(tokens_[id], id);
    for (const Added& a : added_) vocab.emplace(a.content, a.id);

    // GPT-2 bytes_to_unicode.
    {
        int n = 0;
        for (int b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            byte_to_cp_[b] = printable ? static_cast<uint32_t>(b) : static_cast<uint32_t>(256 + n++);
            cp_to_byte_[byte_to_cp_[b]] = static_cast<uint8_t>(b);
            std::string ch;
            unicode::append_utf8(ch, byte_to_cp_[b]);
            auto it = vocab.find(ch);
            if (it == vocab.end()) throw bad("the byte-level alphabet lacks the token for byte " + std::to_string(b));
            byte_token_[b] = it->second;
        }
    }

    std::vector<std::string> merges = model.get_string_array("tokenizer.ggml.merges");
    merges_.reserve(merges.size() * 2);
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const std::string& m = merges[rank];
        const size_t sp = m.find(' ');
        if (sp == std::string::npos || sp == 0 || sp + 1 >= m.size() || m.find(' ', sp + 1) != std::string::npos)
            throw bad("merge " + std::to_string(rank) + " ('" + m + "') is not two tokens separated by one space");
        const std::string a = m.substr(0, sp), b = m.substr(sp + 1);
        auto ia = vocab.find(a), ib = vocab.find(b), iab = vocab.find(a + b);
        if (ia == vocab.end() || ib == vocab.end() || iab == vocab.end())
            throw bad("merge " + std::to_string(rank) + " ('" + m + "') uses a token missing from the vocabulary");
        merges_[pair_key(ia->second, ib->second)] = {static_cast<int32_t>(rank), iab->second};
    }
}

void Gpt2Tokenizer::split_added(const std::string& s, std::vector<Piece>& pieces, bool normalized_pass) const {
    std::vector<const Added*> pats;
    bool first[256] = {};
    for (const Added& a : added_) {
        if (a.normalized != normalized_pass) continue;
        pats.push_back(&a);
        first[static_cast<unsigned char>(a.content[0])] = true;
    }
    if (pats.empty()) return;

    std::vector<Piece> out;
    for (const Piece& p : pieces) {
        if (p.added_id >= 0) {
            out.push_back(p);
            continue;
        }
        const size_t b = p.begin, e = p.end;
        size_t start_offset = b, pos = b;
        while (pos < e) {
            // Leftmost-longest match at or after pos (as aho-corasick MatchKind::LeftmostLongest).
            const Added* best = nullptr;
            size_t ms = e;
            for (size_t i = pos; i < e && !best; ++i) {
                if (!first[static_cast<unsigned char>(s[i])]) continue;
                for (const Added* a : pats) {
                    const size_t n = a->content.size();
                    if (n <= e - i && std::memcmp(s.data() + i, a->content.data(), n) == 0 &&
                        (!best || n > best->content.size())) {
                        best = a;
                        ms = i;
                    }
                }
            }
            if (!best) break;
            const size_t me = ms + best->content.size();
            size_t start = ms, stop = me;
            pos = me;
            if (best->single_word) {
                const bool start_ok = ms == b || !is_word_char(char_before(s, b, ms).first);
                const bool stop_ok = me == e || !is_word_char(char_at(s, me, e).first);
                if (!start_ok || !stop_ok) continue;
            }
            if (best->lstrip) {
                size_t ns = ms;
                while (ns > b) {
                    auto [cp, cs] = char_before(s, b, ns);
                    if (!unicode::is_regex_space(cp)) break;
                    ns = cs;
                }
                start = std::max(ns, start_offset);
            }
            if (best->rstrip) {
                while (stop < e) {
                    auto [cp, len] = char_at(s, stop, e);
                    if (!unicode::is_regex_space(cp)) break;
                    stop += len;
                }
                pos = stop;
            }
            if (start_offset < start) out.push_back({start_offset, start, -1});
            out.push_back({start, stop, best->id});
            start_offset = stop;
        }
        if (start_offset < e) out.push_back({start_offset, e, -1});
    }
    pieces.swap(out);
}

// GPT-2 pre-tokenisation regex, applied at each position in order of its alternatives:
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
static void pretok_range(const std::string& s, size_t b, size_t e, std::vector<std::pair<size_t, size_t>>& out) {
    using namespace unicode;
    std::vector<Char> cs = decode_utf8(s.substr(b, e - b));
    const size_t n = cs.size();
    auto cp = [&](size_t i) { return cs[i].cp; };
    auto L = [&](size_t i) { return is_letter(cp(i)); };
    auto N = [&](size_t i) { return is_number(cp(i)); };
    auto S = [&](size_t i) { return is_regex_space(cp(i)); };
    auto O = [&](size_t i) { return !S(i) && !L(i) && !N(i); };
    auto byte_at = [&](size_t i) { return i < n ? b + cs[i].offset : e; };

    size_t i = 0;
    while (i < n) {
        size_t j = i;
        // contractions (case-sensitive, as in GPT-2)
        if (cp(i) == '\'' && i + 1 < n) {
            const uint32_t c1 = cp(i + 1);
            if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') j = i + 2;
            else if (i + 2 < n && ((c1 == 'r' && cp(i + 2) == 'e') || (c1 == 'v' && cp(i + 2) == 'e') ||
                                   (c1 == 'l' && cp(i + 2) == 'l')))
                j = i + 3;
        }
        if (j == i) {
            const size_t k = (cp(i) == ' ' && i + 1 < n) ? i + 1 : i;  // optional leading space
            if (L(k)) {
                j = k;
                while (j < n && L(j)) ++j;
            } else if (N(k)) {
                j = k;
                while (j < n && N(j)) ++j;
            } else if (O(k)) {
                j = k;
                while (j < n && O(j)) ++j;
            } else {
                // whitespace: \s+(?!\S) keeps the last space for the next token, else \s+
                size_t r = i;
                while (r < n && S(r)) ++r;
                j = (r < n && r - i >= 2) ? r - 1 : r;
            }
        }
        out.emplace_back(byte_at(i), byte_at(j));
        i = j;
    }
}

std::vector<std::pair<size_t, size_t>> Gpt2Tokenizer::pretokenize(const std::string& utf8) const {
    std::vector<std::pair<size_t, size_t>> out;
    pretok_range(utf8, 0, utf8.size(), out);
    return out;
}

void Gpt2Tokenizer::bpe(const std::string& s, size_t begin, size_t end, std::vector<int32_t>& out) const {
    const size_t n = end - begin;
    if (n == 0) return;
    struct Sym {
        int32_t id;
        int prev, next;
    };
    std::vector<Sym> sym(n);
    for (size_t i = 0; i < n; ++i)
        sym[i] = {byte_token_[static_cast<unsigned char>(s[begin + i])], static_cast<int>(i) - 1,
                  i + 1 < n ? static_cast<int>(i + 1) : -1};
    if (n > 1) {
        struct Cand {
            int32_t rank;
            int pos;
            bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
        };
        std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
        auto push = [&](int pos) {
            if (pos < 0 || sym[pos].next < 0) return;
            auto it = merges_.find(pair_key(sym[pos].id, sym[sym[pos].next].id));
            if (it != merges_.end()) heap.push({it->second.first, pos});
        };
        std::vector<char> alive(n, 1);
        for (size_t i = 0; i + 1 < n; ++i) push(static_cast<int>(i));
        while (!heap.empty()) {
            const Cand c = heap.top();
            heap.pop();
            if (!alive[c.pos] || sym[c.pos].next < 0) continue;
            const int nx = sym[c.pos].next;
            auto it = merges_.find(pair_key(sym[c.pos].id, sym[nx].id));
            if (it == merges_.end() || it->second.first != c.rank) continue;  // stale entry
            sym[c.pos].id = it->second.second;
            sym[c.pos].next = sym[nx].next;
            if (sym[nx].next >= 0) sym[sym[nx].next].prev = c.pos;
            alive[nx] = 0;
            push(sym[c.pos].prev);
            push(c.pos);
        }
    }
    for (int i = 0; i >= 0; i = sym[i].next) out.push_back(sym[i].id);
}

std::vector<int32_t> Gpt2Tokenizer::encode(const std::string& utf8) const {
    std::vector<int32_t> ids;
    if (utf8.empty()) return ids;
    std::vector<Piece> pieces{{0, utf8.size(), -1}};
    split_added(utf8, pieces, /*normalized_pass=*/false);  // non-normalized tokens, on the raw text
    split_added(utf8, pieces, /*normalized_pass=*/true);   // then normalized ones (no normalizer: same text)
    std::vector<std::pair<size_t, size_t>> words;
    for (const Piece& p : pieces) {
        if (p.added_id >= 0) {
            ids.push_back(p.added_id);
            continue;
        }
        words.clear();
        pretok_range(utf8, p.begin, p.end, words);
        for (auto [wb, we] : words) bpe(utf8, wb, we, ids);
    }
    return ids;
}

std::string Gpt2Tokenizer::decode(const std::vector<int32_t>& ids) const {
    std::string out;
    for (int32_t id : ids) {
        if (id < 0 || id >= static_cast<int32_t>(tokens_.size()))
            throw EngineError("token id " + std::to_string(id) + " is out of range (vocabulary of " +
                              std::to_string(tokens_.size()) + ")");
        if (added_index_.count(id)) {
            out += tokens_[id];
            continue;
        }
        for (const unicode::Char& c : unicode::decode_utf8(tokens_[id])) {
            auto it = cp_to_byte_.find(c.cp);
            if (it != cp_to_byte_.end()) out.push_back(static_cast<char>(it->second));
            else out.append(tokens_[id], c.offset, c.len);
        }
    }
    return out;
}

}  // namespace cbs
