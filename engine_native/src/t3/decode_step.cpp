#include "t3/decode_step.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/graph_helpers.h"
#include "cpu/avx2_reduce.h"
#include "cpu/q4_matmul.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace cbs {

namespace {

const float* column(const ggml_tensor* t) { return static_cast<const float*>(t->data); }

#if defined(__x86_64__) || defined(_M_X64)
// ggml's CPU layer norm as the ggml build this CPU loads computes it (ggml_compute_forward_norm_f32:
// the mean a sequential double sum, the variance ggml_vec_cvar_f32's float sums of 16 values
// on AVX-512 F/DQ, of 8 on AVX2 with FMA, added in double), then ggml_mul by w and ggml_add
// of b, each rounded on its own (no fused multiply-add), so y is bit for bit the three
// separate operations' result. W is the vector width in floats, Squares its sum of squares.
bool have_avx512dq() {
    static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
    return yes;
}

__attribute__((target("avx512f,avx512dq"))) inline double squares16(const float* x, float mean, float* y) {
    const __m512 v = _mm512_sub_ps(_mm512_loadu_ps(x), _mm512_set1_ps(mean));
    _mm512_storeu_ps(y, v);
    return static_cast<double>(_mm512_reduce_add_ps(_mm512_mul_ps(v, v)));
}

__attribute__((target("avx2,fma"))) inline double squares8(const float* x, float mean, float* y) {
    const __m256 v = _mm256_sub_ps(_mm256_loadu_ps(x), _mm256_set1_ps(mean));
    _mm256_storeu_ps(y, v);
    return static_cast<double>(hsum8(_mm256_mul_ps(v, v)));
}

template <int W, double (*Squares)(const float*, float, float*)>
[[gnu::always_inline]] __attribute__((optimize("fp-contract=off"))) inline void layer_norm_body(
    const float* x, const float* w, const float* b, float eps, int64_t K, float* y) {
    double sum = 0.0;
    for (int64_t i = 0; i < K; ++i) sum += static_cast<double>(x[i]);
    const float mean = static_cast<float>(sum) / static_cast<float>(K);
    double sq = 0.0;
    int64_t i = 0;
    for (; i + W - 1 < K; i += W) sq += Squares(x + i, mean, y + i);
    for (; i < K; ++i) {
        const float v = x[i] - mean;
        y[i] = v;
        sq += static_cast<double>(v * v);
    }
    const float variance = static_cast<float>(sq / static_cast<double>(K));
    const float scale = 1.0f / std::sqrt(variance + eps);
    for (int64_t j = 0; j < K; ++j) {
        const float n = y[j] * scale;
        const float m = n * w[j];
        y[j] = m + b[j];
    }
}

__attribute__((target("avx512f,avx512dq"), optimize("fp-contract=off"))) void layer_norm_avx512(
    const float* x, const float* w, const float* b, float eps, int64_t K, float* y) {
    layer_norm_body<16, squares16>(x, w, b, eps, K, y);
}

__attribute__((target("avx2,fma"), optimize("fp-contract=off"))) void layer_norm_avx2(
    const float* x, const float* w, const float* b, float eps, int64_t K, float* y) {
    layer_norm_body<8, squares8>(x, w, b, eps, K, y);
}
#endif

// dst [N, 1] = [res +] (w [LN](x) + b): src 0 w (packed), 1 x, 2 b, 3 res or x (none), 4 ln_w
// or x (none), 5 ln_b; userdata the layer norm's eps. Every thread takes x whole (normalised
// and quantised by itself), then its rows of the product.
void fused_product(ggml_tensor* dst, int ith, int nth, void* userdata) {
    const ggml_tensor *w = dst->src[0], *x = dst->src[1], *b = dst->src[2];
    const ggml_tensor* res = dst->src[3] != x ? dst->src[3] : nullptr;
    const ggml_tensor* ln_w = dst->src[4] != x ? dst->src[4] : nullptr;
    const int64_t K = w->ne[0], N = w->ne[1];
    int64_t r0, r1;
    q4_thread_rows(N, ith, nth, r0, r1);
    if (r0 >= r1) return;
    thread_local std::vector<float> normed;
    thread_local std::vector<uint8_t> col;
    const float* in = column(x);
#if defined(__x86_64__) || defined(_M_X64)
    if (ln_w) {
        normed.resize(static_cast<size_t>(K));
        const float eps = *static_cast<const float*>(userdata);
        if (have_avx512dq())
            layer_norm_avx512(in, column(ln_w), column(dst->src[5]), eps, K, normed.data());
        else
            layer_norm_avx2(in, column(ln_w), column(dst->src[5]), eps, K, normed.data());
        in = normed.data();
    }
#endif
    col.resize(q4_column_bytes(K));
    q4_quantize_column(in, K, col.data());
    float* y = static_cast<float*>(dst->data);
    q4_product_rows(w, col.data(), r0, r1, y + r0);
    const float* bias = column(b);
    for (int64_t r = r0; r < r1; ++r) y[r] += bias[r];
    if (res) {
        const float* rv = column(res);
        for (int64_t r = r0; r < r1; ++r) y[r] = rv[r] + y[r];
    }
}

ggml_tensor* fused(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, ggml_tensor* res,
                   ggml_tensor* ln_w, ggml_tensor* ln_b, const float* eps) {
    // Absent operands are x again (a custom op's sources cannot be null in between).
    ggml_tensor* args[6] = {w, x, b, res ? res : x, ln_w ? ln_w : x, ln_b ? ln_b : x};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[1], 1, 1, 1, args, 6, fused_product, GGML_N_TASKS_MAX,
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
    return step_fusion_enabled() && q4_is_packed(w) && contiguous_f32(x) && ggml_nelements(x) == w->ne[0];
#else
    (void)w, (void)x;
    return false;
#endif
}

ggml_tensor* step_norm_linear(ggml_context* ctx, ggml_tensor* x, ggml_tensor* ln_w, ggml_tensor* ln_b, const float* eps,
                              ggml_tensor* w, ggml_tensor* b) {
    if (b && contiguous_f32(ln_w) && contiguous_f32(ln_b) && contiguous_f32(b) && step_fuses(w, x))
        return fused(ctx, x, w, b, nullptr, ln_w, ln_b, eps);
    return linear(ctx, layer_norm(ctx, x, ln_w, ln_b, *eps), w, b);
}

ggml_tensor* step_linear_residual(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, ggml_tensor* res) {
    if (b && contiguous_f32(b) && contiguous_f32(res) && ggml_nelements(res) == w->ne[1] && step_fuses(w, x))
        return fused(ctx, x, w, b, res, nullptr, nullptr, nullptr);
    return ggml_add(ctx, res, linear(ctx, x, w, b));
}

}  // namespace cbs
