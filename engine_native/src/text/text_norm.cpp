#include "text/text_norm.h"

#include <utility>
#include <vector>

#include "text/text_unicode.h"

namespace cbs {

void replace_all(std::string& s, const std::string& from, const std::string& to) {
    if (s.find(from) == std::string::npos) return;
    std::string out;
    out.reserve(s.size());
    size_t pos = 0;
    for (size_t hit; (hit = s.find(from, pos)) != std::string::npos; pos = hit + from.size()) {
        out.append(s, pos, hit - pos);
        out += to;
    }
    out.append(s, pos, std::string::npos);
    s = std::move(out);
}

namespace {

struct PuncRules {
    std::vector<std::pair<std::string, std::string>> replace;  // applied in order
    std::vector<std::string> enders;                           // else '.' is appended
};

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Both references' punc_norm: the prompt message for empty text; the first character
// upper-cased (before whitespace collapsing, as the references do); " ".join(text.split());
// the replacements in order; trailing spaces removed; '.' appended unless an ender ends it.
std::string normalize_punctuation(const std::string& utf8, const PuncRules& rules) {
    if (utf8.empty()) return "You need to add some text for me to talk.";

    std::vector<unicode::Char> chars = unicode::decode_utf8(utf8);
    std::vector<uint32_t> first_upper;
    const bool cap = unicode::py_lower_to_upper(chars[0].cp, first_upper);

    std::string text;
    text.reserve(utf8.size() + 8);
    bool pending_space = false;
    for (size_t i = 0; i < chars.size(); ++i) {
        const unicode::Char& c = chars[i];
        if (unicode::is_py_space(c.cp)) {
            pending_space = !text.empty();
            continue;
        }
        if (pending_space) text.push_back(' ');
        pending_space = false;
        if (i == 0 && cap) {
            for (uint32_t u : first_upper) unicode::append_utf8(text, u);
        } else {
            text.append(utf8, c.offset, c.len);
        }
    }

    for (const auto& [from, to] : rules.replace) replace_all(text, from, to);
    while (!text.empty() && text.back() == ' ') text.pop_back();
    for (const std::string& e : rules.enders)
        if (ends_with(text, e)) return text;
    text.push_back('.');
    return text;
}

}  // namespace

std::string punc_norm(const std::string& utf8) {
    static const PuncRules kTurbo = {
        {
            {"\xE2\x80\xA6", ", "},  // … (U+2026)
            {":", ","},
            {"\xE2\x80\x94", "-"},   // — (U+2014)
            {"\xE2\x80\x93", "-"},   // – (U+2013)
            {" ,", ","},
            {"\xE2\x80\x9C", "\""},  // “
            {"\xE2\x80\x9D", "\""},  // ”
            {"\xE2\x80\x98", "'"},   // ‘
            {"\xE2\x80\x99", "'"},   // ’
        },
        {".", "!", "?", "-", ","},
    };
    return normalize_punctuation(utf8, kTurbo);
}

std::string punc_norm_mtl(const std::string& utf8) {
    static const PuncRules kMultilingual = {
        {
            {"...", ", "},
            {"\xE2\x80\xA6", ", "},  // …
            {":", ","},
            {" - ", ", "},
            {";", ", "},
            {"\xE2\x80\x94", "-"},   // —
            {"\xE2\x80\x93", "-"},   // –
            {" ,", ","},
            {"\xE2\x80\x9C", "\""},  // “
            {"\xE2\x80\x9D", "\""},  // ”
            {"\xE2\x80\x98", "'"},   // ‘
            {"\xE2\x80\x99", "'"},   // ’
        },
        {".", "!", "?", "-", ",",
         "\xE3\x80\x81",   // 、
         "\xEF\xBC\x8C",   // ，
         "\xE3\x80\x82",   // 。
         "\xEF\xBC\x9F",   // ？
         "\xEF\xBC\x81"},  // ！
    };
    return normalize_punctuation(utf8, kMultilingual);
}

}  // namespace cbs
