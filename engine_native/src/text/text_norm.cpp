#include "text/text_norm.h"

#include <utility>
#include <vector>

#include "text/text_unicode.h"

namespace cbs {

static void replace_all(std::string& s, const std::string& from, const std::string& to) {
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

std::string punc_norm(const std::string& utf8) {
    if (utf8.empty()) return "You need to add some text for me to talk.";

    std::vector<unicode::Char> chars = unicode::decode_utf8(utf8);

    // Capitalise the first character (before whitespace collapsing, as the reference does).
    std::vector<uint32_t> first_upper;
    const bool cap = unicode::py_lower_to_upper(chars[0].cp, first_upper);

    // " ".join(text.split())
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

    static const std::pair<const char*, const char*> kReplace[] = {
        {"\xE2\x80\xA6", ", "},  // … (U+2026)
        {":", ","},
        {"\xE2\x80\x94", "-"},   // — (U+2014)
        {"\xE2\x80\x93", "-"},   // – (U+2013)
        {" ,", ","},
        {"\xE2\x80\x9C", "\""},  // “
        {"\xE2\x80\x9D", "\""},  // ”
        {"\xE2\x80\x98", "'"},   // ‘
        {"\xE2\x80\x99", "'"},   // ’
    };
    for (auto& [from, to] : kReplace) replace_all(text, from, to);

    while (!text.empty() && text.back() == ' ') text.pop_back();
    const char last = text.empty() ? '\0' : text.back();
    if (!(last == '.' || last == '!' || last == '?' || last == '-' || last == ','))
        text.push_back('.');
    return text;
}

}  // namespace cbs
