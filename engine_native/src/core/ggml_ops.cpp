#include "core/ggml_ops.h"
#include "core/amx_gemm.h"
#include "core/avx2_reduce.h"
#include "core/vnni_gemm.h"
#include "core/q4_matmul.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#if defined(__x86_64__)
#include <immintrin.h>
#endif
#include <string>

#include "core/backend.h"
#include "core/model_file.h"
#include "core/system_info.h"

#ifdef CBS_HAVE_BLAS
#include <cblas.h>  // scipy-openblas32: every symbol carries a scipy_ prefix
#endif

namespace cbs {

#ifdef CBS_HAVE_BLAS
// ggml's threads split every product between them, so each sgemm call runs on one thread
// (OpenBLAS's own pool would oversubscribe the cores); set once, on first use.
static void openblas_one_thread() {
    static const bool once = (scipy_openblas_set_num_threads(1), true);
    (void)once;
}
#endif

ggml_tensor* layer_norm(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, float eps) {
    return ggml_add(ctx, ggml_mul(ctx, ggml_norm(ctx, x, eps), w), b);
}

CpuProducts products_for(ggml_backend_t backend, const ggml_tensor* weight) {
    if (!backend_is_cpu(backend)) return CpuProducts::ggml;
    return weight->type == GGML_TYPE_F32 ? CpuProducts::exact : CpuProducts::fast;
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

// e^x for x <= 0 within about one ulp (Cody-Waite reduction, degree-6 Taylor polynomial on
// |r| <= ln2/2: truncation error 1.2e-7 relative), in plain arithmetic the compiler vectorises.
static inline float exp_nonpositive(float x) {
    x = x < -87.0f ? -87.0f : x;                                   // 2^n stays a normal float; e^-87 ~ 1.6e-38
    const float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;  // round to nearest (1.5 * 2^23 trick)
    const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
    const float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
    float two_n;
    std::memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

// Phi(x) = (1 + erf(x / sqrt 2)) / 2 in plain arithmetic the compiler vectorises (libm's
// erff is a scalar call, ~8% of the CFM). z = |x| / sqrt 2; z < 1: erf(z) = z P(z^2);
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

// row[j] = e^(row[j] - max(row)); returns their sum. Sixteen lanes of partial max and sum
// let the compiler vectorise each loop; cloned for AVX2 and the baseline.
#if defined(__GNUC__) && defined(__x86_64__)
__attribute__((target_clones("avx2", "default")))
#endif
static float exp_shifted_row_portable(float* row, int64_t n) {
    constexpr int L = 16;
    float m[L], s[L];
    for (int l = 0; l < L; ++l) m[l] = -INFINITY, s[l] = 0.0f;
    int64_t j = 0;
    for (; j + L <= n; j += L)
        for (int l = 0; l < L; ++l) m[l] = row[j + l] > m[l] ? row[j + l] : m[l];
    float mx = -INFINITY;
    for (int l = 0; l < L; ++l) mx = m[l] > mx ? m[l] : mx;
    for (; j < n; ++j) mx = row[j] > mx ? row[j] : mx;
    for (j = 0; j + L <= n; j += L)
        for (int l = 0; l < L; ++l) s[l] += (row[j + l] = exp_nonpositive(row[j + l] - mx));
    float sum = 0.0f;
    for (; j < n; ++j) sum += (row[j] = exp_nonpositive(row[j] - mx));
    for (int l = 0; l < L; ++l) sum += s[l];
    return sum;
}

#if defined(__GNUC__) && defined(__x86_64__)
#define CBS_EXP_X86 1
// exp_nonpositive on 16 lanes with 2^n applied by vscalefps (one operation where the bit
// trick takes four), the same arithmetic otherwise.
__attribute__((target("avx512f"))) static inline __m512 exp_nonpositive16(__m512 x) {
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    const __m512 n = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504f), magic), magic);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606765330187e-06f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    for (const float c : {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    return _mm512_scalef_ps(p, n);
}

// exp_shifted_row on AVX-512, two vectors a step. Measured (one thread, 256 rows of 1000 on
// the Intel AMX host): 0.23 ns a value against the vectorised portable loop's 0.34.
__attribute__((target("avx512f"))) static float exp_shifted_row_avx512(float* row, int64_t n) {
    auto lanes = [&](int64_t j) { return n - j >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - j)) - 1u); };
    __m512 m0 = _mm512_set1_ps(-INFINITY), m1 = m0;
    int64_t j = 0;
    for (; j + 32 <= n; j += 32) {
        m0 = _mm512_max_ps(m0, _mm512_loadu_ps(row + j));
        m1 = _mm512_max_ps(m1, _mm512_loadu_ps(row + j + 16));
    }
    for (; j < n; j += 16) m0 = _mm512_max_ps(m0, _mm512_mask_loadu_ps(m0, lanes(j), row + j));
    const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(_mm512_max_ps(m0, m1)));
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    for (j = 0; j + 32 <= n; j += 32) {
        const __m512 e0 = exp_nonpositive16(_mm512_sub_ps(_mm512_loadu_ps(row + j), mx));
        const __m512 e1 = exp_nonpositive16(_mm512_sub_ps(_mm512_loadu_ps(row + j + 16), mx));
        _mm512_storeu_ps(row + j, e0);
        _mm512_storeu_ps(row + j + 16, e1);
        s0 = _mm512_add_ps(s0, e0);
        s1 = _mm512_add_ps(s1, e1);
    }
    for (; j < n; j += 16) {
        const __m512 e = _mm512_maskz_mov_ps(lanes(j), exp_nonpositive16(_mm512_sub_ps(_mm512_maskz_loadu_ps(lanes(j), row + j), mx)));
        _mm512_mask_storeu_ps(row + j, lanes(j), e);
        s0 = _mm512_add_ps(s0, e);
    }
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

