#include "cpu/activations.h"

#include <algorithm>
#include <cmath>

#include "cpu/fast_exp.h"

namespace cbs {

// Phi(x) = (1 + erf(x / sqrt 2)) / 2 in plain arithmetic the compiler vectorises (libm's
// erff is a scalar call per element). z = |x| / sqrt 2; z < 1: erf(z) = z P(z^2);
// z >= 1: erfc(z) = e^(-z^2) Q(t), t = 1 / (1 + z/2). P (degree 6) and Q (degree 8) are
// weighted least-squares fits to erf and erfc (relative error 1.2e-9 each, float64); in
// f32 GELU's absolute error stays at erff's (3.7e-7 vs 4.5e-7 max over [-12, 12]), and
// the left tail, taken from erfc, is more accurate than 1 + erff's cancellation.
static inline float normal_cdf(float x) {
    const float z = std::fabs(x) * 0.70710678f, u = z * z;
    const float erf_small =
        z * (1.12837911f + u * (-0.376126260f + u * (0.112835854f + u * (-0.0268538203f +
             u * (0.00518834218f + u * (-0.000801031070f + u * 7.85421871e-05f))))));
    const float t = 1.0f / (1.0f + 0.5f * z);
    const float q = -2.90868084e-05f + t * (0.282715619f + t * (0.276413262f + t * (0.275716454f + t * (0.0887406543f +
                    t * (0.237886295f + t * (-0.130437538f + t * (-0.0826686546f + t * 0.0519137643f)))))));
    const float erfc_big = exp_nonpositive(-u) * q;
    const float upper = z < 1.0f ? 0.5f + 0.5f * erf_small : 1.0f - 0.5f * erfc_big;  // Phi(|x|)
    const float lower = z < 1.0f ? 0.5f - 0.5f * erf_small : 0.5f * erfc_big;         // Phi(-|x|)
    return x >= 0.0f ? upper : lower;
}

// tanh(softplus(x)) = n(n + 2) / (n(n + 2) + 2) with n = e^x, written with m = e^-|x| <= 1
// (for x >= 0 numerator and denominator divided by n^2) so nothing overflows.
static inline float tanh_softplus(float x) {
    const float m = exp_nonpositive(-std::fabs(x));
    const float pos = (1.0f + 2.0f * m) / (1.0f + 2.0f * m + 2.0f * m * m);
    const float neg = m * (m + 2.0f) / (m * (m + 2.0f) + 2.0f);
    return x >= 0.0f ? pos : neg;
}

#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void gelu_erf_span(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * normal_cdf(x[i]);
}

// The same of x + b (b over each row of n values): a linear layer's bias added in the pass.
#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void gelu_erf_bias_span(const float* x, const float* b, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i] + b[i];
        y[i] = v * normal_cdf(v);
    }
}

// GPT-2's GELU, 0.5 x (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), written as
// x sigmoid(2u) = x / (1 + e^-2u) (e^2u / (1 + e^2u) for u < 0, so nothing overflows).
#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void gelu_tanh_span(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
        const float v = x[i], u = 0.7978845608f * (v + 0.044715f * v * v * v);
        const float e = exp_nonpositive(-2.0f * std::fabs(u));
        y[i] = u >= 0.0f ? v / (1.0f + e) : v * e / (1.0f + e);
    }
}

#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
static void mish_span(const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] * tanh_softplus(x[i]);
}

// An element-wise f32 op on a contiguous tensor, split into equal spans across ggml's threads.
template <void (*span)(const float*, float*, int64_t)>
static void elementwise(ggml_tensor* dst, const ggml_tensor* a, int ith, int nth, void*) {
    const int64_t n = ggml_nelements(a), per = ((n + nth - 1) / nth + 15) / 16 * 16;
    const int64_t i0 = std::min(n, ith * per), len = std::min(per, n - i0);
    if (len > 0) span(static_cast<const float*>(a->data) + i0, static_cast<float*>(dst->data) + i0, len);
}

ggml_tensor* gelu_erf(ggml_context* ctx, ggml_tensor* x, bool on_cpu) {
    if (!on_cpu || x->type != GGML_TYPE_F32) return ggml_gelu_erf(ctx, x);
    return ggml_map_custom1(ctx, ggml_is_contiguous(x) ? x : ggml_cont(ctx, x), elementwise<gelu_erf_span>,
                            GGML_N_TASKS_MAX, nullptr);
}

// gelu_erf_bias_span over src 0's rows (src 1 the bias), each thread its rows.
static void gelu_erf_bias_rows(ggml_tensor* dst, int ith, int nth, void*) {
    const ggml_tensor *x = dst->src[0], *b = dst->src[1];
    const int64_t n = x->ne[0], rows = ggml_nrows(x);
    for (int64_t r = rows * ith / nth; r < rows * (ith + 1) / nth; ++r)
        gelu_erf_bias_span(static_cast<const float*>(x->data) + r * n, static_cast<const float*>(b->data),
                           static_cast<float*>(dst->data) + r * n, n);
}

ggml_tensor* gelu_erf(ggml_context* ctx, ggml_tensor* x, ggml_tensor* b, bool on_cpu) {
    if (!on_cpu || x->type != GGML_TYPE_F32 || b->type != GGML_TYPE_F32 || !ggml_is_contiguous(x) ||
        !ggml_is_contiguous(b) || ggml_nelements(b) != x->ne[0])
        return gelu_erf(ctx, ggml_add(ctx, x, b), on_cpu);
    ggml_tensor* args[2] = {x, b};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, x->ne[0], x->ne[1], x->ne[2], x->ne[3], args, 2, gelu_erf_bias_rows,
                          GGML_N_TASKS_MAX, nullptr);
}

ggml_tensor* gelu_tanh(ggml_context* ctx, ggml_tensor* x, bool on_cpu) {
    if (!on_cpu || x->type != GGML_TYPE_F32) return ggml_gelu(ctx, x);
    return ggml_map_custom1(ctx, ggml_is_contiguous(x) ? x : ggml_cont(ctx, x), elementwise<gelu_tanh_span>,
                            GGML_N_TASKS_MAX, nullptr);
}

ggml_tensor* mish(ggml_context* ctx, ggml_tensor* x, bool on_cpu) {
    if (!on_cpu || x->type != GGML_TYPE_F32) return ggml_mul(ctx, x, ggml_tanh(ctx, ggml_softplus(ctx, x)));
    return ggml_map_custom1(ctx, ggml_is_contiguous(x) ? x : ggml_cont(ctx, x), elementwise<mish_span>, GGML_N_TASKS_MAX,
                            nullptr);
}

}  // namespace cbs
