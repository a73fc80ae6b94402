#include "cpu/vnni_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "ggml.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CBS_VNNI_X86 1
#define VNNI_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,fma")))
#define AVX2_TARGET __attribute__((target("avx2,fma")))
#define AVXVNNI_TARGET __attribute__((target("avx2,fma,avxvnni")))
#endif

namespace cbs {

namespace {
constexpr int64_t kBlock = 32;   // values per scale, on both sides (Q4_0's block)
constexpr int64_t kLanes = 16;   // weight rows per group: the int32 lanes of one vpdpwssd
// A tile on AVX-512: 4 rows of A x 3 groups of B, its 12 int32 and 12 f32 sums in registers
// (the fastest shape of those tried: docs/CPU.md).
constexpr int64_t kTileRows = 4;
constexpr int64_t kTileGroups = 3;
// On AVX2 (16 registers of 8 lanes, a group two of them): 4 rows x 1 group, 8 int32 sums (one
// thread, 768 x 512 x 1400: 43 / 46 G multiply-adds a second with AVX2 / AVX-VNNI, against 41 /
// 44 with 3 rows, 38 / 41 with 5, 32 / 45 with 6; OpenBLAS's sgemm 35: docs/CPU.md).
constexpr int64_t kTileRowsAvx2 = 4;
constexpr int64_t kTileGroupsAvx2 = 1;
}  // namespace

size_t I16Rows::bytes(int64_t m, int64_t k) {
    return static_cast<size_t>(m * k) * sizeof(int16_t) + static_cast<size_t>(m * (k / kBlock)) * sizeof(float) +
           kCacheLine;
}

void I16Rows::view(void* storage, int64_t m, int64_t k) {
    m_ = m, k_ = k;
    values_ = static_cast<int16_t*>(align_to_line(storage));  // rows of 64 k bytes: each on a line
    scales_ = reinterpret_cast<float*>(values_ + m * k);
}

void I16Rows::own(int64_t m, int64_t k) { view(own_.resize(bytes(m, k)), m, k); }

// The scale of 32 values with largest magnitude `mx` and Euclidean norm `norm`: the int16 stay
// within 32767 and, when bounded, their norm within kNormBound.
static float block_scale(float mx, float norm, bool bounded) {
    return bounded ? std::max(mx / 32767.0f, norm / kNormBound) : mx / 32767.0f;
}

void I16Weight::unpack_q4_0(const void* rows, size_t row_bytes, int64_t n, int64_t k) {
    n_ = n, k_ = k;
    const int64_t blocks = k / kBlock;
    std::fill_n(values_.resize(static_cast<size_t>(groups() * kLanes * k)), groups() * kLanes * k, int16_t{0});
    scales_.assign(static_cast<size_t>(groups() * kLanes * blocks), 0.0f);
    for (int64_t r = 0; r < n; ++r) {
        const auto* row = static_cast<const uint8_t*>(rows) + r * row_bytes;
        const int64_t lane = r % kLanes;
        int16_t* values = values_.data() + (r / kLanes) * kLanes * k;
        float* scales = scales_.data() + (r / kLanes) * kLanes * blocks;
        for (int64_t b = 0; b < blocks; ++b) {
            const uint8_t* block = row + b * (sizeof(ggml_fp16_t) + kBlock / 2);  // block_q4_0: d, then 16 bytes
            ggml_fp16_t d;
            std::memcpy(&d, block, sizeof d);
            scales[b * kLanes + lane] = ggml_fp16_to_fp32(d);
            // Pair p of the block holds values 2p, 2p+1: the low nibbles of qs[2p], qs[2p+1]
            // for p < 8, their high nibbles (values 16 + 2p', 17 + 2p') after.
            const uint8_t* qs = block + sizeof d;
            int16_t* pairs = values + b * kBlock * kLanes + lane * 2;
            for (int64_t p = 0; p < kBlock / 4; ++p) {
                pairs[p * 2 * kLanes] = static_cast<int16_t>((qs[2 * p] & 15) - 8);
                pairs[p * 2 * kLanes + 1] = static_cast<int16_t>((qs[2 * p + 1] & 15) - 8);
                pairs[(p + 8) * 2 * kLanes] = static_cast<int16_t>((qs[2 * p] >> 4) - 8);
                pairs[(p + 8) * 2 * kLanes + 1] = static_cast<int16_t>((qs[2 * p + 1] >> 4) - 8);
            }
        }
    }
}

#ifdef CBS_VNNI_X86

namespace {

enum class Isa { none, avx2, avxvnni, avx512 };

// AVX-512 VNNI where the CPU has it, else AVX2 with AVX-VNNI (Intel's cores since Alder Lake,
// AMD Zen 5), else AVX2 with FMA. CBS_VNNI=0 none; CBS_VNNI=avx2 or avxvnni that form on any
// CPU that has it (so that an AVX-512 machine's tests and benches cover them).
Isa isa() {
    static const Isa chosen = [] {
        const char* env = std::getenv("CBS_VNNI");
        if (env && std::strcmp(env, "0") == 0) return Isa::none;
        __builtin_cpu_init();
        const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                            __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
                            __builtin_cpu_supports("fma");
        const bool avxvnni = avx2 && __builtin_cpu_supports("avxvnni");
        if (env && std::strcmp(env, "avx2") == 0) return avx2 ? Isa::avx2 : Isa::none;
        if (env && std::strcmp(env, "avxvnni") == 0) return avxvnni ? Isa::avxvnni : Isa::none;
        return avx512 ? Isa::avx512 : avxvnni ? Isa::avxvnni : avx2 ? Isa::avx2 : Isa::none;
    }();
    return chosen;
}

// Where a group's pair p of block b starts (the 16 lanes' pairs of int16 of one vpdpwssd).
inline int64_t pair_at(int64_t b, int64_t p) { return (b * kBlock / 2 + p) * 2 * kLanes; }

// ---- AVX-512 VNNI ----------------------------------------------------------------------------

// Sixteen rows at a time, one vector per value of k (row r0 + lane in its lane; a gather where
// the rows are not adjacent): each block's per-lane max and norm, then pairs of k rounded and
// interleaved as the lanes of one vpdpwssd.
VNNI_TARGET void pack_avx512(const float* x0, int64_t k_stride, int64_t row_stride, int64_t n, int64_t k,
                             int64_t k_valid, int16_t* all_values, float* all_scales) {
    const int64_t blocks = k / kBlock;
    for (int64_t r0 = 0; r0 < n; r0 += kLanes) {
        const int64_t left = n - r0;
        const __mmask16 lanes = left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
        int16_t* values = all_values + r0 * k;
        float* scales = all_scales + r0 * blocks;
        const float* rows = x0 + r0 * row_stride;
        const __m512i offsets = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                   _mm512_set1_epi32(static_cast<int32_t>(row_stride)));
        for (int64_t b = 0; b < blocks; ++b) {
            __m512 x[kBlock];
            __m512 mx = _mm512_setzero_ps(), sq = _mm512_setzero_ps();
            for (int64_t i = 0; i < kBlock; ++i) {
                const int64_t kk = b * kBlock + i;
                x[i] = kk >= k_valid  ? _mm512_setzero_ps()
                       : row_stride == 1 ? _mm512_maskz_loadu_ps(lanes, rows + kk * k_stride)
                                         : _mm512_mask_i32gather_ps(_mm512_setzero_ps(), lanes, offsets, rows + kk * k_stride, 4);
                mx = _mm512_max_ps(mx, _mm512_abs_ps(x[i]));
                sq = _mm512_fmadd_ps(x[i], x[i], sq);
            }
            const __m512 scale = _mm512_max_ps(_mm512_div_ps(mx, _mm512_set1_ps(32767.0f)),
                                               _mm512_div_ps(_mm512_sqrt_ps(sq), _mm512_set1_ps(kNormBound)));
            _mm512_storeu_ps(scales + b * kLanes, scale);
            const __m512 inv = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(scale, _mm512_setzero_ps(), _CMP_GT_OQ),
                                                   _mm512_set1_ps(1.0f), scale);
            const __m512i low16 = _mm512_set1_epi32(0xFFFF);
            for (int64_t p = 0; p < kBlock / 2; ++p) {
                const __m512i even = _mm512_cvtps_epi32(_mm512_mul_ps(x[2 * p], inv));
                const __m512i odd = _mm512_cvtps_epi32(_mm512_mul_ps(x[2 * p + 1], inv));
                _mm512_storeu_si512(values + pair_at(b, p),
                                    _mm512_or_si512(_mm512_and_si512(even, low16), _mm512_slli_epi32(odd, 16)));
            }
        }
    }
}

