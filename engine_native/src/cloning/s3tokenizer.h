// S3TokenizerV2: 16 kHz speech -> 25 Hz speech tokens, as chatterbox's
// `S3Tokenizer.forward([wav], max_len)` computes them for one recording:
// 128-bin log-mel -> two stride-2 convs with GELU -> FSMN-attention transformer blocks
// (RoPE, depth-wise conv memory over v) -> FSQ (project to n digits, tanh, round to
// {-1, 0, 1}, base-3 number). Recordings over 30 s go through the reference's 30 s
// windows with 4 s overlap, merged by dropping half of each overlap.
#pragma once

#include <cstdint>
#include <vector>

#include "cloning/audio_features.h"
#include "core/graph_runner.h"
#include "core/model_file.h"
#include "cpu/products.h"

namespace cbs {

class S3TokenizerV2 {
public:
    S3TokenizerV2(const ModelFile& mf, ggml_backend_t backend);

    // wav at 16 kHz -> tokens in [0, codebook_size). max_len > 0 keeps the first
    // 4 x max_len mel frames (the reference's `max_len`); max_len < 0: no limit.
    std::vector<int32_t> tokens(const std::vector<float>& wav16k, int max_len = -1);
    // The FSQ input (project_down output, before tanh), row-major [n_tokens][n_digits]:
    // for diagnosing token flips near rounding boundaries.
    std::vector<float> projection(const std::vector<float>& wav16k, int max_len = -1);
    int n_digits() const { return n_digits_; }

private:
    struct Block {
        ggml_tensor *attn_ln_w, *attn_ln_b, *q_w, *q_b, *k_w, *v_w, *v_b, *out_w, *out_b, *fsmn_w;
        ggml_tensor *mlp_ln_w, *mlp_ln_b, *fc1_w, *fc1_b, *fc2_w, *fc2_b;
    };

    // log-mel [n_mels][n_frames] of segment [start, start + len) -> projection [T'][n_digits].
    std::vector<float> encode(const std::vector<float>& mel, int64_t n_frames, int64_t start, int64_t len);
    ggml_tensor* block(ggml_context* ctx, ggml_tensor* x, ggml_tensor* cos, ggml_tensor* sin, const Block& b) const;
    ggml_tensor* rope(ggml_context* ctx, ggml_tensor* x, ggml_tensor* cos, ggml_tensor* sin) const;

    S3TokLogMel logmel_;
    int n_mels_, n_state_, n_head_, head_dim_, fsmn_kernel_, n_digits_, level_, codebook_size_;
    int window_frames_, stride_frames_, overlap_tokens_;
    ggml_tensor *conv1_w_, *conv1_b_, *conv2_w_, *conv2_b_, *proj_w_, *proj_b_;
    std::vector<Block> blocks_;
    GraphRunner runner_;
    bool on_cpu_;  // the vectorised GELU (cpu/activations.h)
    // The weights' products: exact f32 (OpenBLAS) where the model's S3Gen is f32, the CPU's
    // fast products where it is quantised (its weights here are f32 in every model).
    CpuProducts products_;
};

}  // namespace cbs
