// S3Gen's token encoder (UpsampleConformerEncoder + encoder_proj): speech tokens
// (voice prompt tokens first) -> mu, the 80-channel condition the CFM starts from,
// at two mel frames per token. Relative-position (ESPnet) self-attention, full context.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/graph_runner.h"
#include "cpu/products.h"
#include "core/model_file.h"

namespace cbs {

class S3GenEncoder {
public:
    S3GenEncoder(const ModelFile& mf, ggml_backend_t backend);

    // tokens: prompt + speech tokens, each in [0, speech_vocab). Returns mu as
    // row-major [n_mels][2 * tokens.size()].
    std::vector<float> encode(const std::vector<int32_t>& tokens);
    // Readies an input of `n_tokens` (prompt + speech) ahead of use: the position table
    // and, on a device, the compute buffers (GraphRunner::reserve; a shorter input then
    // allocates nothing). Returns the device buffer's bytes (0 on the CPU).
    size_t reserve(int n_tokens);
    int n_mels() const { return n_mels_; }

    // A stream's cached prefix, the voice prompt (as the CFM's, s3gen/cfm_prefix.h): the prompt's
    // keys and values at every block (each [A, P'] at the block's rate), the two causal
    // convolutions' left context (time fastest, [k-1, C]) and the prompt's mu.
    struct Prefix {
        int tokens = 0, n_mels = 0;
        std::vector<float> mu;                         // row-major [n_mels][up_stride x tokens]
        std::vector<std::vector<float>> keys, values;  // blocks_ then up_blocks_
        std::vector<float> lookahead_tail, up_tail;
    };
    // The prompt's tokens encoded alone (their lookahead meets the end of the input, their
    // attention only the prompt), what later tokens need of them kept.
    std::shared_ptr<Prefix> make_prefix(const std::vector<int32_t>& prompt);
    // mu [n_mels][2 T] for tokens (at least one) after the prefix: they attend to the prompt's
    // cached keys and values at their positions after it.
    std::vector<float> encode_after_prefix(const Prefix& prefix, const std::vector<int32_t>& tokens);

private:
    struct Block {
        ggml_tensor *norm_mha_w, *norm_mha_b, *q_w, *q_b, *k_w, *k_b, *v_w, *v_b, *out_w, *out_b, *pos_w;
        ggml_tensor *pos_bias_u, *pos_bias_v, *norm_ff_w, *norm_ff_b, *ff1_w, *ff1_b, *ff2_w, *ff2_b;
    };
    struct Embed {
        ggml_tensor *w, *b, *ln_w, *ln_b;
    };

    Block load_block(const ModelFile& mf, const std::string& prefix, int64_t& ff_width) const;
    ggml_tensor* embed(ggml_context* ctx, ggml_tensor* x, const Embed& e) const;
    // What build() does with a prefix: nothing, record the prompt's (its tensors appended,
    // graph outputs after mu), or use a cached one.
    struct PrefixUse {
        const Prefix* cached;  // use: this one; record: nullptr
        std::vector<ggml_tensor*> recorded;  // record: every block's keys, values in turn
        ggml_tensor *lookahead_tail = nullptr, *up_tail = nullptr;  // record: the convolutions'
        size_t block = 0;  // use: the next block's cached keys and values
    };
    // x [C, T]: the block's queries; its keys and values are x's, after the prefix's cached
    // ones when `prefix` uses them (pos then spans all keys: rel_positions(keys, T)).
    ggml_tensor* block(ggml_context* ctx, GraphInputs& in, ggml_tensor* x, ggml_tensor* pos, ggml_tensor* mask,
                       const Block& b, PrefixUse* prefix) const;
    // [d_model, n_keys + n_queries - 1]: relative positions n_keys-1 .. -(n_queries-1), the
    // offsets from queries after the keys' first n_keys - n_queries (rows of table_, grown
    // when needed). n_queries < 0: n_keys (all of them).
    std::vector<float> rel_positions(int n_keys, int n_queries = -1);
    // The graph of encode() for `tokens` (checked by the caller), mu as its output.
    ggml_tensor* build(ggml_context* ctx, GraphInputs& in, const std::vector<int32_t>& tokens,
                       PrefixUse* prefix = nullptr);
    // A causal convolution's input x [T, C] (time fastest) after its left context: the
    // prefix's `cached` frames where given, else zero padding (x's last k frames into
    // *record where given).
    ggml_tensor* left_context(ggml_context* ctx, GraphInputs& in, ggml_tensor* x, int k,
                              const std::vector<float>& cached, ggml_tensor** record) const;
    void check_tokens(const std::vector<int32_t>& tokens) const;

    int d_model_, n_head_, vocab_, n_mels_, lookahead_, up_stride_;
    float layer_eps_, embed_eps_, after_eps_, lookahead_slope_;
    ggml_tensor *tok_emb_, *la_conv1_w_, *la_conv1_b_, *la_conv2_w_, *la_conv2_b_, *up_w_, *up_b_;
    ggml_tensor *after_w_, *after_b_, *proj_w_, *proj_b_;
    Embed embed_, up_embed_;
    std::vector<Block> blocks_, up_blocks_;
    // The positions n_table_-1 .. -(n_table_-1): the table of a shorter input is its middle
    // rows, the same values; computing them (~1.5 M sin/cos for 500 tokens) for every encode
    // would be most of the encoder's time on a GPU.
    std::vector<float> table_;
    int n_table_ = 0;
    GraphRunner runner_;
    bool on_cpu_;  // keys padded for the CPU's sgemm (core/graph_helpers.h key_pad_mask)
    CpuProducts products_ = false;  // exact for an f32 model, fast (AMX) for a quantised one
};

}  // namespace cbs