VNNI_TARGET void quantize_avx512(const float* rows, int64_t ld, int64_t r0, int64_t r1, bool bounded, float multiplier,
                                 int64_t k, int16_t* all_values, float* all_scales) {
    const int64_t blocks = k / kBlock;
    for (int64_t i = r0; i < r1; ++i) {
        const float* x = rows + i * ld;
        int16_t* q = all_values + i * k;
        float* s = all_scales + i * blocks;
        for (int64_t b = 0; b < blocks; ++b) {
            const __m512 v0 = _mm512_loadu_ps(x + b * kBlock), v1 = _mm512_loadu_ps(x + b * kBlock + 16);
            const float mx = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
            const float norm = bounded ? std::sqrt(_mm512_reduce_add_ps(_mm512_fmadd_ps(v0, v0, _mm512_mul_ps(v1, v1)))) : 0.0f;
            const float scale = block_scale(mx, norm, bounded);
            const __m512 inv = _mm512_set1_ps(scale > 0.0f ? 1.0f / scale : 0.0f);
            s[b] = scale * multiplier;
            // Round to nearest (the default mode), saturate to int16 (|x * inv| <= 32767 anyway).
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kBlock),
                                _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(v0, inv))));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kBlock + 16),
                                _mm512_cvtsepi32_epi16(_mm512_cvtps_epi32(_mm512_mul_ps(v1, inv))));
        }
    }
}

