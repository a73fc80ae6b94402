// T3 for Turbo and Nano (chatterbox.t3.arch = "gpt2"): a GPT-2 decoder over
// [speaker, prompt speech, text, speech] embeddings. Every dimension comes from the GGUF.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "core/graph_runner.h"
#include "t3/t3_model.h"

namespace cbs {

class T3Gpt2 final : public T3Model {
public:
    T3Gpt2(const ModelFile& mf, ggml_backend_t backend);

    const T3Hparams& hp() const override { return hp_; }
    std::unique_ptr<T3Cache> new_cache() const override;
    std::vector<float> prompt(T3Cache& cache, const T3Conditioning& cond, const std::vector<int32_t>& text,
                              const std::vector<int32_t>& speech, int n_out, int reserve_tokens) override;
    std::vector<float> step(T3Cache& cache, int32_t speech_token) override;
    // Several sessions' steps in one graph (t3_gpt2_batch.cpp): the products over B columns,
    // each session's attention over its own cache.
    std::vector<std::vector<float>> step_batch(const std::vector<T3Cache*>& caches,
                                               const std::vector<int32_t>& tokens) override;

private:
    struct Layer {
        ggml_tensor *ln1_w, *ln1_b, *attn_w, *attn_b, *proj_w, *proj_b;
        ggml_tensor *ln2_w, *ln2_b, *fc_w, *fc_b, *fc_proj_w, *fc_proj_b;
    };
    void run_prefix(T3Cache& cache, const T3Conditioning& cond);
    ggml_tensor* transformer(ggml_context* ctx, ggml_cgraph* gf, T3Cache& cache, ggml_tensor* x, int n_new, int n_kv,
                             ggml_tensor* mask, ggml_tensor* kv_rows);
    // One layer's attention of the n_new positions in qkv [3E, n_new] over `cache`: their keys
    // and values written at rows kv_rows, then attending to the first n_kv positions -> [E, n_new].
    ggml_tensor* attention(ggml_context* ctx, ggml_cgraph* gf, T3Cache& cache, int il, ggml_tensor* qkv, int n_new,
                           int n_kv, ggml_tensor* mask, ggml_tensor* kv_rows);
    // The rest of a layer after its attention, and the layer norm + speech head.
    ggml_tensor* layer_tail(ggml_context* ctx, const Layer& L, ggml_tensor* att, ggml_tensor* x);
    // A step's attention reads a multiple of this many cache positions (the rest masked).
    static constexpr int kStepKvPad = 256;

    T3Hparams hp_;
    ggml_backend_t backend_;
    bool on_cpu_;
    ggml_tensor *text_emb_, *speech_emb_, *wpe_, *ln_f_w_, *ln_f_b_, *spkr_w_, *spkr_b_, *head_w_, *head_b_;
    std::vector<Layer> layers_;
    // F32 weights keep an F32 cache (exact parity); reduced-precision models use F16.
    ggml_type cache_type_ = GGML_TYPE_F32;
    GraphRunner runner_;
    // The last step's graph, replayed while it fits (same cache buffer, same padded
    // n_kv, nothing else built on runner_ since): only its three inputs change.
    struct StepGraph {
        uint64_t generation = 0, cache_serial = 0;
        int n_kv = 0;
        ggml_tensor *token = nullptr, *pos = nullptr, *mask = nullptr, *logits = nullptr;
    } step_;
    // The batched step's graph (its own runner, so a solo step's replay survives it), replayed
    // while the same caches step together: each session attends to its whole cache (masked
    // past n_past), so the graph stays the same for the life of the batch.
    std::unique_ptr<GraphRunner> batch_runner_;
    size_t batch_nodes_ = 0;  // the nodes batch_runner_'s graphs may hold (grows with B)
    struct BatchGraph {
        uint64_t generation = 0;
        std::vector<uint64_t> cache_serials;
        ggml_tensor *tokens = nullptr, *pos = nullptr, *mask = nullptr, *logits = nullptr;
    } batch_;
    std::mutex mutex_;  // one graph at a time through runner_ and batch_runner_ (callers may be on several threads)
};

}  // namespace cbs
