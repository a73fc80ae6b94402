// libFuzzer target: the text every user types or pastes, through both punctuation
// normalisations (Turbo/Nano's punc_norm, Multilingual's punc_norm_mtl) and the Multilingual
// front end's Unicode steps (str.lower with Final_Sigma, NFKD, Korean jamo), on arbitrary
// bytes (invalid UTF-8 included). Invariants the engine relies on are checked too.
#include <cstdlib>
#include <string>

#include "text/grapheme_tokenizer.h"
#include "text/text_norm.h"
#include "text/text_unicode.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const std::string a = cbs::punc_norm(text), b = cbs::punc_norm_mtl(text);
    if (a.empty() || b.empty()) std::abort();  // both always end the text with punctuation
    cbs::mtl_text::py_lower(text);
    cbs::mtl_text::nfkd(text);
    cbs::mtl_text::korean_normalize(text);
    // Lenient decoding covers every byte exactly once and re-encodes to the input.
    std::string again;
    size_t next = 0;
    for (const cbs::unicode::Char& c : cbs::unicode::decode_utf8(text)) {
        if (c.offset != next || c.len == 0) std::abort();
        next += c.len;
        cbs::unicode::append_utf8(again, c.cp);
    }
    if (next != text.size() || again != text) std::abort();
    return 0;
}
