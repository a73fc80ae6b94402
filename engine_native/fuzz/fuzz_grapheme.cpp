// libFuzzer target: the Multilingual grapheme tokenizer (text/grapheme_tokenizer) with a
// real vocabulary and Cangjie table: the tokenizer metadata of a converted Multilingual model
// (CBS_FUZZ_GRAPHEME_GGUF; scripts/fuzz.sh makes a metadata-only file from it). The first
// input byte picks the language (one of the model's, or a made-up tag), the rest is the text,
// through normalize() and encode() as the engine calls them. Every id must be in the vocabulary.
#include <cstdlib>
#include <memory>

#include "core/model_file.h"
#include "fuzz_input.h"
#include "text/grapheme_tokenizer.h"

namespace {
std::unique_ptr<cbs::GraphemeTokenizer> tok;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    cbs::ModelFile meta(cbs_fuzz::required_env_path("CBS_FUZZ_GRAPHEME_GGUF"), cbs::ModelFile::MetadataOnly{});
    tok = std::make_unique<cbs::GraphemeTokenizer>(meta);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const auto& langs = tok->languages();
    std::string lang;
    if (data[0] < langs.size()) lang = langs[data[0]];
    else if (data[0] == 0xFF) lang = "";
    else lang = std::string(1, static_cast<char>('a' + data[0] % 26)) + "Z";
    const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
    const std::vector<int32_t> ids = tok->encode(tok->normalize(text, lang), lang);
    for (int32_t id : ids)
        if (id < 0 || static_cast<size_t>(id) >= tok->vocab_size()) std::abort();
    return 0;
}