VNNI_TARGET inline __m512i broadcast_pair(const int16_t* p) {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

// C rows i0 .. i0+R-1, columns of groups g0 .. g0+G-1: per block of 32 values of k, int32 sums
// of 16 vpdpwssd (the first a vpmaddwd), scaled by A's and B's block scales into f32 sums.
template <int R, int G>
VNNI_TARGET void tile_avx512(const I16Rows& a, int64_t i0, const I16Weight& w, int64_t g0, float* C, int64_t ldc) {
    const int64_t blocks = a.k() / kBlock;
    const int16_t* arow[R];
    const float* ascale[R];
    for (int r = 0; r < R; ++r) arow[r] = a.values(i0 + r), ascale[r] = a.scales(i0 + r);
    const int16_t* wg[G];
    const float* wscale[G];
    for (int g = 0; g < G; ++g) wg[g] = w.group(g0 + g), wscale[g] = w.group_scales(g0 + g);
    __m512 sum[R][G];
    for (int r = 0; r < R; ++r)
        for (int g = 0; g < G; ++g) sum[r][g] = _mm512_setzero_ps();
    for (int64_t b = 0; b < blocks; ++b) {
        __m512i acc[R][G];
#pragma GCC unroll 4
        for (int p = 0; p < kBlock / 2; ++p) {
            __m512i wv[G];
            for (int g = 0; g < G; ++g) wv[g] = _mm512_loadu_si512(wg[g] + pair_at(b, p));
            for (int r = 0; r < R; ++r) {
                const __m512i x = broadcast_pair(arow[r] + b * kBlock + 2 * p);
                for (int g = 0; g < G; ++g)
                    acc[r][g] = p == 0 ? _mm512_madd_epi16(x, wv[g]) : _mm512_dpwssd_epi32(acc[r][g], x, wv[g]);
            }
        }
        for (int g = 0; g < G; ++g) {
            const __m512 ws = _mm512_loadu_ps(wscale[g] + b * kLanes);
            for (int r = 0; r < R; ++r)
                sum[r][g] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc[r][g]), _mm512_mul_ps(ws, _mm512_set1_ps(ascale[r][b])),
                                            sum[r][g]);
        }
    }
    for (int g = 0; g < G; ++g) {
        const int64_t j0 = (g0 + g) * kLanes, n = std::min<int64_t>(kLanes, w.rows() - j0);
        const __mmask16 mask = n >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << n) - 1u);
        for (int r = 0; r < R; ++r) _mm512_mask_storeu_ps(C + (i0 + r) * ldc + j0, mask, sum[r][g]);
    }
}

