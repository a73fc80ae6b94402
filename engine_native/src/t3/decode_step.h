// A decoding step's products on the CPU with what surrounds them folded in.
//
// A step is bound by streaming the weights, yet ggml runs it as ~14-23 graph nodes per layer
// (norm, mul, add, product, bias add, copies, residual add, ...), each followed by a barrier
// of the threads: most of them cost more to synchronise than to compute. Here each packed
// Q4_0 product (cpu/q4_matmul.h) of a step's column (or a guided step's two) takes its norm
// before it (GPT-2's LayerNorm, the Llama's RMSNorm; every thread normalises and quantises
// the columns itself: a few thousand values) and its bias and residual after it (on the
// thread's own rows), so a layer is a handful of nodes. The arithmetic is the separate
// operations', in the same order, except the layer norm's sums.
// CBS_T3_FUSED=0 keeps the separate ggml operations (read when a graph is built).
#pragma once

#include "ggml.h"

namespace cbs {

// CBS_T3_FUSED is not 0 (also folds the cache writes into t3/decode_attention).
bool step_fusion_enabled();

// The most columns a fused product takes (each thread quantises them all itself).
constexpr int64_t kStepFusedColumns = 2;

// Whether a step's product through w fuses: w packed (cpu/q4_matmul.h), x [K, <= kStepFusedColumns].
bool step_fuses(const ggml_tensor* w, const ggml_tensor* x);

// LayerNorm(x; ln_w, ln_b, *eps) through the PyTorch-layout Linear w, b: x [K, M] -> [N, M].
// `eps` must outlive the graph (the model's hparams). Otherwise layer_norm and linear.
ggml_tensor* step_norm_linear(ggml_context* ctx, ggml_tensor* x, ggml_tensor* ln_w, ggml_tensor* ln_b, const float* eps,
                              ggml_tensor* w, ggml_tensor* b);

// res + linear(x; w, b) (the residual added last, as ggml_add(res, linear(...))); b may be null.
ggml_tensor* step_linear_residual(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, ggml_tensor* res);

// RMSNorm(x; *eps) * norm_w through the weight w (no bias): x [K, M] -> [N, M]; otherwise
// ggml's rms_norm, mul and mul_mat_weight.
ggml_tensor* step_rms_norm_product(ggml_context* ctx, ggml_tensor* x, ggml_tensor* norm_w, const float* eps,
                                   ggml_tensor* w);

// The Llama's RoPE of a step's heads x [D, heads, 1, rows] (rows of D contiguous) at one
// position (cos, sin [D], sin's first half negated: T3Llama::rope_tables) as one node, not
// ggml's four (mul, concat, mul, add), with their roundings -> [D, heads, 1, rows] contiguous.
// step_rope_fuses: on a CPU backend only (the caller's to know), CBS_T3_FUSED not 0.
bool step_rope_fuses(const ggml_tensor* x, const ggml_tensor* cos, const ggml_tensor* sin);
ggml_tensor* step_rope(ggml_context* ctx, ggml_tensor* x, ggml_tensor* cos, ggml_tensor* sin);

}  // namespace cbs
