#include "cpu/q8_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "ggml.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "cpu/q8_block.h"
#define CBS_Q8_X86 1
#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma,f16c")))
#define AVX2_TARGET __attribute__((target("avx2,fma,f16c")))
#endif

namespace cbs {

namespace {
constexpr int64_t kBlock = 32;  // values per scale on both sides (Q4_0's and Q8_0's block)
constexpr int64_t kLanes = 16;  // weight rows per group: the int32 lanes of one vpdpbusd
constexpr int64_t kSteps = kBlock / 4;  // vpdpbusd steps a block: 4 values each
// A tile: 4 rows of A x 3 groups of B, 12 int32 and 12 f32 sums in registers (the int16
// products' shape, cpu/vnni_gemm.cpp; 28 of the 32 vector registers).
constexpr int64_t kTileRows = 4;
constexpr int64_t kTileGroups = 3;
}  // namespace

size_t I8Rows::bytes(int64_t m, int64_t k) {
    return static_cast<size_t>(m * k) + 2 * static_cast<size_t>(m * (k / kBlock)) * sizeof(float) + kCacheLine;
}

void I8Rows::view(void* storage, int64_t m, int64_t k) {
    m_ = m, k_ = k;
    values_ = static_cast<int8_t*>(align_to_line(storage));
    scales_ = reinterpret_cast<float*>(values_ + m * k);  // m * k is a multiple of 32: aligned for floats
    offsets_ = scales_ + m * (k / kBlock);
}

void I8Weight::reset(int64_t n, int64_t k) {
    n_ = n, k_ = k;
    const size_t values = static_cast<size_t>(groups() * kLanes * k), scales = static_cast<size_t>(groups() * kLanes * (k / kBlock));
    values_.resize(values);
    scales_.resize(scales);
    if (n % kLanes) {  // the last group's lanes past n: zero rows
        std::fill_n(values_.data(), values, uint8_t{0});
        std::fill(scales_.begin(), scales_.end(), 0.0f);
    }
}

#ifdef CBS_Q8_X86

namespace {

enum class Isa { none, avx2, avx512 };

// AVX-512 VNNI where the CPU has it, else AVX2 (with FMA and F16C); CBS_Q8_TILE=0 none,
// CBS_Q8_TILE=avx2 the AVX2 form on any CPU that has it (an AVX-512 machine's tests and benches).
Isa isa() {
    static const Isa chosen = [] {
        const char* env = std::getenv("CBS_Q8_TILE");
        if (env && std::strcmp(env, "0") == 0) return Isa::none;
        __builtin_cpu_init();
        const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
        const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
        if (env && std::strcmp(env, "avx2") == 0) return avx2 ? Isa::avx2 : Isa::none;
        return avx512 ? Isa::avx512 : avx2 ? Isa::avx2 : Isa::none;
    }();
    return chosen;
}

// Rows rounded as the decoding kernel rounds a column (cpu/q8_block.h); the offset kept as
// 8 * sum, its scale applied with the block's product.
template <Q8Block (*round)(const float*, int8_t*, int8_t*)>
inline void quantize_rows_with(const float* rows, int64_t ld, int64_t r0, int64_t r1, int64_t k, int8_t* values,
                               float* scales, float* offsets) {
    const int64_t blocks = k / kBlock;
    for (int64_t i = r0; i < r1; ++i)
        for (int64_t b = 0; b < blocks; ++b) {
            int8_t* v = values + i * k + b * kBlock;
            const Q8Block r = round(rows + i * ld + b * kBlock, v, v + 16);
            scales[i * blocks + b] = r.scale;
            offsets[i * blocks + b] = 8.0f * static_cast<float>(r.sum);
        }
}

VNNI_TARGET void quantize_rows(const float* rows, int64_t ld, int64_t r0, int64_t r1, int64_t k, int8_t* values,
                               float* scales, float* offsets) {
    quantize_rows_with<q8_block_avx512>(rows, ld, r0, r1, k, values, scales, offsets);
}

AVX2_TARGET void quantize_rows_avx2(const float* rows, int64_t ld, int64_t r0, int64_t r1, int64_t k, int8_t* values,
                                    float* scales, float* offsets) {
    quantize_rows_with<q8_block_avx2>(rows, ld, r0, r1, k, values, scales, offsets);
}

VNNI_TARGET inline __m512i broadcast4(const int8_t* p) {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

// C rows i0 .. i0+R-1, columns of groups g0 .. g0+G-1: per block, int32 sums of 8 vpdpbusd,
// less 8 x the activations' sum (the nibbles' offset), scaled by both blocks' scales into f32.
template <int R, int G>
VNNI_TARGET void tile(const I8Rows& a, int64_t i0, const I8Weight& w, int64_t g0, float* C, int64_t ldc) {
    const int64_t blocks = a.k() / kBlock;
    const int8_t* arow[R];
    const float *ascale[R], *aoff[R];
    for (int r = 0; r < R; ++r) arow[r] = a.values(i0 + r), ascale[r] = a.scales(i0 + r), aoff[r] = a.offsets(i0 + r);
    const uint8_t* wg[G];
    const float* wscale[G];
    for (int g = 0; g < G; ++g) wg[g] = w.group(g0 + g), wscale[g] = w.group_scales(g0 + g);
    __m512 sum[R][G];
    for (int r = 0; r < R; ++r)
        for (int g = 0; g < G; ++g) sum[r][g] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
        __m512i acc[R][G];
        for (int r = 0; r < R; ++r)
            for (int g = 0; g < G; ++g) acc[r][g] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int s = 0; s < kSteps; ++s) {
            __m512i wv[G];
            for (int g = 0; g < G; ++g) wv[g] = _mm512_load_si512(wg[g] + (b * kSteps + s) * 4 * kLanes);
            for (int r = 0; r < R; ++r) {
                const __m512i x = broadcast4(arow[r] + b * kBlock + 4 * s);
                for (int g = 0; g < G; ++g) acc[r][g] = _mm512_dpbusd_epi32(acc[r][g], wv[g], x);
            }
        }
        for (int g = 0; g < G; ++g) {
            const __m512 ws = _mm512_loadu_ps(wscale[g] + b * kLanes);
            for (int r = 0; r < R; ++r) {
                const __m512 dot = _mm512_sub_ps(_mm512_cvtepi32_ps(acc[r][g]), _mm512_set1_ps(aoff[r][b]));
                sum[r][g] = _mm512_fmadd_ps(dot, _mm512_mul_ps(ws, _mm512_set1_ps(ascale[r][b])), sum[r][g]);
            }
        }
    }
    for (int g = 0; g < G; ++g) {
        const int64_t j0 = (g0 + g) * kLanes, n = std::min<int64_t>(kLanes, w.rows() - j0);
        const __mmask16 mask = n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
        for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(C + (i0 + r) * ldc + j0, mask, sum[r][g]);
    }
}

// The same on AVX2 over half a group (8 weight rows, 32 bytes a step): vpmaddubsw for the
// products (pairs summed in int16), the 8 steps of a block summed in int16 (at most 8 * 2 * 15
// * 127 = 30480: no overflow), then vpmaddwd by ones into the block's int32 sums. R rows of A
// x 8 weight rows: 2R + 3 of the 16 registers.
template <int R>
AVX2_TARGET void tile_avx2(const I8Rows& a, int64_t i0, const I8Weight& w, int64_t g, int half, float* C, int64_t ldc) {
    const int64_t blocks = a.k() / kBlock;
    const uint8_t* wg = w.group(g) + half * 32;
    const float* wscale = w.group_scales(g) + half * 8;
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 sum[R];
    for (int r = 0; r < R; ++r) sum[r] = _mm256_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
        __m256i acc[R];
        for (int r = 0; r < R; ++r) acc[r] = _mm256_setzero_si256();
#pragma GCC unroll 8
        for (int s = 0; s < kSteps; ++s) {
            const __m256i wv = _mm256_load_si256(reinterpret_cast<const __m256i*>(wg + (b * kSteps + s) * 4 * kLanes));
            for (int r = 0; r < R; ++r) {
                int32_t x4;
                std::memcpy(&x4, a.values(i0 + r) + b * kBlock + 4 * s, sizeof x4);
                acc[r] = _mm256_add_epi16(acc[r], _mm256_maddubs_epi16(wv, _mm256_set1_epi32(x4)));
            }
        }
        const __m256 ws = _mm256_loadu_ps(wscale + b * kLanes);
        for (int r = 0; r < R; ++r) {
            const __m256 dot = _mm256_sub_ps(_mm256_cvtepi32_ps(_mm256_madd_epi16(acc[r], ones)),
                                             _mm256_set1_ps(a.offsets(i0 + r)[b]));
            sum[r] = _mm256_fmadd_ps(dot, _mm256_mul_ps(ws, _mm256_set1_ps(a.scales(i0 + r)[b])), sum[r]);
        }
    }
    const int64_t j0 = g * kLanes + half * 8, n = std::min<int64_t>(8, w.rows() - j0);
    if (n <= 0) return;
    for (int r = 0; r < R; ++r) {
        float* out = C + (i0 + r) * ldc + j0;
        if (n == 8) {
            _mm256_storeu_ps(out, sum[r]);
        } else {
            alignas(32) float tmp[8];
            _mm256_store_ps(tmp, sum[r]);
            std::memcpy(out, tmp, static_cast<size_t>(n) * sizeof(float));
        }
    }
}

