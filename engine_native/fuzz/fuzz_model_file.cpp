// libFuzzer target: a model file as anyone may hand one around (model-sharing sites,
// forums). Everything a model load runs before its first graph: the GGUF header, metadata
// and tensor table (core/model_file, ggml's gguf reader), the tensor data read into a CPU
// buffer, the tokenizer built from the metadata, and every component's constructor with its
// hyper-parameters and shape checks against the file's own dimensions.
//
// Bad input must end in an exception (the bindings turn every std::exception into a Python
// one); a sanitizer report, an abort (GGML_ASSERT), a hang or a huge allocation is a finding.
#include <cstdlib>
#include <memory>

#include "cloning/audio_features.h"
#include "cloning/campplus.h"
#include "cloning/s3tokenizer.h"
#include "cloning/voice_encoder.h"
#include "core/backend.h"
#include "core/errors.h"
#include "core/model_file.h"
#include "fuzz_input.h"
#include "hift/hift.h"
#include "hift/hift_ggml.h"
#include "hift/hift_source.h"
#include "s3gen/cfm_estimator.h"
#include "s3gen/s3gen_encoder.h"
#include "t3/alignment.h"
#include "t3/t3_model.h"
#include "text/grapheme_tokenizer.h"
#include "text/text_bpe.h"

namespace {

cbs::BackendPtr* cpu = nullptr;

// Runs f; an exception is the refusal a bad file should get.
template <class F>
void refused_or_done(F&& f) {
    try {
        f();
    } catch (const std::exception&) {
    }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    // gguf's message for every refused header would drown libFuzzer's own output.
    if (!std::getenv("CBS_FUZZ_VERBOSE")) ggml_log_set([](ggml_log_level, const char*, void*) {}, nullptr);
    cbs::load_backends();
    cpu = new cbs::BackendPtr(cbs::make_backend("cpu", 1));
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string& path = cbs_fuzz::input_file(data, size);
    refused_or_done([&] {
        cbs::ModelFile meta(path, cbs::ModelFile::MetadataOnly{});
        refused_or_done([&] { cbs::Gpt2Tokenizer tok(meta); tok.encode("Hello, world [laugh]."); });
        refused_or_done([&] {
            cbs::GraphemeTokenizer tok(meta);
            tok.encode(tok.normalize("Hello, world.", "en"), "en");
        });
    });
    refused_or_done([&] {
        ggml_backend_t b = cpu->get();
        cbs::ModelFile mf(path, b);
        refused_or_done([&] { cbs::make_t3(mf, b); });
        refused_or_done([&] { cbs::AlignmentParams::from(mf); });
        refused_or_done([&] { cbs::S3GenEncoder enc(mf, b); });
        refused_or_done([&] { cbs::CfmEstimator cfm(mf, b); });
        refused_or_done([&] { cbs::HiftSource src(mf); });
        refused_or_done([&] { cbs::Hift hift(mf, b); });
        refused_or_done([&] { cbs::HiftGgml hift(mf, b); });
        refused_or_done([&] { cbs::Mel24k mel(mf); });
        refused_or_done([&] { cbs::KaldiFbank fb(mf); });
        refused_or_done([&] { cbs::S3TokLogMel lm(mf); });
        refused_or_done([&] { cbs::VoiceEncoder ve(mf); });
        refused_or_done([&] { cbs::CampPlus cp(mf, b); });
        refused_or_done([&] { cbs::S3TokenizerV2 tok(mf, b); });
        mf.release_lazy();
    });
    return 0;
}
