#include "text/text_unicode.h"

#include <algorithm>
#include <iterator>

namespace cbs::unicode {
namespace unicode_detail {
struct CodepointRange {
    uint32_t lo, hi;
};
struct UpperEntry {
    uint32_t cp;
    uint32_t up[3];
};
#include "text/unicode_tables.inc"

template <size_t N>
static bool in_ranges(const CodepointRange (&table)[N], uint32_t cp) {
    auto it = std::upper_bound(std::begin(table), std::end(table), cp,
                               [](uint32_t v, const CodepointRange& r) { return v < r.lo; });
    return it != std::begin(table) && cp <= std::prev(it)->hi;
}
}  // namespace unicode_detail

using namespace unicode_detail;

std::vector<Char> decode_utf8(const std::string& s) {
    std::vector<Char> out;
    out.reserve(s.size());
    const auto* p = reinterpret_cast<const unsigned char*>(s.data());
    const size_t n = s.size();
    size_t i = 0;
    while (i < n) {
        const unsigned char b = p[i];
        uint32_t cp = 0;
        size_t len = 0;
        uint32_t min = 0;
        if (b < 0x80) {
            cp = b, len = 1;
        } else if ((b & 0xE0) == 0xC0) {
            cp = b & 0x1F, len = 2, min = 0x80;
        } else if ((b & 0xF0) == 0xE0) {
            cp = b & 0x0F, len = 3, min = 0x800;
        } else if ((b & 0xF8) == 0xF0) {
            cp = b & 0x07, len = 4, min = 0x10000;
        }
        bool ok = len > 0 && i + len <= n;
        for (size_t k = 1; ok && k < len; ++k) {
            if ((p[i + k] & 0xC0) != 0x80) ok = false;
            else cp = (cp << 6) | (p[i + k] & 0x3F);
        }
        if (ok && len > 1 && (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) ok = false;
        if (!ok) {
            out.push_back({kInvalidBase + b, static_cast<uint32_t>(i), 1});
            i += 1;
        } else {
            out.push_back({cp, static_cast<uint32_t>(i), static_cast<uint32_t>(len)});
            i += len;
        }
    }
    return out;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp >= kInvalidBase) {
        out.push_back(static_cast<char>(cp - kInvalidBase));
    } else if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

bool is_letter(uint32_t cp) { return cp < kInvalidBase && in_ranges(kLetterRanges, cp); }
bool is_number(uint32_t cp) { return cp < kInvalidBase && in_ranges(kNumberRanges, cp); }
bool is_regex_space(uint32_t cp) { return cp < kInvalidBase && in_ranges(kRegexSpaceRanges, cp); }
bool is_py_space(uint32_t cp) { return cp < kInvalidBase && in_ranges(kPySpaceRanges, cp); }

bool py_lower_to_upper(uint32_t cp, std::vector<uint32_t>& upper) {
    auto it = std::lower_bound(std::begin(kUpperMap), std::end(kUpperMap), cp,
                               [](const UpperEntry& e, uint32_t v) { return e.cp < v; });
    if (it == std::end(kUpperMap) || it->cp != cp) return false;
    upper.clear();
    for (uint32_t u : it->up)
        if (u) upper.push_back(u);
    return true;
}

}  // namespace cbs::unicode