// ---- AVX2 ------------------------------------------------------------------------------------
// The same layout and the same arithmetic, each 16-lane vector as two halves of 8 lanes, a
// vpdpwssd as vpmaddwd then vpaddd (both wrap in int32 as it does; vpmaddwd saturates only
// where both pairs are -32768, which the rounding never makes): the same bits as AVX-512.

// The sum of t_lo's and t_hi's 16 lanes in the order _mm512_reduce_add_ps (GCC) adds them.
AVX2_TARGET inline float reduce_add_as_avx512(__m256 t_lo, __m256 t_hi) {
    const __m256 t3 = _mm256_add_ps(t_hi, t_lo);
    const __m128 t6 = _mm_add_ps(_mm256_extractf128_ps(t3, 1), _mm256_castps256_ps128(t3));
    const __m128 t8 = _mm_add_ps(t6, _mm_shuffle_ps(t6, t6, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(t8) + _mm_cvtss_f32(_mm_shuffle_ps(t8, t8, _MM_SHUFFLE(1, 1, 1, 1)));
}

AVX2_TARGET inline __m256 abs_ps(__m256 v) { return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), v); }

AVX2_TARGET inline float reduce_max(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    m = _mm_max_ps(m, _mm_shuffle_ps(m, m, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtss_f32(_mm_max_ps(m, _mm_shuffle_ps(m, m, _MM_SHUFFLE(2, 3, 0, 1))));
}

// Lanes below `valid` (0..8) set, as maskload and gather read them.
AVX2_TARGET inline __m256i first_lanes(int64_t valid) {
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int32_t>(valid)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

AVX2_TARGET void pack_avx2(const float* x0, int64_t k_stride, int64_t row_stride, int64_t n, int64_t k, int64_t k_valid,
                           int16_t* all_values, float* all_scales) {
    const int64_t blocks = k / kBlock;
    const __m256i offsets = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                               _mm256_set1_epi32(static_cast<int32_t>(row_stride)));
    for (int64_t r0 = 0; r0 < (n + kLanes - 1) / kLanes * kLanes; r0 += 8) {  // each half of each group
        const int64_t g = r0 / kLanes, half = (r0 % kLanes) / 8;
        const __m256i lanes = first_lanes(std::clamp<int64_t>(n - r0, 0, 8));
        int16_t* values = all_values + g * kLanes * k + half * 16;
        float* scales = all_scales + g * kLanes * blocks + half * 8;
        const float* rows = x0 + std::min(r0, n) * row_stride;
        for (int64_t b = 0; b < blocks; ++b) {
            __m256 x[kBlock];
            __m256 mx = _mm256_setzero_ps(), sq = _mm256_setzero_ps();
            for (int64_t i = 0; i < kBlock; ++i) {
                const int64_t kk = b * kBlock + i;
                x[i] = kk >= k_valid || r0 >= n ? _mm256_setzero_ps()
                       : row_stride == 1        ? _mm256_maskload_ps(rows + kk * k_stride, lanes)
                                                : _mm256_mask_i32gather_ps(_mm256_setzero_ps(), rows + kk * k_stride, offsets,
                                                                           _mm256_castsi256_ps(lanes), 4);
                mx = _mm256_max_ps(mx, abs_ps(x[i]));
                sq = _mm256_fmadd_ps(x[i], x[i], sq);
            }
            const __m256 scale = _mm256_max_ps(_mm256_div_ps(mx, _mm256_set1_ps(32767.0f)),
                                               _mm256_div_ps(_mm256_sqrt_ps(sq), _mm256_set1_ps(kNormBound)));
            _mm256_storeu_ps(scales + b * kLanes, scale);
            const __m256 inv = _mm256_and_ps(_mm256_cmp_ps(scale, _mm256_setzero_ps(), _CMP_GT_OQ),
                                             _mm256_div_ps(_mm256_set1_ps(1.0f), scale));
            const __m256i low16 = _mm256_set1_epi32(0xFFFF);
            for (int64_t p = 0; p < kBlock / 2; ++p) {
                const __m256i even = _mm256_cvtps_epi32(_mm256_mul_ps(x[2 * p], inv));
                const __m256i odd = _mm256_cvtps_epi32(_mm256_mul_ps(x[2 * p + 1], inv));
                _mm256_storeu_si256(reinterpret_cast<__m256i*>(values + pair_at(b, p)),
                                    _mm256_or_si256(_mm256_and_si256(even, low16), _mm256_slli_epi32(odd, 16)));
            }
        }
    }
}

// 8 int32 of a and 8 of b rounded to 16 int16 in order, saturating (vpackssdw works per 128 bits).
AVX2_TARGET inline __m256i to_int16(__m256 a, __m256 b) {
    return _mm256_permute4x64_epi64(_mm256_packs_epi32(_mm256_cvtps_epi32(a), _mm256_cvtps_epi32(b)), 0xD8);
}

AVX2_TARGET void quantize_avx2(const float* rows, int64_t ld, int64_t r0, int64_t r1, bool bounded, float multiplier,
                               int64_t k, int16_t* all_values, float* all_scales) {
    const int64_t blocks = k / kBlock;
    for (int64_t i = r0; i < r1; ++i) {
        const float* x = rows + i * ld;
        int16_t* q = all_values + i * k;
        float* s = all_scales + i * blocks;
        for (int64_t b = 0; b < blocks; ++b) {
            const float* xb = x + b * kBlock;
            const __m256 v0 = _mm256_loadu_ps(xb), v1 = _mm256_loadu_ps(xb + 8), v2 = _mm256_loadu_ps(xb + 16),
                         v3 = _mm256_loadu_ps(xb + 24);
            const float mx = reduce_max(_mm256_max_ps(_mm256_max_ps(abs_ps(v0), abs_ps(v1)),
                                                      _mm256_max_ps(abs_ps(v2), abs_ps(v3))));
            // Lanes 0-7 and 8-15 of the AVX-512 form's v0*v0 + v1*v1 (its v1 is values 16-31).
            const float norm = bounded ? std::sqrt(reduce_add_as_avx512(_mm256_fmadd_ps(v0, v0, _mm256_mul_ps(v2, v2)),
                                                                        _mm256_fmadd_ps(v1, v1, _mm256_mul_ps(v3, v3))))
                                       : 0.0f;
            const float scale = block_scale(mx, norm, bounded);
            const __m256 inv = _mm256_set1_ps(scale > 0.0f ? 1.0f / scale : 0.0f);
            s[b] = scale * multiplier;
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kBlock), to_int16(_mm256_mul_ps(v0, inv), _mm256_mul_ps(v1, inv)));
            _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kBlock + 16),
                                to_int16(_mm256_mul_ps(v2, inv), _mm256_mul_ps(v3, inv)));
        }
    }
}

