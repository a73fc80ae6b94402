// The interface every T3 implementation offers, chosen by the GGUF key
// chatterbox.t3.arch ("gpt2": Turbo and Nano; "llama": Multilingual). The model holds
// weights only; the KV cache is the caller's (a generation session's), passed to each call.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/graph_runner.h"
#include "ggml-backend.h"
#include "t3/alignment.h"
#include "t3/kv_cache.h"
#include "t3/t3_hparams.h"

namespace cbs {

class T3Model {
public:
    virtual ~T3Model() = default;
    virtual const T3Hparams& hp() const = 0;

    // An empty cache of the type this model's attention reads.
    virtual std::unique_ptr<T3Cache> new_cache() const = 0;

    // Runs [cond, text, speech] into `cache` and returns the speech-head logits of the
    // last `n_out` positions, row-major [rows][n_out][speech_vocab]; rows is 1, or 2 when
    // cond.guidance runs the unconditional row (llama; cache.n_rows says which). The cache
    // is then ready for step() with room for `reserve_tokens` more. The conditioning
    // prefix does not depend on the text and attention is causal, so a cache that
    // already holds this conditioning's prefix only runs [text, speech].
    virtual std::vector<float> prompt(T3Cache& cache, const T3Conditioning& cond, const std::vector<int32_t>& text,
                                      const std::vector<int32_t>& speech, int n_out, int reserve_tokens) = 0;
    // Appends one speech token to `cache` (to each of its rows) and returns its logits
    // [rows][speech_vocab].
    virtual std::vector<float> step(T3Cache& cache, int32_t speech_token) = 0;
    // Appends tokens[i] to caches[i] for every i (distinct caches, each ready for step())
    // and returns each one's logits as step() would, in order. The default steps them one
    // after another; the gpt2 and llama T3s compute them in one graph, its products over
    // every session's column at once, so several generations cost about one weight read.
    virtual std::vector<std::vector<float>> step_batch(const std::vector<T3Cache*>& caches,
                                                       const std::vector<int32_t>& tokens);

    // Non-null when this T3 decodes as `T3.inference` (Multilingual: guidance, the
    // alignment analyzer with these thresholds, the MTL processors); nullptr for the
    // loop of `T3.inference_turbo`.
    virtual const AlignmentParams* alignment() const { return nullptr; }
};

// The implementation named by the file's chatterbox.t3.arch; ModelError naming an
// unknown one.
std::unique_ptr<T3Model> make_t3(const ModelFile& mf, ggml_backend_t backend);

// Helpers of the implementations.
// EngineError naming `what` for an id outside [0, vocab).
void check_token_ids(const std::vector<int32_t>& ids, int vocab, const char* what);
// EngineError unless caches and tokens pair up, every cache appears once and is ready for
// one more step (a batched step's inputs), every token a speech id.
void check_batch(const std::vector<T3Cache*>& caches, const std::vector<int32_t>& tokens, const T3Hparams& hp);
// The f16 causal mask [n_kv, n_new] of n_new positions appended after n_kv - n_new cached ones.
ggml_tensor* causal_mask(ggml_context* ctx, GraphInputs& in, int n_kv, int n_new);

}  // namespace cbs