// The same on AVX2 with FMA, 2^n built in the exponent bits as the scalar form does (a
// CPU without AVX-512, where the portable loop compiled to scalar code: 30 % of the CFM on a
// Zen 3 host). Tails through masked loads and stores, so every value takes the vector path.
__attribute__((target("avx2,fma"))) static inline __m256 exp_nonpositive8(__m256 x) {
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
    const __m256 n = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504f), magic), magic);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693145751953125f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(1.428606765330187e-06f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    for (const float c : {1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f}) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    const __m256i two_n = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(two_n));
}

// The first min(left, 8) lanes set.
__attribute__((target("avx2"))) static inline __m256i first_lanes8(int64_t left) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(std::min<int64_t>(left, 8))),
                              _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

__attribute__((target("avx2,fma"))) static float exp_shifted_row_avx2(float* row, int64_t n) {
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        m0 = _mm256_max_ps(m0, _mm256_loadu_ps(row + j));
        m1 = _mm256_max_ps(m1, _mm256_loadu_ps(row + j + 8));
    }
    for (; j < n; j += 8) {
        const __m256i m = first_lanes8(n - j);
        m1 = _mm256_max_ps(m1, _mm256_blendv_ps(m1, _mm256_maskload_ps(row + j, m), _mm256_castsi256_ps(m)));
    }
    const __m256 mx = _mm256_set1_ps(hmax8(_mm256_max_ps(m0, m1)));
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    for (j = 0; j + 16 <= n; j += 16) {
        const __m256 e0 = exp_nonpositive8(_mm256_sub_ps(_mm256_loadu_ps(row + j), mx));
        const __m256 e1 = exp_nonpositive8(_mm256_sub_ps(_mm256_loadu_ps(row + j + 8), mx));
        _mm256_storeu_ps(row + j, e0);
        _mm256_storeu_ps(row + j + 8, e1);
        s0 = _mm256_add_ps(s0, e0);
        s1 = _mm256_add_ps(s1, e1);
    }
    for (; j < n; j += 8) {
        const __m256i m = first_lanes8(n - j);
        const __m256 e = _mm256_and_ps(exp_nonpositive8(_mm256_sub_ps(_mm256_maskload_ps(row + j, m), mx)), _mm256_castsi256_ps(m));
        _mm256_maskstore_ps(row + j, m, e);
        s0 = _mm256_add_ps(s0, e);
    }
    return hsum8(_mm256_add_ps(s0, s1));
}
#endif

float exp_shifted_row(float* row, int64_t n) {
#ifdef CBS_EXP_X86
    static const bool avx512 = __builtin_cpu_supports("avx512f");
    if (avx512) return exp_shifted_row_avx512(row, n);
    static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (avx2) return exp_shifted_row_avx2(row, n);
#endif
    return exp_shifted_row_portable(row, n);
}

#ifdef CBS_HAVE_BLAS

// Rows of one query block (its scores are kBlockQ x T_k floats per thread). Each block packs
// the head's K and V again inside sgemm, so larger blocks pack less: CFM, Q4_0 Turbo, CPU
// seconds measured at T_k 1000: 64 rows 5.22, 256 rows 4.49, 512 rows 4.55, 1024 rows 4.78;
// at T_k 2000: 64 15.4, 256 13.9, 512 13.5 (benchmarks/bench_s3gen_quant.py workload).
static constexpr int64_t kBlockQ = 256;

// Row i1 of batch (i2, i3) of an f32 tensor.
static const float* row_at(const ggml_tensor* t, int64_t i1, int64_t i2, int64_t i3) {
    return reinterpret_cast<const float*>(static_cast<const char*>(t->data) + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3]);
}

static void amx_attention(ggml_tensor* dst, int ith, int nth);
static void vnni_attention(ggml_tensor* dst, int ith, int nth);

// The userdata of an attention whose products run in int16 (vnni_attention).
static int vnni_attention_tag;

static void blas_attention(ggml_tensor* dst, int ith, int nth, void* amx) {
    if (amx == &vnni_attention_tag) return vnni_attention(dst, ith, nth);
    if (amx) return amx_attention(dst, ith, nth);
    openblas_one_thread();
    const ggml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2];
    const int64_t D = q->ne[0], Tq = q->ne[1], Tk = k->ne[1], H = q->ne[2], B = q->ne[3];
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const int64_t blocks = (Tq + kBlockQ - 1) / kBlockQ, jobs = blocks * H * B;
    thread_local std::vector<float> scores;
    scores.resize(static_cast<size_t>(kBlockQ * Tk));
    float* S = scores.data();
    for (int64_t job = ith; job < jobs; job += nth) {
        const int64_t blk = job % blocks, h = (job / blocks) % H, b = job / (blocks * H);
        const int64_t t0 = blk * kBlockQ, n = std::min(kBlockQ, Tq - t0);
        const float *Q = row_at(q, t0, h, b), *K = row_at(k, 0, h, b), *V = row_at(v, 0, h, b);
        float* O = reinterpret_cast<float*>(static_cast<char*>(dst->data) + h * dst->nb[1] + t0 * dst->nb[2] + b * dst->nb[3]);
        const int ldq = static_cast<int>(q->nb[1] / sizeof(float)), ldk = static_cast<int>(k->nb[1] / sizeof(float));
        const int ldv = static_cast<int>(v->nb[1] / sizeof(float)), ldo = static_cast<int>(dst->nb[2] / sizeof(float));
        // S = scale * Q K^T  [n x Tk]
        scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(Tk),
                          static_cast<int>(D), scale, Q, ldq, K, ldk, 0.0f, S, static_cast<int>(Tk));
        float inv_sum[kBlockQ];
        for (int64_t i = 0; i < n; ++i) inv_sum[i] = 1.0f / exp_shifted_row(S + i * Tk, Tk);
        // O = softmax(S) V  [n x D], normalised after the product (D multiplies a row, not Tk).
        scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(D),
                          static_cast<int>(Tk), 1.0f, S, static_cast<int>(Tk), V, ldv, 0.0f, O, ldo);
        for (int64_t i = 0; i < n; ++i)
            for (int64_t d = 0; d < D; ++d) O[i * ldo + d] *= inv_sum[i];
    }
}

