#include "t3/decode_step.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/graph_helpers.h"
#include "cpu/layer_norm.h"
#include "cpu/q4_matmul.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace cbs {

namespace {

const float* column(const ggml_tensor* t) { return static_cast<const float*>(t->data); }

// ggml's CPU RMSNorm fused with its multiplication by w (ggml_compute_forward_rms_norm_f32:
// the squares' sum a sequential double sum, y = x * scale * w), so y is bit for bit ggml's.
void rms_norm(const float* x, const float* w, float eps, int64_t K, float* y) {
    double sum = 0.0;
    for (int64_t i = 0; i < K; ++i) sum += static_cast<double>(x[i] * x[i]);
    const float mean = static_cast<float>(sum / static_cast<double>(K));
    const float scale = 1.0f / std::sqrt(mean + eps);
    for (int64_t i = 0; i < K; ++i) y[i] = x[i] * scale * w[i];
}

enum class Norm { none, layer, rms };

// dst [N, M] = [res +] (w [norm](x) [+ b]) for x's M columns (a guided step's two rows):
// src 0 w (packed), 1 x, 2 b or x (none), 3 res or x (none), 4 the norm's weight or x
// (none), 5 LayerNorm's bias; userdata the norm's eps. Every thread takes the columns whole
// (normalised and quantised by itself), then its rows of the product.
template <Norm kNorm>
void fused_product(ggml_tensor* dst, int ith, int nth, void* userdata) {
    const ggml_tensor *w = dst->src[0], *x = dst->src[1];
    const ggml_tensor* b = dst->src[2] != x ? dst->src[2] : nullptr;
    const ggml_tensor* res = dst->src[3] != x ? dst->src[3] : nullptr;
    const int64_t K = w->ne[0], N = w->ne[1], M = x->ne[1];
    int64_t r0, r1;
    q4_thread_rows(N, ith, nth, r0, r1);
    if (r0 >= r1) return;
    thread_local std::vector<float> normed;
    thread_local std::vector<uint8_t> cols;
    const size_t col_bytes = q4_column_bytes(K);
    normed.resize(static_cast<size_t>(K));
    cols.resize(col_bytes * static_cast<size_t>(M));
    for (int64_t c = 0; c < M; ++c) {
        const float* in = column(x) + c * K;
        if constexpr (kNorm == Norm::rms) {
            rms_norm(in, column(dst->src[4]), *static_cast<const float*>(userdata), K, normed.data());
            in = normed.data();
        }
        if constexpr (kNorm == Norm::layer) {
            layer_norm_row(in, column(dst->src[4]), column(dst->src[5]), *static_cast<const float*>(userdata), K,
                           normed.data());
            in = normed.data();
        }
        q4_quantize_column(in, K, cols.data() + c * col_bytes);
    }
    float* y = static_cast<float*>(dst->data);
    q4_product_rows(w, cols.data(), M, col_bytes, r0, r1, y + r0, N);
    for (int64_t c = 0; c < M; ++c) {
        float* yc = y + c * N;
        if (b) {
            const float* bias = column(b);
            for (int64_t r = r0; r < r1; ++r) yc[r] += bias[r];
        }
        if (res) {
            const float* rv = column(res) + c * N;
            for (int64_t r = r0; r < r1; ++r) yc[r] = rv[r] + yc[r];
        }
    }
}

// dst [D, heads, 1, rows] (contiguous) = RoPE of src 0 (a step's heads, rows of D
// contiguous) with src 1, 2 the position's cos and sin [D]: x * cos + [x2, x1] * sin, each
// product and the sum rounded on its own, as ggml's mul, concat, mul and add (T3Llama::rope).
__attribute__((optimize("fp-contract=off"))) void rope_heads(ggml_tensor* dst, int ith, int nth, void*) {
    const ggml_tensor *x = dst->src[0], *cos = dst->src[1], *sin = dst->src[2];
    const int64_t D = x->ne[0], heads = x->ne[1], rows = x->ne[3], half = D / 2;
    const float *c = column(cos), *s = column(sin);
    for (int64_t u = ith; u < heads * rows; u += nth) {
        const int64_t h = u % heads, r = u / heads;
        const float* in = reinterpret_cast<const float*>(static_cast<const char*>(x->data) + h * x->nb[1] + r * x->nb[3]);
        float* out = static_cast<float*>(dst->data) + u * D;
        for (int64_t i = 0; i < D; ++i) {
            const float turned = i < half ? in[i + half] : in[i - half];
            const float a = in[i] * c[i], b = turned * s[i];
            out[i] = a + b;
        }
    }
}

template <Norm kNorm>
ggml_tensor* fused(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, ggml_tensor* res,
                   ggml_tensor* norm_w, ggml_tensor* norm_b, const float* eps) {
    // Absent operands are x again (a custom op's sources cannot be null in between).
    ggml_tensor* args[6] = {w, x, b ? b : x, res ? res : x, norm_w ? norm_w : x, norm_b ? norm_b : x};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[1], x->ne[1], 1, 1, args, 6, fused_product<kNorm>, GGML_N_TASKS_MAX,
                          const_cast<float*>(eps));
}

