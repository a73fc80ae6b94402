// Full-context softmax attention of the S3Gen CFM and the other encoders' transformers.
#pragma once

#include "cpu/products.h"
#include "ggml.h"

namespace cbs {

// Full-context softmax attention with scale 1/sqrt(D): q, k, v [D, T, H, B] (views whose
// rows are contiguous) -> [D, H, T_q, B]. On the CPU with OpenBLAS (CBS_HAVE_BLAS) one fused
// f32 operation: per head and block of queries, scores, softmax and values through
// single-threaded sgemm on ggml's threads (no T x T tensor per head). On a GPU two products
// around ggml's softmax, at f32 or, `device_default`, at the device's default precision (its
// flash attention rounds K and V to f16). On the CPU without OpenBLAS ggml_flash_attn_ext
// (f32 precision), faster there than two tinyBLAS products around the softmax.
// `fast` with AMX: both products of a block on AMX tiles (K and V packed once per head); without
// AMX, on AVX512-VNNI (D a multiple of 32), both in int16 the same way.
ggml_tensor* attention(ggml_context* ctx, ggml_tensor* q, ggml_tensor* k, ggml_tensor* v, CpuProducts on_cpu);

// ESPnet's relative-position attention (the S3Gen encoder's): queries i < T, keys j < Tk, the
// score (q_u,i . k_j + q_v,i . p_{T-1-i+j}) / sqrt(D) with p's L = Tk + T - 1 rows the relative
// positions Tk - 1 down to -(T - 1); q_u, q_v [D, T, H], k, v [D, Tk, H], p [D, L, H] (views
// whose rows are contiguous) -> [D, H, T]. On the CPU with OpenBLAS one fused operation as
// attention()'s, each block of queries multiplying only the p rows it takes (the reference's
// full product computes all L for every query, then shifts); nullptr elsewhere (the caller
// builds the products, the shift and the softmax as ggml nodes).
ggml_tensor* rel_position_attention(ggml_context* ctx, ggml_tensor* q_u, ggml_tensor* q_v, ggml_tensor* k,
                                   ggml_tensor* p, ggml_tensor* v, CpuProducts how);

}  // namespace cbs