// AMX's query blocks, far smaller than sgemm's: a block's scores then stay in L2 beside the
// head's packed keys and values through the softmax, its split and the second product.
// Measured (CFM, Q4_0 Turbo, 250 tokens, 2 threads, best of 3, runs alternating): 32 rows
// 1.34-1.40 s, 64 1.38-1.42, 128 1.42-1.46, 256 1.48-1.50.
static constexpr int64_t kAmxBlockQ = 32;
// The same on AMX tiles (core/amx_gemm.h), a head at a time (its keys and values packed once),
// each head taken by whichever thread is free (the counter, the op's fourth source).
static void amx_attention(ggml_tensor* dst, int, int) {
    const ggml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2];
    auto* next = static_cast<std::atomic<int64_t>*>(dst->src[3]->data);
    const int64_t D = q->ne[0], Tq = q->ne[1], Tk = k->ne[1], H = q->ne[2], B = q->ne[3];
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    thread_local std::vector<float> scores;
    thread_local AmxSplitA qs, ps;
    thread_local AmxPackedB kp, vp;
    scores.resize(static_cast<size_t>(kAmxBlockQ * Tk));
    float* S = scores.data();
    const int64_t ldq = q->nb[1] / sizeof(float), ldk = k->nb[1] / sizeof(float), ldv = v->nb[1] / sizeof(float);
    const int64_t ldo = dst->nb[2] / sizeof(float);
    for (int64_t hb; (hb = next->fetch_add(1)) < H * B;) {
        const int64_t h = hb % H, b = hb / H;
        kp.pack(row_at(k, 0, h, b), ldk, Tk, D);
        vp.pack_transposed(row_at(v, 0, h, b), ldv, D, Tk);
        for (int64_t t0 = 0; t0 < Tq; t0 += kAmxBlockQ) {
            const int64_t n = std::min(kAmxBlockQ, Tq - t0);
            qs.split(row_at(q, t0, h, b), ldq, n, D, scale);
            amx_gemm(qs, kp, S, Tk);  // S = scale Q K^T  [n x Tk]
            float inv_sum[kAmxBlockQ];
            for (int64_t i = 0; i < n; ++i) inv_sum[i] = 1.0f / exp_shifted_row(S + i * Tk, Tk);
            float* O = reinterpret_cast<float*>(static_cast<char*>(dst->data) + h * dst->nb[1] + t0 * dst->nb[2] +
                                                b * dst->nb[3]);
            ps.split(S, Tk, n, Tk);
            amx_gemm(ps, vp, O, ldo);  // O = softmax(S) V  [n x D], normalised after the product
            for (int64_t i = 0; i < n; ++i)
                for (int64_t d = 0; d < D; ++d) O[i * ldo + d] *= inv_sum[i];
        }
    }
}
#endif

// The same with both products in int16 on AVX512-VNNI (core/vnni_gemm.h, bounded rounding):
// blas_attention's blocks, a contiguous share per thread, a head's keys and values packed once
// by each thread that takes a block of it; the scores' rows padded to whole blocks
// of 32 keys (zero weight).
static void vnni_attention(ggml_tensor* dst, int ith, int nth) {
    const ggml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2];
    const int64_t D = q->ne[0], Tq = q->ne[1], Tk = k->ne[1], H = q->ne[2], B = q->ne[3];
    const int64_t Tkp = (Tk + 31) / 32 * 32;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const int64_t blocks = (Tq + kBlockQ - 1) / kBlockQ, jobs = blocks * H * B;
    thread_local std::vector<float> scores;
    thread_local I16Rows qs, ps;
    thread_local I16Weight kp, vp;
    scores.resize(static_cast<size_t>(kBlockQ * Tkp));
    float* S = scores.data();
    const int64_t ldq = q->nb[1] / sizeof(float), ldk = k->nb[1] / sizeof(float), ldv = v->nb[1] / sizeof(float);
    const int64_t ldo = dst->nb[2] / sizeof(float);
    const float* packed = nullptr;  // the head whose keys and values kp, vp hold (this call: a graph's data moves)
    // A contiguous range of jobs per thread, so that each packs about H * B / nth heads, not all.
    for (int64_t job = jobs * ith / nth; job < jobs * (ith + 1) / nth; ++job) {
        const int64_t blk = job % blocks, h = (job / blocks) % H, b = job / (blocks * H);
        const int64_t t0 = blk * kBlockQ, n = std::min(kBlockQ, Tq - t0);
        const float *Q = row_at(q, t0, h, b), *K = row_at(k, 0, h, b);
        if (K != packed) {
            kp.pack(K, 1, ldk, Tk, D, D);                   // a row per key
            vp.pack(row_at(v, 0, h, b), ldv, 1, D, Tkp, Tk);   // a row per channel, over the keys
            packed = K;
        }
        qs.own(n, D);
        qs.quantize(Q, ldq, 0, n, true, scale);
        vnni_gemm(qs, kp, S, Tkp);  // S = scale Q K^T  [n x Tk]
        float inv_sum[kBlockQ];
        for (int64_t i = 0; i < n; ++i) {
            inv_sum[i] = 1.0f / exp_shifted_row(S + i * Tkp, Tk);
            std::fill(S + i * Tkp + Tk, S + (i + 1) * Tkp, 0.0f);
        }
        ps.own(n, Tkp);
        ps.quantize(S, Tkp, 0, n, true);
        float* O = reinterpret_cast<float*>(static_cast<char*>(dst->data) + h * dst->nb[1] + t0 * dst->nb[2] + b * dst->nb[3]);
        vnni_gemm(ps, vp, O, ldo);  // O = softmax(S) V  [n x D], normalised after the product
        for (int64_t i = 0; i < n; ++i)
            for (int64_t d = 0; d < D; ++d) O[i * ldo + d] *= inv_sum[i];
    }
}