#define TILE_FN tile_avx2
#define TILE_TARGET AVX2_TARGET
#define TILE_STEP(acc, x, w) _mm256_add_epi32(acc, _mm256_madd_epi16(x, w))
#include "cpu/vnni_tile_avx2.inc"
#undef TILE_FN
#undef TILE_TARGET
#undef TILE_STEP

#define TILE_FN tile_avxvnni
#define TILE_TARGET AVXVNNI_TARGET
#define TILE_STEP(acc, x, w) _mm256_dpwssd_avx_epi32(acc, x, w)
#include "cpu/vnni_tile_avx2.inc"
#undef TILE_FN
#undef TILE_TARGET
#undef TILE_STEP

// Every tile of C = A B^T: rows of A by tile_rows, groups of B by tile_groups, `tile(R, i0, g0, G)`.
template <class Tile>
void for_each_tile(const I16Rows& a, const I16Weight& w, int64_t tile_rows, int64_t tile_groups, Tile&& tile) {
    for (int64_t i0 = 0; i0 < a.rows(); i0 += tile_rows) {
        const int R = static_cast<int>(std::min(tile_rows, a.rows() - i0));
        for (int64_t g0 = 0; g0 < w.groups(); g0 += tile_groups) tile(R, i0, g0, std::min(tile_groups, w.groups() - g0));
    }
}

