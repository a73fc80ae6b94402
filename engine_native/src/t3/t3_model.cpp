#include "t3/t3_model.h"

#include <cmath>
#include <set>
#include <string>

#include "ggml-cpu.h"

#include "t3/t3_gpt2.h"
#include "t3/t3_llama.h"

namespace cbs {

std::unique_ptr<T3Model> make_t3(const ModelFile& mf, ggml_backend_t backend) {
    const std::string arch = mf.get_string("chatterbox.t3.arch");
    if (arch == "gpt2") return std::make_unique<T3Gpt2>(mf, backend);
    if (arch == "llama") return std::make_unique<T3Llama>(mf, backend);
    throw ModelError(mf.path() + ": T3 architecture '" + arch + "' is not supported by this engine (known: gpt2, llama)");
}

std::vector<std::vector<float>> T3Model::step_batch(const std::vector<T3Cache*>& caches,
                                                    const std::vector<int32_t>& tokens) {
    if (caches.size() != tokens.size()) throw EngineError("step_batch needs one token per cache");
    std::vector<std::vector<float>> out;
    out.reserve(caches.size());
    for (size_t i = 0; i < caches.size(); ++i) out.push_back(step(*caches[i], tokens[i]));
    return out;
}

void check_token_ids(const std::vector<int32_t>& ids, int vocab, const char* what) {
    for (int32_t id : ids)
        if (id < 0 || id >= vocab)
            throw EngineError(std::string(what) + " token id " + std::to_string(id) + " is outside [0, " +
                              std::to_string(vocab) + ")");
}

void check_batch(const std::vector<T3Cache*>& caches, const std::vector<int32_t>& tokens, const T3Hparams& hp) {
    if (caches.size() != tokens.size()) throw EngineError("step_batch needs one token per cache");
    check_token_ids(tokens, hp.speech_vocab, "speech");
    std::set<const T3Cache*> distinct;
    for (const T3Cache* c : caches) {
        if (!c) throw EngineError("step_batch: a null cache");
        if (!distinct.insert(c).second) throw EngineError("step_batch: a cache appears twice in one batch");
        if (c->n_past == 0) throw EngineError("T3 step() before prompt()");
        if (c->n_past + 1 > c->size())
            throw EngineError("T3 context is full (" + std::to_string(c->size()) + " positions)");
    }
}

ggml_tensor* causal_mask(ggml_context* ctx, GraphInputs& in, int n_kv, int n_new) {
    std::vector<ggml_fp16_t> m(static_cast<size_t>(n_kv) * n_new);
    const int past = n_kv - n_new;
    for (int i = 0; i < n_new; ++i)
        for (int j = 0; j < n_kv; ++j)
            m[static_cast<size_t>(i) * n_kv + j] = ggml_fp32_to_fp16(j <= past + i ? 0.0f : -INFINITY);
    return in.f16_mask(ctx, std::move(m), n_kv, n_new);
}

}  // namespace cbs