// A work counter (one cache line) zeroed by a node of its own, for an op that takes it as a
// source and hands its pieces to whichever thread asks next.
static void zero_counter(ggml_tensor* dst, int, int, void*) {
    static_cast<std::atomic<int64_t>*>(dst->data)->store(0);
}
[[maybe_unused]] static ggml_tensor* work_counter(ggml_context* ctx) {
    return ggml_custom_4d(ctx, GGML_TYPE_I8, 64, 1, 1, 1, nullptr, 0, zero_counter, 1, nullptr);
}

#ifdef CBS_HAVE_BLAS

// dst = a x b as ggml_mul_mat: C[N x M] = B[N x K] A[M x K]^T per batch of b, row-major.
// Work units: b's batches, each cut into enough row blocks for every thread to have one.
static void blas_matmul(ggml_tensor* dst, int ith, int nth, void* amx) {
    openblas_one_thread();
    const ggml_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t K = a->ne[0], M = a->ne[1], N = b->ne[1], batches = b->ne[2] * b->ne[3];
    const int64_t chunks = batches >= nth ? 1 : (nth + batches - 1) / batches, rows = (N + chunks - 1) / chunks;
    const int lda = static_cast<int>(a->nb[1] / sizeof(float)), ldb = static_cast<int>(b->nb[1] / sizeof(float));
    const int ldc = static_cast<int>(dst->nb[1] / sizeof(float));
    thread_local AmxPackedB ap;
    thread_local AmxSplitA bs;
    const float* packed = nullptr;  // the batch of a that ap holds
    for (int64_t u = ith; u < batches * chunks; u += nth) {
        const int64_t r0 = (u % chunks) * rows, i2 = (u / chunks) % b->ne[2], i3 = (u / chunks) / b->ne[2];
        const int64_t n = std::min(rows, N - r0);
        if (n <= 0) continue;
        const float* A = row_at(a, 0, i2 / (b->ne[2] / a->ne[2]), i3 / (b->ne[3] / a->ne[3]));
        float* C = const_cast<float*>(row_at(dst, r0, i2, i3));
        if (amx) {
            if (A != packed) ap.pack(A, lda, M, K), packed = A;
            bs.split(row_at(b, r0, i2, i3), ldb, n, K);
            amx_gemm(bs, ap, C, ldc);
            continue;
        }
        scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(M),
                          static_cast<int>(K), 1.0f, row_at(b, r0, i2, i3), ldb, A, lda, 0.0f, C, ldc);
    }
}
#endif

#ifdef CBS_HAVE_BLAS
// Rows m0 .. m0+m-1 of a 2-D weight as f32: its own rows when f32 (ld from its stride), else
// converted into `buf` (ld = K).
static const float* weight_rows_f32(const ggml_tensor* a, int64_t m0, int64_t m, std::vector<float>& buf, int64_t& ld) {
    const int64_t K = a->ne[0];
    if (a->type == GGML_TYPE_F32) {
        ld = a->nb[1] / sizeof(float);
        return reinterpret_cast<const float*>(static_cast<const char*>(a->data) + m0 * a->nb[1]);
    }
    buf.resize(static_cast<size_t>(m * K));
    if (q4_is_packed(a)) {
        q4_unpack_rows(a, m0, m, buf.data());
    } else {
        const ggml_to_float_t to_float = ggml_get_type_traits(a->type)->to_float;
        for (int64_t i = 0; i < m; ++i) to_float(static_cast<const char*>(a->data) + (m0 + i) * a->nb[1], buf.data() + i * K, K);
    }
    ld = K;
    return buf.data();
}

static void amx_weight_matmul(ggml_tensor* dst);

// blas_matmul for a 2-D weight `a` stored quantised or f16 (a Q4_0 model's S3Gen): each thread
// converts its share of a's rows to f32 (ggml's to_float) into a buffer of its own, then
// multiplies every row of b by them. Converting costs M*K per product against sgemm's M*K*N,
// and the activations stay f32 (ggml's own kernel rounds them to 8 bits). Measured (Q4_0 Turbo,
// 250 tokens, encoder + CFM, loaded 2 cores, bench_s3gen_quant.py): ggml's Q4_0 kernel 6.78 s,
// this 4.85 s; f32 weights 4.76 s (dequantising at load would cost ~330 MiB for 2%).
// On AMX (userdata set) any 2-D weight, f32 too, goes to amx_weight_matmul below.
static void weight_matmul(ggml_tensor* dst, int ith, int nth, void* amx) {
    if (amx) return amx_weight_matmul(dst);
    openblas_one_thread();
    const ggml_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t K = a->ne[0], M = a->ne[1], N = b->ne[1];
    const int64_t per = ((M + nth - 1) / nth + 15) / 16 * 16, m0 = std::min(M, ith * per), m = std::min(per, M - m0);
    if (m <= 0) return;
    thread_local std::vector<float> w;
    int64_t ldw = K;
    const float* W = weight_rows_f32(a, m0, m, w, ldw);
    const int ldb = static_cast<int>(b->nb[1] / sizeof(float)), ldc = static_cast<int>(dst->nb[1] / sizeof(float));
    for (int64_t i3 = 0; i3 < b->ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < b->ne[2]; ++i2)
            scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(N), static_cast<int>(m),
                              static_cast<int>(K), 1.0f, row_at(b, 0, i2, i3), ldb, W, static_cast<int>(ldw), 0.0f,
                              const_cast<float*>(row_at(dst, 0, i2, i3)) + m0, ldc);
}

