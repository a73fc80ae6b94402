#include "core/graph_helpers.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/blas.h"
#include "cpu/layer_norm.h"

namespace cbs {

ggml_tensor* layer_norm(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, float eps) {
    return ggml_add(ctx, ggml_mul(ctx, ggml_norm(ctx, x, eps), w), b);
}

ggml_tensor* layer_norm(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, const float* eps, bool on_cpu) {
    return on_cpu ? layer_norm_rows(ctx, x, w, b, eps) : layer_norm(ctx, x, w, b, *eps);
}

ggml_tensor* linear(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, CpuProducts blas) {
    ggml_tensor* y = matmul(ctx, w, x, blas);
    return b ? ggml_add(ctx, y, b) : y;
}

ggml_tensor* conv1d(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, int stride, int pad, int dilation,
                    CpuProducts blas) {
    ggml_tensor* cols = ggml_im2col(ctx, w, x, stride, 0, pad, 0, dilation, 0, false, GGML_TYPE_F32);  // [K*C_in, L_out]
    ggml_tensor* y = matmul(ctx, cols, ggml_reshape_2d(ctx, w, w->ne[0] * w->ne[1], w->ne[2]), blas);  // [L_out, C_out]
    return b ? ggml_add(ctx, y, ggml_reshape_2d(ctx, b, 1, b->ne[0])) : y;
}

static constexpr int64_t kSgemmK = 16;  // tinyBLAS's f32 contraction step (AVX-512)

ggml_tensor* key_pad_mask(ggml_context* ctx, GraphInputs& in, int64_t n_kv, int64_t n_q, bool on_cpu) {
    const int64_t padded = (n_kv + kSgemmK - 1) / kSgemmK * kSgemmK;
    if (!on_cpu || have_blas() || padded == n_kv) return nullptr;
    // f32, not f16: ggml's softmax adds an f32 mask in a loop the compiler vectorises.
    std::vector<float> m(static_cast<size_t>(padded * n_q), 0.0f);
    for (int64_t i = 0; i < n_q; ++i) std::fill(m.begin() + i * padded + n_kv, m.begin() + (i + 1) * padded, -INFINITY);
    return in.f32(ctx, std::move(m), padded, n_q);
}

ggml_tensor* attend(ggml_context* ctx, ggml_tensor* scores, ggml_tensor* v, ggml_tensor* mask, float scale,
                    CpuProducts blas) {
    ggml_tensor* p = ggml_soft_max_ext(ctx, scores, mask, scale, 0.0f);
    ggml_tensor* vt = ggml_cont(ctx, ggml_permute(ctx, v, 1, 0, 2, 3));  // [n_kv, D, H, B]
    if (scores->ne[0] > vt->ne[0]) vt = ggml_pad(ctx, vt, static_cast<int>(scores->ne[0] - vt->ne[0]), 0, 0, 0);
    return ggml_cont(ctx, ggml_permute(ctx, matmul(ctx, vt, p, blas), 0, 2, 1, 3));
}

ggml_tensor* concat_columns(ggml_context* ctx, std::vector<ggml_tensor*> parts) {
    while (parts.size() > 1) {
        std::vector<ggml_tensor*> next;
        for (size_t i = 0; i < parts.size(); i += 2)
            next.push_back(i + 1 < parts.size() ? ggml_concat(ctx, parts[i], parts[i + 1], 1) : parts[i]);
        parts.swap(next);
    }
    return parts[0];
}

}  // namespace cbs
