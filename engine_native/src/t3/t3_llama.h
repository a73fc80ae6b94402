// T3 for Multilingual (chatterbox.t3.arch = "llama"): the Llama-520M decoder (RMSNorm,
// RoPE with llama3 frequency scaling, SwiGLU, no biases) over
//   [speaker, perceiver(prompt speech), emotion] [text] [speech]
// with learned text and speech position tables, run as `T3.inference` runs it:
// - the prompt's speech starts with the start-of-speech token twice, both at learned
//   speech position 0 (prepare_input_embeds' token, then inference's bos_embed); a later
//   speech token j (prompt or step) is at learned position j, while RoPE positions are
//   the KV positions;
// - with guidance (T3Conditioning::guidance) every call runs two rows in one batch:
//   row 0 conditional, row 1 with the text's token embeddings zeroed (position
//   embeddings only), each over its own half of a two-row cache. The conditioning
//   prefix is the same in both rows and runs once. Row 1's text after it depends on its
//   length alone, so a later guided prompt on the same cache (a quantised model on the CPU)
//   reuses it and computes only row 1's rest, with the kernels the whole prompt would take:
//   the same logits, bit for bit (T3Cache::uncond_text).
// - the alignment heads (chatterbox.t3.align.heads, (layer, head) pairs) of row 0 leave
//   their post-softmax attention over the text in the cache for the alignment analyzer.
// Every dimension comes from the GGUF (MULTILINGUAL.md sections 2-5).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "core/graph_runner.h"
#include "t3/t3_model.h"

namespace cbs {

class T3Llama final : public T3Model {
public:
    T3Llama(const ModelFile& mf, ggml_backend_t backend);

    const T3Hparams& hp() const override { return hp_; }
    std::unique_ptr<T3Cache> new_cache() const override;  // two rows (guidance)
    std::vector<float> prompt(T3Cache& cache, const T3Conditioning& cond, const std::vector<int32_t>& text,
                              const std::vector<int32_t>& speech, int n_out, int reserve_tokens) override;
    std::vector<float> step(T3Cache& cache, int32_t speech_token) override;
    // Several sessions' steps (each one or two rows) in one graph (t3_llama_batch.cpp).
    std::vector<std::vector<float>> step_batch(const std::vector<T3Cache*>& caches,
                                               const std::vector<int32_t>& tokens) override;
    const AlignmentParams* alignment() const override { return &align_params_; }

    // Parity seams. The conditioning embeddings [cond_len][n_embd] (prepare_conditioning),
    // and the input embeddings of a prompt [rows][cond_len + text + 1 + speech][n_embd].
    std::vector<float> conditioning(const T3Conditioning& cond);
    std::vector<float> input_embeddings(const T3Conditioning& cond, const std::vector<int32_t>& text,
                                        const std::vector<int32_t>& speech);
    int cond_len(const T3Conditioning& cond) const;
    int n_align_heads() const { return static_cast<int>(align_.size()); }
    // RoPE frequencies after the llama3 scaling [head_dim / 2] (HF's rotary inv_freq).
    const std::vector<float>& inv_freq() const { return inv_freq_; }

private:
    struct Layer {
        ggml_tensor *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *gate, *up, *down;
        // q, k, v and gate, up as one weight each where the model's buffer holds them so
        // (ModelFile::joined; nullptr where not): fewer launches a step on a GPU.
        ggml_tensor *wqkv = nullptr, *gate_up = nullptr;
    };
    struct AlignHead {
        int layer, head;
    };
    // The alignment taps one graph computes: rows [row0, row0 + n_rows) of its new
    // positions, text columns [col0, col0 + n_cols).
    struct TapSpec {
        int row0 = 0, n_rows = 0, col0 = 0, n_cols = 0;
        std::vector<ggml_tensor*> out;  // one [n_cols, n_rows] per alignment head
    };
    // A step's inputs that change from token to token (step()): the cache row its keys and
    // values go to, RoPE's cos / sin [D] at its position, and the padded length its
    // attention reads (masked past the token).
    struct StepInputs {
        ggml_tensor *kv_row, *cos, *sin;
        int n_kv;
    };
    // A guided prompt whose unconditional row has its first positions cached (T3Cache::uncond_text):
    // x holds row 0's n_new columns, then row 1's last n of them (mask: theirs). Products and
    // attention run as the two-row prompt's would (its columns, its attention kernel), so
    // row 1's values equal that prompt's.
    struct RowTail {
        int n;
        ggml_tensor* mask;
    };