// The split tensor (amx_split's output): a cache line holding the product's work counter, then
// the split of each batch of b (b's batches in order). amx_split zeroes the counter itself, so
// a product needs no work_counter node (and no barrier) of its own.
static constexpr int64_t kSplitHeader = 64;
static std::atomic<int64_t>* split_counter(const ggml_tensor* split) {
    return static_cast<std::atomic<int64_t>*>(split->data);
}
// Batch (i2, i3) of b in a split tensor whose batches take `bytes` each (AMX's or int16's form).
template <class F>
static void for_each_batch(const ggml_tensor* b, F&& f) {  // f(i2, i3) for each of b's ne[2] x ne[3] batches
    for (int64_t i3 = 0; i3 < b->ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < b->ne[2]; ++i2) f(i2, i3);
}

static void* split_batch(const ggml_tensor* split, const ggml_tensor* b, int64_t i2, int64_t i3, size_t bytes) {
    return static_cast<char*>(split->data) + kSplitHeader + (i3 * b->ne[2] + i2) * bytes;
}
static void* split_batch(const ggml_tensor* split, const ggml_tensor* b, int64_t i2, int64_t i3) {
    return split_batch(split, b, i2, i3, AmxSplitA::bytes(b->ne[1], b->ne[0]));
}

// The same on AMX tiles: pieces of kAmxRows weight rows, each taken by whichever thread is
// free (the split's counter), packed into tiles and multiplied by all of b; so a core slowed
// by other work on the machine holds up no other. 128 rows: the activations' split is read
// from L3 once per piece, half as often as with 64 (10-15 % on the kernel alone; 256 no better).
static constexpr int64_t kAmxRows = 128;
static void amx_weight_matmul(ggml_tensor* dst) {
    const ggml_tensor *a = dst->src[0], *b = dst->src[1], *split = dst->src[2];
    const int64_t K = a->ne[0], M = a->ne[1], N = b->ne[1];
    const int64_t ldc = dst->nb[1] / sizeof(float);
    thread_local std::vector<float> w;
    thread_local AmxPackedB wp;
    AmxSplitA bs;
    for (int64_t m0; (m0 = split_counter(split)->fetch_add(kAmxRows)) < M;) {
        const int64_t m = std::min(kAmxRows, M - m0);
        int64_t ldw = K;
        wp.pack(weight_rows_f32(a, m0, m, w, ldw), ldw, m, K);
        for_each_batch(b, [&](int64_t i2, int64_t i3) {
            bs.view(split_batch(split, b, i2, i3), N, K);
            amx_gemm(bs, wp, const_cast<float*>(row_at(dst, 0, i2, i3)) + m0, ldc);
        });
    }
}

// b's rows split for AMX (AmxSplitA) into dst, one row of dst per batch of b, each thread a
// share of the row blocks: done once per product, not by every thread that multiplies them.
static void amx_split(ggml_tensor* dst, int ith, int nth, void*) {
    const ggml_tensor* b = dst->src[0];
    const int64_t K = b->ne[0], N = b->ne[1];
    if (ith == 0) split_counter(dst)->store(0);  // the graph's barrier publishes it before the product
    AmxSplitA split;
    for_each_batch(b, [&](int64_t i2, int64_t i3) {
        split.view(split_batch(dst, b, i2, i3), N, K);
        const int64_t blocks = split.row_blocks();
        split.split_blocks(row_at(b, 0, i2, i3), b->nb[1] / sizeof(float), blocks * ith / nth, blocks * (ith + 1) / nth);
    });
}

static bool blas_quant_enabled() {  // CBS_BLAS_QUANT=0: ggml's own kernel (benchmarks/bench_s3gen_quant.py)
    const char* v = std::getenv("CBS_BLAS_QUANT");
    return !v || std::strcmp(v, "0") != 0;
}
#endif

// Columns up to which a packed Q4_0 weight's product stays with our kernel (core/q4_matmul.h).
static constexpr int64_t kQ4KernelMaxColumns = 64;

// The op's userdata: non-null runs its products on AMX tiles.
static void* amx_tag(CpuProducts how) {
    static int tag;
    return how.kind == CpuProducts::fast && amx_available() ? &tag : nullptr;
}

#ifdef CBS_HAVE_BLAS
// `fast` without AMX: a Q4_0 weight's products in int16 on AVX512-VNNI (core/vnni_gemm.h),
// b's rows rounded once per product by a node of their own (vnni_split), then pieces of
// kVnniRows weight rows taken by whichever thread is free, each unpacked and multiplied by
// all of b (the split's counter, as amx_weight_matmul).
static constexpr int64_t kVnniRows = 48;  // 3 groups of 16: one tile wide (core/vnni_gemm.cpp)

static void* vnni_split_batch(const ggml_tensor* split, const ggml_tensor* b, int64_t i2, int64_t i3) {
    return split_batch(split, b, i2, i3, I16Rows::bytes(b->ne[1], b->ne[0]));
}

static void vnni_split(ggml_tensor* dst, int ith, int nth, void*) {
    const ggml_tensor* b = dst->src[0];
    const int64_t K = b->ne[0], N = b->ne[1];
    if (ith == 0) split_counter(dst)->store(0);  // the graph's barrier publishes it before the product
    I16Rows rows;
    for_each_batch(b, [&](int64_t i2, int64_t i3) {
        rows.view(vnni_split_batch(dst, b, i2, i3), N, K);
        rows.quantize(row_at(b, 0, i2, i3), b->nb[1] / sizeof(float), N * ith / nth, N * (ith + 1) / nth);
    });
}

static void vnni_weight_matmul(ggml_tensor* dst, int, int, void*) {
    const ggml_tensor *a = dst->src[0], *b = dst->src[1], *split = dst->src[2];
    const int64_t K = a->ne[0], M = a->ne[1], N = b->ne[1];
    const int64_t ldc = dst->nb[1] / sizeof(float);
    thread_local I16Weight wp;
    I16Rows rows;
    for (int64_t m0; (m0 = split_counter(split)->fetch_add(kVnniRows)) < M;) {
        const int64_t m = std::min(kVnniRows, M - m0);
        wp.unpack_q4_0(static_cast<const char*>(a->data) + m0 * a->nb[1], a->nb[1], m, K);
        for_each_batch(b, [&](int64_t i2, int64_t i3) {
            rows.view(vnni_split_batch(split, b, i2, i3), N, K);
            vnni_gemm(rows, wp, const_cast<float*>(row_at(dst, 0, i2, i3)) + m0, ldc);
        });
    }
}

