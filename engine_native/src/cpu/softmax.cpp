#include "cpu/softmax.h"

#include <algorithm>
#include <cmath>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "cpu/avx2_reduce.h"
#include "cpu/fast_exp.h"

namespace cbs {

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

// exp_shifted_row on AVX-512, two vectors a step: faster than the vectorised portable loop,
// whose 2^n takes four operations where vscalefps takes one.
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
// CPU without AVX-512, where the portable loop compiles to scalar code). Tails through masked
// loads and stores, so every value takes the vector path.
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

}  // namespace cbs
