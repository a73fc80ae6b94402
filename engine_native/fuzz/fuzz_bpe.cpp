// libFuzzer target: GPT-2 byte-level BPE (text/text_bpe) on arbitrary bytes with a real
// vocabulary: the tokenizer metadata of a converted Turbo/Nano model (CBS_FUZZ_BPE_GGUF;
// scripts/fuzz.sh makes a metadata-only file from the reference snapshot's tokenizer).
// Every id must lie in the vocabulary and decoding must give back the input's bytes (the
// model's added tokens neither strip nor normalise, so the split is lossless).
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "core/model_file.h"
#include "fuzz_input.h"
#include "text/text_bpe.h"

namespace {
std::unique_ptr<cbs::Gpt2Tokenizer> tok;
bool lossless = true;
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    cbs::ModelFile meta(cbs_fuzz::required_env_path("CBS_FUZZ_BPE_GGUF"), cbs::ModelFile::MetadataOnly{});
    tok = std::make_unique<cbs::Gpt2Tokenizer>(meta);
    if (meta.has_key("chatterbox.added_tokens.lstrip"))
        for (const char* k : {"chatterbox.added_tokens.lstrip", "chatterbox.added_tokens.rstrip"})
            for (int64_t v : meta.get_int_array(k)) lossless = lossless && v == 0;
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    const std::vector<int32_t> ids = tok->encode(text);
    for (int32_t id : ids)
        if (id < 0 || static_cast<size_t>(id) >= tok->vocab_size()) std::abort();
    if (lossless && tok->decode(ids) != text) {
        std::fprintf(stderr, "decode(encode(x)) != x\n");
        std::abort();
    }
    size_t end = 0;
    for (auto [b, e] : tok->pretokenize(text)) {
        if (b != end || e <= b || e > text.size()) std::abort();  // pieces tile the input
        end = e;
    }
    if (end != text.size()) std::abort();
    return 0;
}