// Whether a's products with b go to vnni_weight_matmul.
static bool vnni_weight(const ggml_tensor* a, CpuProducts how) {
    return how.kind == CpuProducts::fast && !amx_available() && vnni_available() && a->type == GGML_TYPE_Q4_0 &&
           !q4_is_packed(a) && a->ne[0] % 32 == 0;
}
#endif

ggml_tensor* matmul(ggml_context* ctx, ggml_tensor* a, ggml_tensor* b, CpuProducts how) {
    // T3's Q4_0 weights on the CPU (core/q4_matmul.h): a long prompt's many columns through
    // the AMX tiles or sgemm below (the weights converted and packed per product), a decoding
    // step and a short prompt (a sentence's text) through our kernel, which reads the weights
    // once for all its columns: converting 300 M weights per product cost a 27-token prompt
    // 335 ms against 210-350 ms through the kernel (shared 2-core machine).
    const bool packed = q4_is_packed(a);
#ifdef CBS_HAVE_BLAS
    if (packed)
        how = b->type == GGML_TYPE_F32 && b->nb[0] == sizeof(float) && b->ne[1] >= kQ4KernelMaxColumns ? CpuProducts::fast
                                                                                                        : CpuProducts::ggml;
    const bool blas = how.blas();
    const bool weight_like = ggml_is_contiguous(a) && a->ne[2] == 1 && a->ne[3] == 1 && b->type == GGML_TYPE_F32 &&
                             b->nb[0] == sizeof(float) && b->ne[1] >= 16 && a->ne[1] >= 16 && a->ne[0] == b->ne[0];
    // Quantised or f16 weights; with AMX any 2-D weight (split by its rows: each thread packs its own).
    if (blas && weight_like && ((a->type != GGML_TYPE_F32 && ggml_get_type_traits(a->type)->to_float &&
                                 blas_quant_enabled()) ||
                                (a->type == GGML_TYPE_F32 && amx_tag(how)))) {
        if (vnni_weight(a, how)) {
            const int64_t bytes = kSplitHeader + static_cast<int64_t>(I16Rows::bytes(b->ne[1], b->ne[0])) *
                                                     b->ne[2] * b->ne[3];
            ggml_tensor* args[3] = {a, b, ggml_custom_4d(ctx, GGML_TYPE_I8, bytes, 1, 1, 1, &b, 1, vnni_split,
                                                         GGML_N_TASKS_MAX, nullptr)};
            return ggml_custom_4d(ctx, GGML_TYPE_F32, a->ne[1], b->ne[1], b->ne[2], b->ne[3], args, 3,
                                  vnni_weight_matmul, GGML_N_TASKS_MAX, nullptr);
        }
        void* amx = amx_tag(how);
        ggml_tensor* args[3] = {a, b, nullptr};
        if (amx) {
            const int64_t bytes = kSplitHeader + static_cast<int64_t>(AmxSplitA::bytes(b->ne[1], b->ne[0])) *
                                                     b->ne[2] * b->ne[3];
            args[2] = ggml_custom_4d(ctx, GGML_TYPE_I8, bytes, 1, 1, 1, &b, 1, amx_split, GGML_N_TASKS_MAX, nullptr);
        }
        return ggml_custom_4d(ctx, GGML_TYPE_F32, a->ne[1], b->ne[1], b->ne[2], b->ne[3], args, amx ? 3 : 2,
                              weight_matmul, GGML_N_TASKS_MAX, amx);
    }
    // Small products (a time embedding's one row) stay with ggml: sgemm's setup would dominate.
    if (blas && a->type == GGML_TYPE_F32 && b->type == GGML_TYPE_F32 && a->nb[0] == sizeof(float) &&
        b->nb[0] == sizeof(float) && b->ne[1] >= 16 && a->ne[1] >= 16 && a->ne[0] == b->ne[0] &&
        b->ne[2] % a->ne[2] == 0 && b->ne[3] % a->ne[3] == 0) {
        ggml_tensor* args[2] = {a, b};
        return ggml_custom_4d(ctx, GGML_TYPE_F32, a->ne[1], b->ne[1], b->ne[2], b->ne[3], args, 2, blas_matmul,
                              GGML_N_TASKS_MAX, amx_tag(how));
    }
#endif
    if (packed) return q4_matmul(ctx, a, b);  // ggml's kernels must not see the packed layout
    // Asked for at f32: on CUDA an f32 x f32 product otherwise runs through TF32 (patches/0002).
    ggml_tensor* r = ggml_mul_mat(ctx, a, b);
    ggml_mul_mat_set_prec(r, GGML_PREC_F32);
    return r;
}

ggml_tensor* mul_mat_weight(ggml_context* ctx, ggml_tensor* w, ggml_tensor* x) {
    return q4_is_packed(w) ? matmul(ctx, w, x, false) : ggml_mul_mat(ctx, w, x);
}

bool have_blas() {
#ifdef CBS_HAVE_BLAS
    return true;
#else
    return false;
#endif
}

std::string blas_core() {
#ifdef CBS_HAVE_BLAS
    const char* name = scipy_openblas_get_corename();
    return name ? name : "";
#else
    return "";
#endif
}

