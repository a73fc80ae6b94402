// ggml's Q8_0 rounding of one block of 32 floats, written once for both places that take T3's
// activations to 8 bits: the decoding kernel's columns (cpu/q4_matmul.cpp) and the int8 tile's
// rows (cpu/q8_gemm.cpp). The tile's products must equal the kernel's (a prompt and a decoding
// step take the same arithmetic), so both must hold the same bytes and scales: the same
// products and round-to-nearest-even conversions, here in AVX-512 and AVX2 forms.
#pragma once

#include <cstdint>

#include "ggml.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "cpu/avx2_reduce.h"
#endif

namespace cbs {

struct Q8Block {
    float scale;  // max |x| / 127, rounded through fp16 as ggml stores it
    int sum;      // the sum of the 32 rounded values (for the Q4_0 offset: sum (n - 8) q = sum n q - 8 sum q)
};

inline float q8_scale(float amax) { return ggml_fp16_to_fp32(ggml_fp32_to_fp16(amax / 127.0f)); }

#if defined(__x86_64__) && defined(__GNUC__)

// Values 0-15 of the block x to lo, 16-31 to hi.
__attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c"))) inline Q8Block q8_block_avx512(const float* x, int8_t* lo,
                                                                                            int8_t* hi) {
    const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, id)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, id));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lo), _mm512_cvtepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(hi), _mm512_cvtepi32_epi8(q1));
    return {q8_scale(amax), _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1))};
}

__attribute__((target("avx2,fma,f16c"))) inline Q8Block q8_block_avx2(const float* x, int8_t* lo, int8_t* hi) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);  // undoes the packs' lane interleave
    __m256 v[4];
    __m256 amax8 = _mm256_setzero_ps();
    for (int j = 0; j < 4; ++j) {
        v[j] = _mm256_loadu_ps(x + 8 * j);
        amax8 = _mm256_max_ps(amax8, _mm256_andnot_ps(sign, v[j]));
    }
    const float amax = hmax8(amax8);
    const __m256 id = _mm256_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
    __m256i q[4];
    for (int j = 0; j < 4; ++j) q[j] = _mm256_cvtps_epi32(_mm256_mul_ps(v[j], id));
    const __m256i bytes = _mm256_permutevar8x32_epi32(
        _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3])), order);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lo), _mm256_castsi256_si128(bytes));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(hi), _mm256_extracti128_si256(bytes, 1));
    return {q8_scale(amax), hsum8(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])))};
}
#endif

}  // namespace cbs
