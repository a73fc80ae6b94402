// T3's attention for one new token (or a short prompt's few) on the CPU over an f16 KV cache
// (a quantised model's).
//
// ggml's CPU flash attention for a single query walks the cache one position at a time with
// a scalar expf each and sums the values in f16 (rounding every step); at a few hundred
// positions per head and 24 layers that is a large share of a decoding step.
// This op gives each thread whole heads: scores as f16 x f32 dot products (AVX-512 where
// present), one vectorised softmax, the values summed in f32. Its result does not depend
// on the thread count (ggml's splits a head's positions between threads).
#pragma once

#include "ggml.h"

namespace cbs {

// Whether decode_attention applies: f16 cache, one query or a short prompt's few (below the
// size where ggml's tiled flash attention takes over), the CPU (CBS_T3_ATTENTION=0: never).
bool decode_attention_applies(const ggml_tensor* k, int n_new, bool on_cpu);

// softmax(q k^T / sqrt(D) + mask) v for q [D, H, n_q, rows] (f32, rows of D contiguous), k and
// v [D, n_kv, H, rows] (f16, views of the cache; a guided model's two rows each over its own
// cache half), mask [n_kv, >= n_q] f16 (row i for query i, the same for every row: 0 or -inf
// per position) -> [D, H, n_q, rows] f32, as ggml_flash_attn_ext's result.
// With pos (I32 [1], one query only): first writes k_new and v_new (f32, laid out as q) at cache
// row *pos of k and v (views of the whole cache's first n_kv rows, pos among them), each thread
// its own heads: the step's two ggml_set_rows (and their copies) folded in.
ggml_tensor* decode_attention(ggml_context* ctx, ggml_tensor* q, ggml_tensor* k, ggml_tensor* v, ggml_tensor* mask,
                              ggml_tensor* k_new = nullptr, ggml_tensor* v_new = nullptr, ggml_tensor* pos = nullptr);

}  // namespace cbs