bool contiguous_f32(const ggml_tensor* t) { return t && t->type == GGML_TYPE_F32 && ggml_is_contiguous(t); }

}  // namespace

bool step_fusion_enabled() {  // read per graph built, so a test can compare both in one process
    const char* v = std::getenv("CBS_T3_FUSED");
    return !v || std::strcmp(v, "0") != 0;
}

bool step_fuses(const ggml_tensor* w, const ggml_tensor* x) {
#if defined(__x86_64__) || defined(_M_X64)
    // The layer norm's two forms (above) are ggml's AVX-512 and AVX2 ones, which the
    // packed kernel's CPUs (AVX2 at least) load.
    return step_fusion_enabled() && q4_is_packed(w) && contiguous_f32(x) && ggml_n_dims(x) <= 2 && x->ne[0] == w->ne[0] &&
           x->ne[1] <= kStepFusedColumns;
#else
    (void)w, (void)x;
    return false;
#endif
}

ggml_tensor* step_norm_linear(ggml_context* ctx, ggml_tensor* x, ggml_tensor* ln_w, ggml_tensor* ln_b, const float* eps,
                              ggml_tensor* w, ggml_tensor* b) {
    if (b && contiguous_f32(ln_w) && contiguous_f32(ln_b) && contiguous_f32(b) && layer_norm_row_available() &&
        step_fuses(w, x))
        return fused<Norm::layer>(ctx, x, w, b, nullptr, ln_w, ln_b, eps);
    return linear(ctx, layer_norm(ctx, x, ln_w, ln_b, *eps), w, b);
}

ggml_tensor* step_linear_residual(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, ggml_tensor* res) {
    if ((!b || contiguous_f32(b)) && contiguous_f32(res) && ggml_n_dims(res) <= 2 && res->ne[0] == w->ne[1] &&
        res->ne[1] == x->ne[1] && step_fuses(w, x))
        return fused<Norm::none>(ctx, x, w, b, res, nullptr, nullptr, nullptr);
    return ggml_add(ctx, res, b ? linear(ctx, x, w, b) : mul_mat_weight(ctx, w, x));
}

ggml_tensor* step_rms_norm_product(ggml_context* ctx, ggml_tensor* x, ggml_tensor* norm_w, const float* eps,
                                   ggml_tensor* w) {
    if (contiguous_f32(norm_w) && step_fuses(w, x)) return fused<Norm::rms>(ctx, x, w, nullptr, nullptr, norm_w, nullptr, eps);
    return mul_mat_weight(ctx, w, ggml_mul(ctx, ggml_rms_norm(ctx, x, *eps), norm_w));
}

bool step_rope_fuses(const ggml_tensor* x, const ggml_tensor* cos, const ggml_tensor* sin) {
    return step_fusion_enabled() && x->type == GGML_TYPE_F32 && x->nb[0] == sizeof(float) && x->ne[2] == 1 &&
           x->ne[0] % 2 == 0 && contiguous_f32(cos) && contiguous_f32(sin) && ggml_nelements(cos) == x->ne[0] &&
           ggml_nelements(sin) == x->ne[0];
}

ggml_tensor* step_rope(ggml_context* ctx, ggml_tensor* x, ggml_tensor* cos, ggml_tensor* sin) {
    ggml_tensor* args[3] = {x, cos, sin};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, x->ne[0], x->ne[1], 1, x->ne[3], args, 3, rope_heads, GGML_N_TASKS_MAX,
                          nullptr);
}

}  // namespace cbs
