// Small ggml graph building blocks shared by every model component, written once: layer norm,
// Linear and Conv1d through the engine's matrix products, attention as two products.
#pragma once

#include <vector>

#include <cstdint>

#include "core/graph_runner.h"
#include "cpu/products.h"
#include "ggml.h"

namespace cbs {

// Layer norm over ne0 (channels when a tensor is [C, T]) with affine w, b.
ggml_tensor* layer_norm(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, float eps);
// The same as one node on the CPU (on_cpu: cpu/layer_norm.h, the same bits), `eps` read
// when the graph runs (it must outlive the graph).
ggml_tensor* layer_norm(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, const float* eps, bool on_cpu);

// x [in, n] -> [out, n] through a PyTorch-layout Linear weight (ne [in, out]); b may be null.
ggml_tensor* linear(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, CpuProducts blas = false);

// 1-D convolution in full f32 (ggml_conv_1d rounds through an f16 im2col):
// x [L, C_in] (time fastest), w ne [K, C_in, C_out] -> [L_out, C_out]; b [C_out] may be null.
ggml_tensor* conv1d(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, int stride = 1, int pad = 0,
                    int dilation = 1, CpuProducts blas = false);

// Attention written as two matrix products around ggml_soft_max_ext (the S3Gen encoder's
// relative-position attention). Without OpenBLAS the products take ggml's tinyBLAS, which
// accepts a contraction length that is a multiple of 16 only (else ggml's much slower
// dot-product loop), so for probabilities x values the keys are padded with zeros to one
// and this mask [padded n_kv, n_q] gives the padded keys -inf (exactly zero weight).
// nullptr when no padding is needed, !on_cpu, or OpenBLAS (matmul) takes any length.
ggml_tensor* key_pad_mask(ggml_context* ctx, GraphInputs& in, int64_t n_kv, int64_t n_q, bool on_cpu);

// softmax(scale * scores + mask) x v. scores [n_kv', T_q, H, B] contiguous, n_kv' the
// mask's width (n_kv without a mask); v [D, n_kv, H, B] (a view is fine) -> [D, H, T_q, B].
ggml_tensor* attend(ggml_context* ctx, ggml_tensor* scores, ggml_tensor* v, ggml_tensor* mask, float scale,
                    CpuProducts blas);

// parts [C, n_i] joined along the columns (ne1), a balanced tree of concats: each column is
// copied log2(parts) times, not once per part. parts must not be empty.
ggml_tensor* concat_columns(ggml_context* ctx, std::vector<ggml_tensor*> parts);

}  // namespace cbs
