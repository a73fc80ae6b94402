// T3 for Turbo and Nano: a GPT-2 decoder over [speaker, prompt speech, text, speech]
// embeddings with a persistent KV cache. Every dimension comes from the GGUF.
#pragma once

#include <cstdint>
#include <vector>

#include "ggml-backend.h"
#include "core/ggml_ops.h"
#include "core/model_file.h"

namespace cbs {

struct T3Hparams {
    int n_layer = 0, n_embd = 0, n_head = 0, n_ff = 0, n_ctx = 0;
    int text_vocab = 0, speech_vocab = 0, speaker_embed_size = 0;
    int start_speech_token = 0, stop_speech_token = 0;
    float ln_eps = 1e-5f;
    static T3Hparams from(const ModelFile& mf);
};

// What T3 is conditioned on: the voice's speaker embedding and prompt speech tokens.
struct T3Conditioning {
    std::vector<float> speaker_emb;
    std::vector<int32_t> prompt_tokens;
};

class T3Gpt2 {
public:
    T3Gpt2(const ModelFile& mf, ggml_backend_t backend);
    ~T3Gpt2();
    T3Gpt2(const T3Gpt2&) = delete;
    T3Gpt2& operator=(const T3Gpt2&) = delete;

    const T3Hparams& hp() const { return hp_; }

    // Runs [cond, text, speech] and returns the speech-head logits of the last `n_out`
    // positions, row-major [n_out][speech_vocab]. The cache then holds the whole
    // sequence, ready for step(). The conditioning prefix does not depend on the text,
    // and attention is causal, so its keys and values are computed once per voice and
    // kept: a later prompt with the same conditioning only runs [text, speech].
    std::vector<float> prompt(const T3Conditioning& cond, const std::vector<int32_t>& text,
                              const std::vector<int32_t>& speech, int n_out, int reserve_tokens);
    // Appends one speech token and returns its logits [speech_vocab].
    std::vector<float> step(int32_t speech_token);
    int n_past() const { return n_past_; }

private:
    struct Layer {
        ggml_tensor *ln1_w, *ln1_b, *attn_w, *attn_b, *proj_w, *proj_b;
        ggml_tensor *ln2_w, *ln2_b, *fc_w, *fc_b, *fc_proj_w, *fc_proj_b;
    };
    void reserve_cache(int n_tokens);
    void run_prefix(const T3Conditioning& cond);
    ggml_tensor* transformer(ggml_context* ctx, ggml_cgraph* gf, ggml_tensor* x, int n_new, ggml_tensor* mask);

    T3Hparams hp_;
    ggml_backend_t backend_;
    ggml_tensor *text_emb_, *speech_emb_, *wpe_, *ln_f_w_, *ln_f_b_, *spkr_w_, *spkr_b_, *head_w_, *head_b_;
    std::vector<Layer> layers_;

    // KV cache: per layer K and V as [head_dim, n_cache, n_head], the layout
    // ggml_flash_attn_ext reads directly (a view of the first n_kv positions).
    ggml_type cache_type_ = GGML_TYPE_F32;
    ggml_context* cache_ctx_ = nullptr;
    ggml_backend_buffer_t cache_buf_ = nullptr;
    std::vector<ggml_tensor*> k_cache_, v_cache_;
    int n_cache_ = 0;
    int n_past_ = 0;
    // The conditioning whose keys/values occupy cache positions [0, n_prefix_).
    T3Conditioning prefix_cond_;
    int n_prefix_ = 0;
    GraphRunner runner_;
};

}  // namespace cbs

#include "t3/sampler.h"

namespace cbs {

// T3.inference_turbo as a resumable loop: the constructor prompts with [cond, text,
// start-of-speech]; next(n) samples up to n more tokens, so a caller can hand tokens
// on (streaming) and stop between calls (cancellation). It ends at the stop token
// (kept in the output), a fully filtered distribution, or `max_tokens`.
class SpeechTokenStream {
public:
    SpeechTokenStream(T3Gpt2& t3, const T3Conditioning& cond, const std::vector<int32_t>& text,
                      const SamplingParams& params, int max_tokens, uint64_t seed);
    std::vector<int32_t> next(int n);
    bool done() const { return done_; }
    const std::vector<int32_t>& tokens() const { return tokens_; }

private:
    T3Gpt2& t3_;
    SamplingParams params_;
    int max_tokens_;
    Sampler sampler_;
    std::vector<float> logits_;  // for the next draw, already processed
    std::vector<int32_t> tokens_;
    bool done_ = false;
};

// The whole loop at once.
std::vector<int32_t> generate_speech_tokens(T3Gpt2& t3, const T3Conditioning& cond, const std::vector<int32_t>& text,
                                            const SamplingParams& params, int max_tokens, uint64_t seed);

}  // namespace cbs
