#include "cpu/q4_dot.h"

#include "cpu/avx2_reduce.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "ggml.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define CBS_Q4_X86 1
#endif

namespace cbs::q4 {

#ifdef CBS_Q4_X86
bool use_avx512() {
    static const bool yes = [] {
        const char* v = std::getenv("CBS_Q4_KERNEL");
        if (v && std::strcmp(v, "avx2") == 0) return false;
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    }();
    return yes;
}

namespace {

// A group of R packed rows (nb blocks each, from its first byte) times C activation columns:
// out[c][i] = sum over blocks of dw * da * (sum n q) - dw * offset. Each step loads 64 bytes
// (4 blocks) of a row: its low nibbles and its high nibbles go through one dpbusd each into
// the same lanes (lanes 4j .. 4j+3: block j), then one conversion, one scaled add. With C = 2
// (a guided step's two rows) the weights are loaded, converted and split once; each column's
// float operations are those of C = 1, in the same order (the same sums, bit for bit).
template <int R, int C>
AVX512_TARGET void dot_rows_avx512(const uint8_t* group, int64_t nb, const uint8_t* const* cols, const ActLayout& L,
                                   bool prefetch, float* const* out) {
    const int8_t* a[C];
    const float *da[C], *off[C];
    for (int c = 0; c < C; ++c) a[c] = L.values(cols[c]), da[c] = L.scales(cols[c]), off[c] = L.offsets(cols[c]);
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i quad_idx = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    __m512 acc[C][R], offs[C][R];
    for (int c = 0; c < C; ++c)
        for (int i = 0; i < R; ++i) acc[c][i] = offs[c][i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += kChunk) {
        const int64_t n = std::min(kChunk, nb - b);
        const uint8_t* chunk = group + R * b * 18;
        const auto* dw = reinterpret_cast<const ggml_fp16_t*>(chunk);
        if (prefetch)
            for (int64_t o = 0; o < R * n * 2; o += 64) _mm_prefetch(reinterpret_cast<const char*>(chunk) + kPrefetch + o, _MM_HINT_T1);
        const __mmask16 m = static_cast<__mmask16>((1u << n) - 1u);
        __m512 scale[C][R];
        for (int i = 0; i < R; ++i) {
            const __m512 w = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, dw + i * n));
            for (int c = 0; c < C; ++c) {
                scale[c][i] = _mm512_mul_ps(w, _mm512_loadu_ps(da[c] + b));
                offs[c][i] = _mm512_fmadd_ps(w, _mm512_loadu_ps(off[c] + b), offs[c][i]);
            }
        }
        const uint8_t* nibbles = chunk + R * n * 2;
        for (int64_t p = 0; p < n; p += kGroup) {
            __m512i lo[C], hi[C];
            for (int c = 0; c < C; ++c)
                lo[c] = _mm512_loadu_si512(a[c] + (b + p) * kBlock), hi[c] = _mm512_loadu_si512(a[c] + (b + p) * kBlock + 64);
            const __m512i idx = _mm512_add_epi32(quad_idx, _mm512_set1_epi32(static_cast<int>(p)));
            const int64_t q = std::min(kGroup, n - p);  // blocks in this quad (under 4 at a row's end)
            const __mmask64 bytes = q == kGroup ? ~__mmask64(0) : (__mmask64(1) << (q * 16)) - 1;
            const uint8_t* quad = nibbles + R * p * 16;
            for (int i = 0; i < R; ++i) {
                const uint8_t* src = quad + i * q * 16;
                if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(src) + kPrefetch, _MM_HINT_T1);
                const __m512i x = q == kGroup ? _mm512_loadu_si512(src) : _mm512_maskz_loadu_epi8(bytes, src);
                const __m512i x_lo = _mm512_and_si512(x, low4), x_hi = _mm512_and_si512(_mm512_srli_epi16(x, 4), low4);
                for (int c = 0; c < C; ++c) {
                    const __m512i dot = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), x_lo, lo[c]), x_hi, hi[c]);
                    acc[c][i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(idx, scale[c][i]), acc[c][i]);
                }
            }
        }
    }
    for (int c = 0; c < C; ++c)
        for (int i = 0; i < R; ++i) out[c][i] = _mm512_reduce_add_ps(acc[c][i]) - _mm512_reduce_add_ps(offs[c][i]);
}

