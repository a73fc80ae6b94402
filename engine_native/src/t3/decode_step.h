// A GPT-2 decoding step's products on the CPU with what surrounds them folded in.
//
// A step is bound by streaming the weights, yet ggml runs it as ~23 graph nodes per layer
// (norm, mul, add, product, bias add, copies, residual add, ...), each followed by a barrier
// of the threads: most of them cost more to synchronise than to compute. Here each packed
// Q4_0 product (cpu/q4_matmul.h) of one column takes its layer norm before it (every thread
// normalises and quantises the column itself: a few thousand values) and its bias and
// residual after it (on the thread's own rows), so a layer is a handful of nodes. The
// arithmetic is the separate operations', in the same order, except the layer norm's sums.
// CBS_T3_FUSED=0 keeps the separate ggml operations (read when a graph is built).
#pragma once

#include "ggml.h"

namespace cbs {

// CBS_T3_FUSED is not 0 (also folds the cache writes into t3/decode_attention).
bool step_fusion_enabled();

// Whether a step's product through w fuses: w packed (cpu/q4_matmul.h), x one column.
bool step_fuses(const ggml_tensor* w, const ggml_tensor* x);

// LayerNorm(x; ln_w, ln_b, *eps) through the PyTorch-layout Linear w, b: x [K, 1] -> [N, 1].
// `eps` must outlive the graph (the model's hparams). Otherwise layer_norm and linear.
ggml_tensor* step_norm_linear(ggml_context* ctx, ggml_tensor* x, ggml_tensor* ln_w, ggml_tensor* ln_b, const float* eps,
                              ggml_tensor* w, ggml_tensor* b);

// res + linear(x; w, b) (the residual added last, as ggml_add(res, linear(...))).
ggml_tensor* step_linear_residual(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, ggml_tensor* res);

}  // namespace cbs