    void validate(const T3Conditioning& cond, const std::vector<int32_t>& text,
                  const std::vector<int32_t>& speech) const;
    ggml_tensor* build_cond(ggml_context* ctx, GraphInputs& in, const T3Conditioning& cond);
    ggml_tensor* perceiver_block(ggml_context* ctx, ggml_tensor* x1, ggml_tensor* x2);
    ggml_tensor* build_inputs(ggml_context* ctx, GraphInputs& in, const std::vector<int32_t>& text,
                              const std::vector<int32_t>& speech, int first_speech_pos, int rows);
    // The speech part of a prompt's inputs [E, n]: the start token twice at learned position
    // 0 when first_speech_pos is 0, then each token at its position.
    ggml_tensor* speech_inputs(ggml_context* ctx, GraphInputs& in, const std::vector<int32_t>& speech,
                               int first_speech_pos);
    ggml_tensor* rope(ggml_context* ctx, ggml_tensor* x, ggml_tensor* cos, ggml_tensor* sin);
    // A layer's products of h [E, n * rows] through `product` (mul_mat_weight, or the batched
    // step's grouped form): q and k with RoPE and v, each [D, H, n, rows]; the FFN's
    // silu(gate) x up. `join`: one product where the layer's weights are joined (Layer::wqkv,
    // gate_up). Steps join (a few columns: each row's sum on its own, whatever the weight's
    // rows); a prompt on a GPU does not (a GEMM over many columns, whose sums the GPU library
    // may order by the weight's shape: the prompt's values stay those of the separate weights).
    using Product = std::function<ggml_tensor*(ggml_tensor* w, ggml_tensor* x)>;
    void attention_inputs(ggml_context* ctx, const Layer& L, ggml_tensor* h, int n, int rows, ggml_tensor* cos,
                          ggml_tensor* sin, const Product& product, bool join, ggml_tensor** q, ggml_tensor** k,
                          ggml_tensor** v);
    ggml_tensor* ffn_hidden(ggml_context* ctx, const Layer& L, ggml_tensor* h, const Product& product, bool join);
    ggml_tensor* transformer(ggml_context* ctx, ggml_cgraph* gf, GraphInputs& in, T3Cache& cache, ggml_tensor* x,
                             int n_new, int rows, bool all_seqs, ggml_tensor* mask, TapSpec* taps,
                             const StepInputs* step = nullptr, const RowTail* tail = nullptr);
    // Which kernel a guided prompt's products of n_new positions a row take on this host (-1: no
    // cached unconditional keys and values serve it): those of a prompt of the same class serve it.
    int guided_prompt_class(const T3Cache& cache, int n_new) const;
    // A step's attention for this token's q, k, v [D, H, 1, rows]: k and v written at the
    // cache row kv_row (I32 [1]), the first n_kv positions read; -> [D, H, 1, rows]. On the
    // CPU over an f16 cache (a quantised model's), the engine's own (t3/decode_attention.h),
    // the cache writes folded in; else ggml's set_rows and flash attention.
    ggml_tensor* step_attention(ggml_context* ctx, ggml_cgraph* gf, T3Cache& cache, int il, ggml_tensor* q,
                                ggml_tensor* k, ggml_tensor* v, ggml_tensor* kv_row, int n_kv, int rows,
                                ggml_tensor* mask);
    // cos / sin of float32(inv_freq * position) [D each] for positions first .. first + n - 1.
    void rope_tables(int first, int n, std::vector<float>& cos, std::vector<float>& sin) const;
    ggml_tensor* head(ggml_context* ctx, ggml_tensor* x, int n_new, int rows, int n_out);
    void run_prefix(T3Cache& cache, const T3Conditioning& cond);
    std::vector<float> finish(T3Cache& cache, ggml_tensor* logits, TapSpec& taps, const GraphInputs& in);
    // The alignment taps' rows of the last computation (outs after the logits) into the cache.
    static void keep_taps(T3Cache& cache, std::vector<std::vector<float>>& outs, int n_rows);
    // A step's attention reads a multiple of this many cache positions (the rest masked), so
    // its graph is the same for that many tokens (t3_gpt2.h).
    static constexpr int kStepKvPad = 256;

    T3Hparams hp_;
    ggml_backend_t backend_;
    int n_query_ = 0, perceiver_heads_ = 0, text_pos_len_ = 0, speech_pos_len_ = 0;
    float perceiver_eps_ = 1e-5f;
    std::vector<float> inv_freq_;  // RoPE frequencies after llama3 scaling, [head_dim / 2]
    std::vector<AlignHead> align_;
    AlignmentParams align_params_;
    ggml_tensor *text_emb_, *speech_emb_, *text_pos_, *speech_pos_, *norm_, *head_w_;
    ggml_tensor *spkr_w_, *spkr_b_, *emotion_w_ = nullptr;
    ggml_tensor *pq_, *p_norm_w_, *p_norm_b_, *p_q_w_, *p_q_b_, *p_k_w_, *p_k_b_, *p_v_w_, *p_v_b_, *p_o_w_, *p_o_b_;
    std::vector<Layer> layers_;
    ggml_type cache_type_ = GGML_TYPE_F32;  // F32 weights: F32 cache (parity); else F16
    GraphRunner runner_;
    // The last step's graph, replayed while it fits (same cache buffer and rows, same padded
    // n_kv and text columns, nothing else built on runner_ since): only its inputs change.
    // Building a graph per token costs a GPU step more host time than its kernels take.
    struct StepGraph {
        uint64_t generation = 0, cache_serial = 0;
        int n_kv = 0, rows = 0, align_col0 = 0, align_cols = 0;
        ggml_tensor *token = nullptr, *speech_pos = nullptr, *kv_row = nullptr, *cos = nullptr, *sin = nullptr,
                    *mask = nullptr;
        std::vector<ggml_tensor*> outs;  // the logits, then the alignment taps
    } step_;
    // The batched step's runner, its node room grown with the batch (a graph per step, as step()'s).
    std::unique_ptr<GraphRunner> batch_runner_;
    size_t batch_nodes_ = 0;
    std::mutex mutex_;  // one graph at a time through runner_ and batch_runner_
};

}  // namespace cbs
