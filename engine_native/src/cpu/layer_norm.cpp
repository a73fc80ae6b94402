#include "cpu/layer_norm.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include "core/system_info.h"
#include "cpu/avx2_reduce.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#endif

namespace cbs {

namespace {

#if defined(__x86_64__) || defined(_M_X64)
// ggml_compute_forward_norm_f32: the mean a sequential double sum, the variance
// ggml_vec_cvar_f32's float sums of 16 values on AVX-512 F/DQ, of 8 on AVX2 with FMA, added
// in double; then ggml_mul by w and ggml_add of b, each rounded on its own (no fused
// multiply-add). W is the vector width in floats, Squares its sum of squares.
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

// The mean as ggml takes it: a sequential double sum, divided in float.
float row_mean(const float* x, int64_t K) {
    double sum = 0.0;
    for (int64_t i = 0; i < K; ++i) sum += static_cast<double>(x[i]);
    return static_cast<float>(sum) / static_cast<float>(K);
}

// The same for rows r .. r + L - 1 (row i at x + i * K) at once, row i's sum in lane i: each
// lane's sum is still sequential (the same bits), but one row's adds no longer wait on each
// other's latency, which bounded a row's sum.
__attribute__((target("avx512f,avx512dq,avx2"))) void row_means8(const float* x, int64_t K, float* mean) {
    const __m256i at = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7), _mm256_set1_epi32(static_cast<int>(K)));
    __m512d sum = _mm512_setzero_pd();
    for (int64_t i = 0; i < K; ++i) sum = _mm512_add_pd(sum, _mm512_cvtps_pd(_mm256_i32gather_ps(x + i, at, 4)));
    alignas(64) double s[8];
    _mm512_store_pd(s, sum);
    for (int r = 0; r < 8; ++r) mean[r] = static_cast<float>(s[r]) / static_cast<float>(K);
}

__attribute__((target("avx2"))) void row_means4(const float* x, int64_t K, float* mean) {
    const __m128i at = _mm_mullo_epi32(_mm_setr_epi32(0, 1, 2, 3), _mm_set1_epi32(static_cast<int>(K)));
    __m256d sum = _mm256_setzero_pd();
    for (int64_t i = 0; i < K; ++i) sum = _mm256_add_pd(sum, _mm256_cvtps_pd(_mm_i32gather_ps(x + i, at, 4)));
    alignas(32) double s[4];
    _mm256_store_pd(s, sum);
    for (int r = 0; r < 4; ++r) mean[r] = static_cast<float>(s[r]) / static_cast<float>(K);
}

template <int W, double (*Squares)(const float*, float, float*)>
[[gnu::always_inline]] __attribute__((optimize("fp-contract=off"))) inline void layer_norm_body(
    const float* x, const float* w, const float* b, float eps, int64_t K, float mean, float* y) {
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
    const float* x, const float* w, const float* b, float eps, int64_t K, float mean, float* y) {
    layer_norm_body<16, squares16>(x, w, b, eps, K, mean, y);
}

__attribute__((target("avx2,fma"), optimize("fp-contract=off"))) void layer_norm_avx2(
    const float* x, const float* w, const float* b, float eps, int64_t K, float mean, float* y) {
    layer_norm_body<8, squares8>(x, w, b, eps, K, mean, y);
}
#endif

enum class Form { none, avx2, avx512 };

// The form of the loaded ggml CPU module (its features say which vector code it was built
// with: a forced Haswell module on an AVX-512 CPU computes the AVX2 form). CBS_LAYER_NORM=0:
// none, ggml's three operations (tests compare the two).
Form module_form() {
    static const Form form = [] {
        const char* v = std::getenv("CBS_LAYER_NORM");
        if (v && std::strcmp(v, "0") == 0) return Form::none;
#if defined(__x86_64__) || defined(_M_X64)
        bool avx512 = false, avx2 = false, fma = false;
        for (const std::string& f : system_info().cpu_features) {
            avx512 |= f == "AVX512";
            avx2 |= f == "AVX2";
            fma |= f == "FMA";
        }
        if (avx512 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq")) return Form::avx512;
        if (avx2 && fma && __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return Form::avx2;
#endif
        return Form::none;
    }();
    return form;
}

// dst = the layer norm of src 0's rows (src 1 w, src 2 b; userdata eps), each thread its rows.
void layer_norm_op(ggml_tensor* dst, int ith, int nth, void* userdata) {
    const ggml_tensor *x = dst->src[0], *w = dst->src[1], *b = dst->src[2];
    const float eps = *static_cast<const float*>(userdata);
    const int64_t K = x->ne[0], rows = ggml_nrows(x);
    const auto* in = static_cast<const float*>(x->data);
    auto* out = static_cast<float*>(dst->data);
    const auto *wv = static_cast<const float*>(w->data), *bv = static_cast<const float*>(b->data);
#if defined(__x86_64__) || defined(_M_X64)  // elsewhere layer_norm_rows never makes this node
    const bool avx512 = module_form() == Form::avx512;
    const int lanes = avx512 ? 8 : 4;
    float mean[8];
    for (int64_t r = rows * ith / nth, end = rows * (ith + 1) / nth; r < end;) {
        const int64_t n = end - r >= lanes ? lanes : 1;
        if (n == 8) row_means8(in + r * K, K, mean);
        else if (n == 4) row_means4(in + r * K, K, mean);
        else mean[0] = row_mean(in + r * K, K);
        for (int64_t i = 0; i < n; ++i, ++r) {
            if (avx512) layer_norm_avx512(in + r * K, wv, bv, eps, K, mean[i], out + r * K);
            else layer_norm_avx2(in + r * K, wv, bv, eps, K, mean[i], out + r * K);
        }
    }
#else
    (void)in, (void)out, (void)wv, (void)bv, (void)eps, (void)K, (void)rows, (void)ith, (void)nth;
#endif
}

}  // namespace

bool layer_norm_row_available() { return module_form() != Form::none; }

void layer_norm_row(const float* x, const float* w, const float* b, float eps, int64_t K, float* y) {
#if defined(__x86_64__) || defined(_M_X64)
    if (module_form() == Form::avx512) return layer_norm_avx512(x, w, b, eps, K, row_mean(x, K), y);
    layer_norm_avx2(x, w, b, eps, K, row_mean(x, K), y);
#else
    (void)x, (void)w, (void)b, (void)eps, (void)K, (void)y;
#endif
}

ggml_tensor* layer_norm_rows(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, const float* eps) {
    auto contiguous_f32 = [](const ggml_tensor* t) { return t->type == GGML_TYPE_F32 && ggml_is_contiguous(t); };
    if (!layer_norm_row_available() || !contiguous_f32(x) || !contiguous_f32(w) || !contiguous_f32(b) ||
        ggml_nelements(w) != x->ne[0] || ggml_nelements(b) != x->ne[0])
        return ggml_add(ctx, ggml_mul(ctx, ggml_norm(ctx, x, *eps), w), b);
    ggml_tensor* args[3] = {x, w, b};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, x->ne[0], x->ne[1], x->ne[2], x->ne[3], args, 3, layer_norm_op,
                          GGML_N_TASKS_MAX, const_cast<float*>(eps));
}

}  // namespace cbs