// tile<R, G> (or tile_avx2<R>) for R in 1..4 (a template's arguments from the run-time R).
template <int G>
void tile_rows(int R, const I8Rows& a, int64_t i0, const I8Weight& w, int64_t g0, float* C, int64_t ldc) {
    switch (R) {
        case 4: return tile<4, G>(a, i0, w, g0, C, ldc);
        case 3: return tile<3, G>(a, i0, w, g0, C, ldc);
        case 2: return tile<2, G>(a, i0, w, g0, C, ldc);
        default: return tile<1, G>(a, i0, w, g0, C, ldc);
    }
}

void tile_rows_avx2(int R, const I8Rows& a, int64_t i0, const I8Weight& w, int64_t g, int half, float* C, int64_t ldc) {
    switch (R) {
        case 4: return tile_avx2<4>(a, i0, w, g, half, C, ldc);
        case 3: return tile_avx2<3>(a, i0, w, g, half, C, ldc);
        case 2: return tile_avx2<2>(a, i0, w, g, half, C, ldc);
        default: return tile_avx2<1>(a, i0, w, g, half, C, ldc);
    }
}

}  // namespace

bool int8_tile_available() { return isa() != Isa::none; }

const char* int8_tile_isa() { return isa() == Isa::avx512 ? "AVX-512 VNNI" : isa() == Isa::avx2 ? "AVX2" : ""; }