// The same product on AVX2: 32 bytes (2 blocks) of a row a step, maddubs (unsigned nibbles
// times signed activations, pairs summed in int16: at most 2 * 15 * 127 a pair, two pairs
// 7620, no saturation) for the low and the high nibbles, their sum widened by madd into
// lanes 4j .. 4j+3 for block j, then one conversion and one scaled add. With 16 registers
// a chunk goes row by row (its ~2 KB stay in L1), the rows' sums kept in memory between
// chunks. A chunk's scales are read through a zeroed copy where it is under 16 blocks (a
// row group's last): AVX2 has no 16-bit masked load, and the bytes after them are nibbles.
// C = 2 as in the AVX-512 form: the nibbles split once, each column's float operations its own.
template <int R, int C>
AVX2_TARGET void dot_rows_avx2(const uint8_t* group, int64_t nb, const uint8_t* const* cols, const ActLayout& L,
                               bool prefetch, float* const* out) {
    const int8_t* a[C];
    const float *da[C], *off[C];
    for (int c = 0; c < C; ++c) a[c] = L.values(cols[c]), da[c] = L.scales(cols[c]), off[c] = L.offsets(cols[c]);
    const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    // The lanes of blocks k, k + 1 (k = 0, 2, 4, 6 within 8 scales): a table, not built per step.
    const __m256i pair_lanes[4] = {_mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3),
                                   _mm256_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5), _mm256_setr_epi32(6, 6, 6, 6, 7, 7, 7, 7)};
    __m256 acc[C][R];
    for (int c = 0; c < C; ++c)
        for (int i = 0; i < R; ++i) acc[c][i] = _mm256_setzero_ps();
    alignas(32) ggml_fp16_t tail[R * kChunk];
    for (int64_t b = 0; b < nb; b += kChunk) {
        const int64_t n = std::min(kChunk, nb - b);
        const uint8_t* chunk = group + R * b * 18;
        const ggml_fp16_t* dw = reinterpret_cast<const ggml_fp16_t*>(chunk);
        int64_t dw_stride = n;
        if (n < kChunk) {
            std::memset(tail, 0, sizeof(tail));
            for (int i = 0; i < R; ++i) std::memcpy(tail + i * kChunk, dw + i * n, static_cast<size_t>(n) * 2);
            dw = tail;
            dw_stride = kChunk;
        }
        if (prefetch)
            for (int64_t o = 0; o < R * n * 18; o += 64) _mm_prefetch(reinterpret_cast<const char*>(chunk) + kPrefetch + o, _MM_HINT_T1);
        const uint8_t* nibbles = chunk + R * n * 2;
        for (int i = 0; i < R; ++i) {
            const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dw + i * dw_stride)));
            const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dw + i * dw_stride + 8)));
            __m256 scale[C][2], sum[C];
            for (int c = 0; c < C; ++c) {
                scale[c][0] = _mm256_mul_ps(w0, _mm256_loadu_ps(da[c] + b));
                scale[c][1] = _mm256_mul_ps(w1, _mm256_loadu_ps(da[c] + b + 8));
                sum[c] = _mm256_fnmadd_ps(w0, _mm256_loadu_ps(off[c] + b), acc[c][i]);
                sum[c] = _mm256_fnmadd_ps(w1, _mm256_loadu_ps(off[c] + b + 8), sum[c]);
            }
            for (int64_t p = 0; p < n; p += kGroup) {
                const int64_t q = std::min(kGroup, n - p);  // blocks in this quad (under 4 at a row's end)
                const uint8_t* src = nibbles + R * p * 16 + i * q * 16;
                for (int64_t h = 0; h < q; h += 2) {  // blocks p + h, p + h + 1
                    const int64_t j = p + h;
                    const __m256i x = q - h >= 2 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + h * 16))
                                                 : _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + h * 16)));
                    const __m256i x_lo = _mm256_and_si256(x, low4), x_hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), low4);
                    for (int c = 0; c < C; ++c) {
                        const int8_t* at = a[c] + (b + p) * kBlock + h * 16;
                        const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
                        const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + 64));
                        const __m256i pairs = _mm256_add_epi16(_mm256_maddubs_epi16(x_lo, lo), _mm256_maddubs_epi16(x_hi, hi));
                        const __m256i dot = _mm256_madd_epi16(pairs, ones);
                        sum[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                                 _mm256_permutevar8x32_ps(scale[c][j >> 3], pair_lanes[(j & 7) >> 1]), sum[c]);
                    }
                }
            }
            for (int c = 0; c < C; ++c) acc[c][i] = sum[c];
        }
    }
    for (int c = 0; c < C; ++c)
        for (int i = 0; i < R; ++i) out[c][i] = hsum8(acc[c][i]);
}

// A row group of R rows times C columns, through the CPU's kernel.
template <int R, int C>
void dot_rows(const uint8_t* group, int64_t nb, const uint8_t* const* cols, const ActLayout& L, bool prefetch,
              float* const* out) {
    if (use_avx512()) return dot_rows_avx512<R, C>(group, nb, cols, L, prefetch, out);
    dot_rows_avx2<R, C>(group, nb, cols, L, prefetch, out);
}

// dot_rows for a group of G = 1 .. kRows rows.
template <int C>
void dot_rows_of(int64_t G, const uint8_t* group, int64_t nb, const uint8_t* const* cols, const ActLayout& L,
                 bool prefetch, float* const* out) {
    switch (G) {
        case 8: return dot_rows<8, C>(group, nb, cols, L, prefetch, out);
        case 7: return dot_rows<7, C>(group, nb, cols, L, prefetch, out);
        case 6: return dot_rows<6, C>(group, nb, cols, L, prefetch, out);
        case 5: return dot_rows<5, C>(group, nb, cols, L, prefetch, out);
        case 4: return dot_rows<4, C>(group, nb, cols, L, prefetch, out);
        case 3: return dot_rows<3, C>(group, nb, cols, L, prefetch, out);
        case 2: return dot_rows<2, C>(group, nb, cols, L, prefetch, out);
        default: return dot_rows<1, C>(group, nb, cols, L, prefetch, out);
    }
}
static_assert(kRows == 8, "dot_rows_of's cases");

}  // namespace

void dot_group(int64_t G, const uint8_t* group, int64_t nb, const uint8_t* col, const ActLayout& L, bool prefetch,
               float* out) {
    dot_rows_of<1>(G, group, nb, &col, L, prefetch, &out);
}

void dot_group2(int64_t G, const uint8_t* group, int64_t nb, const uint8_t* col0, const uint8_t* col1,
                const ActLayout& L, bool prefetch, float* out0, float* out1) {
    const uint8_t* cols[2] = {col0, col1};
    float* out[2] = {out0, out1};
    dot_rows_of<2>(G, group, nb, cols, L, prefetch, out);
}
#endif

}  // namespace cbs::q4
