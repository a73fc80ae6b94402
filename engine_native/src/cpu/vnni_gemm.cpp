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
#endif

namespace cbs {

namespace {
constexpr int64_t kBlock = 32;   // values per scale, on both sides (Q4_0's block)
constexpr int64_t kLanes = 16;   // weight rows per group: the int32 lanes of one vpdpwssd
// A tile: 4 rows of A x 3 groups of B, its 12 int32 and 12 f32 sums in registers (the
// fastest shape of those tried: docs/CPU.md).
constexpr int64_t kTileRows = 4;
constexpr int64_t kTileGroups = 3;
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

// Sixteen rows at a time, one vector per value of k (row r0 + lane in its lane; a gather where
// the rows are not adjacent): each block's per-lane max and norm, then pairs of k rounded and
// interleaved as the lanes of one vpdpwssd.
VNNI_TARGET void I16Weight::pack(const float* x0, int64_t k_stride, int64_t row_stride, int64_t n, int64_t k,
                                 int64_t k_valid) {
    n_ = n, k_ = k;
    const int64_t blocks = k / kBlock;
    values_.resize(static_cast<size_t>(groups() * kLanes * k));  // every value and scale written below
    scales_.resize(static_cast<size_t>(groups() * kLanes * blocks));
    for (int64_t g = 0; g < groups(); ++g) {
        const int64_t r0 = g * kLanes, left = n - r0;
        const __mmask16 lanes = left >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << left) - 1u);
        int16_t* values = values_.data() + g * kLanes * k;
        float* scales = scales_.data() + g * kLanes * blocks;
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
                _mm512_storeu_si512(values + (b * kBlock / 2 + p) * 2 * kLanes,
                                    _mm512_or_si512(_mm512_and_si512(even, low16), _mm512_slli_epi32(odd, 16)));
            }
        }
    }
}

VNNI_TARGET void I16Rows::quantize(const float* rows, int64_t ld, int64_t r0, int64_t r1, bool bounded,
                                    float multiplier) {
    const int64_t blocks = k_ / kBlock;
    for (int64_t i = r0; i < r1; ++i) {
        const float* x = rows + i * ld;
        int16_t* q = values_ + i * k_;
        float* s = scales_ + i * blocks;
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

namespace {

VNNI_TARGET inline __m512i broadcast_pair(const int16_t* p) {
    int32_t v;
    std::memcpy(&v, p, sizeof v);
    return _mm512_set1_epi32(v);
}

// C rows i0 .. i0+R-1, columns of groups g0 .. g0+G-1: per block of 32 values of k, int32 sums
// of 16 vpdpwssd (the first a vpmaddwd), scaled by A's and B's block scales into f32 sums.
template <int R, int G>
VNNI_TARGET void tile(const I16Rows& a, int64_t i0, const I16Weight& w, int64_t g0, float* C, int64_t ldc) {
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
#pragma GCC unroll 16
        for (int p = 0; p < kBlock / 2; ++p) {
            __m512i wv[G];
            for (int g = 0; g < G; ++g) wv[g] = _mm512_loadu_si512(wg[g] + (b * kBlock / 2 + p) * 2 * kLanes);
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

template <int G>
VNNI_TARGET void tile_rows(int R, const I16Rows& a, int64_t i0, const I16Weight& w, int64_t g0, float* C, int64_t ldc) {
    switch (R) {
        case 4: return tile<4, G>(a, i0, w, g0, C, ldc);
        case 3: return tile<3, G>(a, i0, w, g0, C, ldc);
        case 2: return tile<2, G>(a, i0, w, g0, C, ldc);
        default: return tile<1, G>(a, i0, w, g0, C, ldc);
    }
}

}  // namespace

void vnni_gemm(const I16Rows& a, const I16Weight& w, float* C, int64_t ldc) {
    for (int64_t i0 = 0; i0 < a.rows(); i0 += kTileRows) {
        const int R = static_cast<int>(std::min(kTileRows, a.rows() - i0));
        for (int64_t g0 = 0; g0 < w.groups(); g0 += kTileGroups) {
            const int64_t G = std::min(kTileGroups, w.groups() - g0);
            if (G == 3)
                tile_rows<3>(R, a, i0, w, g0, C, ldc);
            else if (G == 2)
                tile_rows<2>(R, a, i0, w, g0, C, ldc);
            else
                tile_rows<1>(R, a, i0, w, g0, C, ldc);
        }
    }
}

bool vnni_available() {
    static const bool ok = [] {
        const char* env = std::getenv("CBS_VNNI");
        if (env && std::strcmp(env, "0") == 0) return false;
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
               __builtin_cpu_supports("fma");
    }();
    return ok;
}

#else

void I16Rows::quantize(const float*, int64_t, int64_t, int64_t, bool, float) {}
void I16Weight::pack(const float*, int64_t, int64_t, int64_t, int64_t, int64_t) {}
void vnni_gemm(const I16Rows&, const I16Weight&, float*, int64_t) {}
bool vnni_available() { return false; }

#endif

}  // namespace cbs