void I8Rows::quantize(const float* rows, int64_t ld, int64_t r0, int64_t r1) {
    if (isa() == Isa::avx512) quantize_rows(rows, ld, r0, r1, k_, values_, scales_, offsets_);
    else if (isa() == Isa::avx2) quantize_rows_avx2(rows, ld, r0, r1, k_, values_, scales_, offsets_);
}

void q8_gemm(const I8Rows& a, const I8Weight& w, float* C, int64_t ldc) {
    if (isa() == Isa::avx2) {
        for (int64_t g = 0; g < w.groups(); ++g)
            for (int half = 0; half < 2; ++half)
                for (int64_t i0 = 0; i0 < a.rows(); i0 += kTileRows)
                    tile_rows_avx2(static_cast<int>(std::min(kTileRows, a.rows() - i0)), a, i0, w, g, half, C, ldc);
        return;
    }
    if (isa() != Isa::avx512) return;
    for (int64_t g0 = 0; g0 < w.groups(); g0 += kTileGroups) {  // a piece of weight rows against all of A
        const int64_t G = std::min(kTileGroups, w.groups() - g0);
        for (int64_t i0 = 0; i0 < a.rows(); i0 += kTileRows) {
            const int R = static_cast<int>(std::min(kTileRows, a.rows() - i0));
            if (G == 3) tile_rows<3>(R, a, i0, w, g0, C, ldc);
            else if (G == 2) tile_rows<2>(R, a, i0, w, g0, C, ldc);
            else tile_rows<1>(R, a, i0, w, g0, C, ldc);
        }
    }
}

#else

bool int8_tile_available() { return false; }
const char* int8_tile_isa() { return ""; }
void I8Rows::quantize(const float*, int64_t, int64_t, int64_t) {}
void q8_gemm(const I8Rows&, const I8Weight&, float*, int64_t) {}

#endif

}  // namespace cbs