ggml_tensor* attention(ggml_context* ctx, ggml_tensor* q, ggml_tensor* k, ggml_tensor* v, CpuProducts how) {
    const bool on_cpu = how.blas();
#ifdef CBS_HAVE_BLAS
    if (on_cpu) {
        void* amx = amx_tag(how);
        const bool vnni = !amx && how.kind == CpuProducts::fast && vnni_available() && q->ne[0] % 32 == 0;
        ggml_tensor* args[4] = {q, k, v, amx ? work_counter(ctx) : nullptr};
        return ggml_custom_4d(ctx, GGML_TYPE_F32, q->ne[0], q->ne[2], q->ne[1], q->ne[3], args, amx ? 4 : 3,
                              blas_attention, GGML_N_TASKS_MAX, amx ? amx : vnni ? &vnni_attention_tag : nullptr);
    }
#endif
    const float scale = 1.0f / std::sqrt(static_cast<float>(q->ne[0]));
    if (!on_cpu) {
        // A GPU: two f32 products around a softmax. ggml-cuda's flash attention rounds K and
        // V to f16, which put the CFM's mel at rel 1.06e-3 from the CPU's (H200). The views
        // go to the product as they are (cuBLAS takes the strides; Vulkan copies inside).
        ggml_tensor* scores = matmul(ctx, k, q, false);  // [T_k, T_q, H, B]
        return attend(ctx, scores, v, nullptr, scale, false);
    }
    ggml_tensor* o = ggml_flash_attn_ext(ctx, q, k, v, nullptr, scale, 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(o, GGML_PREC_F32);
    return o;
}

ggml_tensor* GraphInputs::ids(ggml_context* ctx, std::vector<int32_t> v) {
    ggml_tensor* t = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, static_cast<int64_t>(v.size()));
    ggml_set_input(t);
    ints.emplace_back(t, std::move(v));
    return t;
}

ggml_tensor* GraphInputs::f32(ggml_context* ctx, std::vector<float> v, int64_t ne0, int64_t ne1) {
    ggml_tensor* t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, ne0, ne1);
    ggml_set_input(t);
    floats.emplace_back(t, std::move(v));
    return t;
}

ggml_tensor* GraphInputs::f16_mask(ggml_context* ctx, std::vector<ggml_fp16_t> v, int64_t ne0, int64_t ne1) {
    ggml_tensor* t = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, ne0, ne1);
    ggml_set_input(t);
    halves.emplace_back(t, std::move(v));
    return t;
}

void GraphInputs::upload() const {
    for (auto& [t, v] : ints) ggml_backend_tensor_set(t, v.data(), 0, ggml_nbytes(t));
    for (auto& [t, v] : floats) ggml_backend_tensor_set(t, v.data(), 0, ggml_nbytes(t));
    for (auto& [t, v] : halves) ggml_backend_tensor_set(t, v.data(), 0, ggml_nbytes(t));
}

GraphRunner::GraphRunner(ggml_backend_t backend, size_t max_nodes) : backend_(backend), max_nodes_(max_nodes) {
    meta_.resize(ggml_tensor_overhead() * max_nodes_ + ggml_graph_overhead_custom(max_nodes_, false));
    if (backend_is_cpu(backend_)) {
        alloc_ = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend_));
        return;
    }
    cpu_ = make_backend("cpu", default_thread_count()).release();
    ggml_backend_t backends[2] = {backend_, cpu_};  // the CPU last: sched's fallback
    sched_ = ggml_backend_sched_new(backends, nullptr, 2, max_nodes_, false, false);
    if (!sched_) {
        free_backend(cpu_);
        throw DeviceError(std::string("could not create a scheduler for ") + ggml_backend_name(backend_));
    }
}

GraphRunner::~GraphRunner() {
    if (ctx_) ggml_free(ctx_);
    if (alloc_) ggml_gallocr_free(alloc_);
    if (sched_) ggml_backend_sched_free(sched_);
    if (cpu_) free_backend(cpu_);
}

// A compute buffer kept between computations saves its allocation (page faults of a few ms
// per 100 MB); one larger than this is freed once its results are read, so the S3Gen
// encoder's and HiFT's buffers for a long sentence (about 120 MB each at 10 s) are not
// all held at once between passes, nor the CFM's for a voice prompt's cached prefix (about
// 50 MB) beside the prefix itself (64 MB before: 50 MB more RSS while a voice was prepared).
static constexpr size_t kKeepComputeBytes = 16u << 20;

void GraphRunner::release_large_buffer() {
    if (!alloc_ || ggml_gallocr_get_buffer_size(alloc_, 0) <= kKeepComputeBytes) return;
    ggml_gallocr_free(alloc_);
    alloc_ = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend_));
}

ggml_context* GraphRunner::begin() {
    if (ctx_) ggml_free(ctx_);
    ++generation_;
    ctx_ = ggml_init({meta_.size(), meta_.data(), /*no_alloc=*/true});
    graph_ = ggml_new_graph_custom(ctx_, max_nodes_, false);
    return ctx_;
}

// An operation a device accepts (supports_op) but whose kernel aborts on these shapes
// (ggml 0.20.2): it goes to the CPU instead. CUDA's ssm_conv (S3Tokenizer's FSMN memory)
// has kernels for widths 3, 4, 5, 9 and 15 only.
static bool device_lacks(ggml_backend_t backend, const ggml_tensor* node) {
    if (node->op == GGML_OP_SSM_CONV && std::strncmp(ggml_backend_name(backend), "CUDA", 4) == 0) {
        const int64_t k = node->src[1]->ne[0];
        return k != 3 && k != 4 && k != 5 && k != 9 && k != 15;
    }
    return false;
}

// CBS_PROFILE_OPS=1 (a diagnostic, device graphs only): every node of a graph computed and
// waited for on its own through the scheduler's eval callback, the time per operation summed
// by kind and printed to stderr after each graph (kernel time plus one launch and one sync
// each; the graph's own time, all nodes launched at once, is printed beside it).
static bool profile_ops() {
    static const bool on = [] {
        const char* e = std::getenv("CBS_PROFILE_OPS");
        return e && *e && std::string(e) != "0";
    }();
    return on;
}