// tile<R, G> for R in 1..4 (a template's arguments from the run-time R).
template <int G, class Tiles>
void with_rows(int R, Tiles&& tiles) {
    switch (R) {
        case 4: return tiles.template run<4, G>();
        case 3: return tiles.template run<3, G>();
        case 2: return tiles.template run<2, G>();
        default: return tiles.template run<1, G>();
    }
}

struct Avx512Tile {
    const I16Rows& a; int64_t i0; const I16Weight& w; int64_t g0; float* C; int64_t ldc;
    template <int R, int G> void run() { tile_avx512<R, G>(a, i0, w, g0, C, ldc); }
};
template <bool kVnni>
struct Avx2Tile {
    const I16Rows& a; int64_t i0; const I16Weight& w; int64_t g0; float* C; int64_t ldc;
    template <int R, int G> void run() {
        if constexpr (kVnni) tile_avxvnni<R, G>(a, i0, w, g0, C, ldc);
        else tile_avx2<R, G>(a, i0, w, g0, C, ldc);
    }
};

}  // namespace

void I16Weight::pack(const float* x0, int64_t k_stride, int64_t row_stride, int64_t n, int64_t k, int64_t k_valid) {
    n_ = n, k_ = k;
    values_.resize(static_cast<size_t>(groups() * kLanes * k));  // every value and scale written by the packers
    scales_.resize(static_cast<size_t>(groups() * kLanes * (k / kBlock)));
    if (isa() == Isa::avx512)
        pack_avx512(x0, k_stride, row_stride, n, k, k_valid, values_.data(), scales_.data());
    else if (isa() != Isa::none)
        pack_avx2(x0, k_stride, row_stride, n, k, k_valid, values_.data(), scales_.data());
}

void I16Rows::quantize(const float* rows, int64_t ld, int64_t r0, int64_t r1, bool bounded, float multiplier) {
    if (isa() == Isa::avx512)
        quantize_avx512(rows, ld, r0, r1, bounded, multiplier, k_, values_, scales_);
    else if (isa() != Isa::none)
        quantize_avx2(rows, ld, r0, r1, bounded, multiplier, k_, values_, scales_);
}

void vnni_gemm(const I16Rows& a, const I16Weight& w, float* C, int64_t ldc) {
    if (isa() == Isa::avx512) {
        for_each_tile(a, w, kTileRows, kTileGroups, [&](int R, int64_t i0, int64_t g0, int64_t G) {
            Avx512Tile t{a, i0, w, g0, C, ldc};
            if (G == 3) with_rows<3>(R, t);
            else if (G == 2) with_rows<2>(R, t);
            else with_rows<1>(R, t);
        });
    } else if (isa() == Isa::avxvnni) {
        for_each_tile(a, w, kTileRowsAvx2, kTileGroupsAvx2, [&](int R, int64_t i0, int64_t g0, int64_t) {
            Avx2Tile<true> t{a, i0, w, g0, C, ldc};
            with_rows<kTileGroupsAvx2>(R, t);
        });
    } else if (isa() == Isa::avx2) {
        for_each_tile(a, w, kTileRowsAvx2, kTileGroupsAvx2, [&](int R, int64_t i0, int64_t g0, int64_t) {
            Avx2Tile<false> t{a, i0, w, g0, C, ldc};
            with_rows<kTileGroupsAvx2>(R, t);
        });
    }
}

bool int16_products_available() { return isa() != Isa::none; }

const char* int16_products_isa() {
    switch (isa()) {
        case Isa::avx512: return "AVX-512 VNNI";
        case Isa::avxvnni: return "AVX-VNNI";
        case Isa::avx2: return "AVX2";
        default: return "";
    }
}

#else

void I16Rows::quantize(const float*, int64_t, int64_t, int64_t, bool, float) {}
void I16Weight::pack(const float*, int64_t, int64_t, int64_t, int64_t, int64_t) {}
void vnni_gemm(const I16Rows&, const I16Weight&, float*, int64_t) {}
bool int16_products_available() { return false; }
const char* int16_products_isa() { return ""; }

#endif

}  // namespace cbs
