// LayerNorm over rows on the CPU in one pass, bit for bit what ggml's CPU module computes for
// ggml_norm, then ggml_mul by w and ggml_add of b: three passes over the activations (and
// two graph nodes, each with its thread barrier) become one.
#pragma once

#include <cstdint>

#include "ggml.h"

namespace cbs {

// Whether layer_norm_row reproduces the layer norm of the ggml CPU module this process loaded
// (x86-64 with that module's AVX-512 or AVX2 form of ggml_vec_cvar_f32).
bool layer_norm_row_available();

// y[i] = (x[i] - mean) / sqrt(var + eps) * w[i] + b[i] over K values, each step rounded as
// ggml's three operations round it (layer_norm_row_available() must be true).
void layer_norm_row(const float* x, const float* w, const float* b, float eps, int64_t K, float* y);

// ggml_add(ggml_mul(ggml_norm(x, *eps), w), b) for x [K, ...] (f32, contiguous), w and b [K]:
// one node on the CPU where layer_norm_row is available, else the three. `eps` must outlive
// the graph (the node keeps the pointer).
ggml_tensor* layer_norm_rows(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, const float* eps);

}  // namespace cbs