namespace {
struct OpProfile {
    std::chrono::steady_clock::time_point start;
    std::map<std::string, std::pair<int, double>> by_kind;  // kind -> (nodes, ms)
};

bool profile_node(ggml_tensor* t, bool ask, void* data) {
    auto* p = static_cast<OpProfile*>(data);
    const auto now = std::chrono::steady_clock::now();
    if (ask) {
        p->start = now;
        return true;
    }
    std::string kind = ggml_op_desc(t);
    if (t->op == GGML_OP_MUL_MAT && t->src[0])
        kind += std::string(" ") + ggml_type_name(t->src[0]->type) + (ggml_is_contiguous(t->src[0]) ? "" : " view") +
                (t->ne[2] * t->ne[3] > 1 ? " batched" : "");
    auto& e = p->by_kind[kind];
    e.first += 1;
    e.second += std::chrono::duration<double, std::milli>(now - p->start).count();
    return true;
}
}  // namespace

static void print_profile(const OpProfile& p, int n_nodes, double node_by_node_ms, double whole_ms) {
    std::vector<std::pair<std::string, std::pair<int, double>>> rows(p.by_kind.begin(), p.by_kind.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    std::fprintf(stderr, "[ops] graph of %d nodes: %.2f ms node by node, %.2f ms as one graph\n", n_nodes,
                 node_by_node_ms, whole_ms);
    for (size_t i = 0; i < rows.size() && i < 14; ++i)
        std::fprintf(stderr, "[ops]   %-32s %5d nodes %8.2f ms\n", rows[i].first.c_str(), rows[i].second.first,
                     rows[i].second.second);
}

void GraphRunner::assign_lacking_ops() {
    for (int i = 0; i < ggml_graph_n_nodes(graph_); ++i) {
        ggml_tensor* node = ggml_graph_node(graph_, i);
        if (device_lacks(backend_, node)) ggml_backend_sched_set_tensor_backend(sched_, node, cpu_);
    }
}

size_t GraphRunner::reserve(ggml_tensor* out) {
    if (!sched_) return 0;
    ggml_build_forward_expand(graph_, out);
    ggml_backend_sched_reset(sched_);
    assign_lacking_ops();
    if (!ggml_backend_sched_reserve(sched_, graph_))
        throw EngineError(std::string("not enough memory for the computation on ") + ggml_backend_name(backend_));
    ggml_backend_sched_reset(sched_);
    return ggml_backend_sched_get_buffer_size(sched_, backend_);
}

void GraphRunner::run(const GraphInputs& in) {
    ggml_status status;
    if (sched_) {
        ggml_backend_sched_reset(sched_);
        assign_lacking_ops();
        if (!ggml_backend_sched_alloc_graph(sched_, graph_))
            throw EngineError(std::string("not enough memory for the computation on ") + ggml_backend_name(backend_));
        in.upload();
        status = profile_ops() ? profiled_compute(in) : ggml_backend_sched_graph_compute(sched_, graph_);
    } else {
        if (!ggml_gallocr_alloc_graph(alloc_, graph_)) throw EngineError("not enough memory for the computation");
        in.upload();
        status = ggml_backend_graph_compute(backend_, graph_);
    }
    if (status == GGML_STATUS_ABORTED) throw CancelledError("cancelled");
    if (status == GGML_STATUS_ALLOC_FAILED) throw EngineError(std::string("out of memory on ") + ggml_backend_name(backend_));
    if (status != GGML_STATUS_SUCCESS) throw EngineError("graph computation failed");
}

// The graph as usual (timed), then again node by node (inputs uploaded again: the
// allocator may have reused their memory).
ggml_status GraphRunner::profiled_compute(const GraphInputs& in) {
    using clock = std::chrono::steady_clock;
    auto t0 = clock::now();
    ggml_status status = ggml_backend_sched_graph_compute(sched_, graph_);
    ggml_backend_sched_synchronize(sched_);
    const double whole = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    if (status != GGML_STATUS_SUCCESS) return status;
    OpProfile prof;
    ggml_backend_sched_set_eval_callback(sched_, profile_node, &prof);
    in.upload();
    t0 = clock::now();
    status = ggml_backend_sched_graph_compute(sched_, graph_);
    ggml_backend_sched_synchronize(sched_);
    const double by_node = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    ggml_backend_sched_set_eval_callback(sched_, nullptr, nullptr);
    print_profile(prof, ggml_graph_n_nodes(graph_), by_node, whole);
    return status;
}

std::vector<float> GraphRunner::rerun(ggml_tensor* out, const GraphInputs& in) {
    in.upload();
    const ggml_status status =
        sched_ ? ggml_backend_sched_graph_compute(sched_, graph_) : ggml_backend_graph_compute(backend_, graph_);
    if (status == GGML_STATUS_ABORTED) throw CancelledError("cancelled");
    if (status != GGML_STATUS_SUCCESS) throw EngineError(std::string("graph computation failed on ") + ggml_backend_name(backend_));
    std::vector<float> result(ggml_nelements(out));
    ggml_backend_tensor_get(out, result.data(), 0, ggml_nbytes(out));
    return result;
}

std::vector<float> GraphRunner::compute(ggml_tensor* out, const GraphInputs& in) {
    return std::move(compute(std::vector<ggml_tensor*>{out}, in)[0]);
}

std::vector<std::vector<float>> GraphRunner::compute(const std::vector<ggml_tensor*>& outs, const GraphInputs& in) {
    for (ggml_tensor* out : outs) {
        ggml_set_output(out);
        ggml_build_forward_expand(graph_, out);
    }
    run(in);
    std::vector<std::vector<float>> results;
    for (ggml_tensor* out : outs) {
        results.emplace_back(ggml_nelements(out));
        ggml_backend_tensor_get(out, results.back().data(), 0, ggml_nbytes(out));
    }
    release_large_buffer();
    return results;
}

}  // namespace cbs
