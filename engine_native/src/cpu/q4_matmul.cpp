#include "cpu/q4_matmul.h"
#include "cpu/q8_gemm.h"

#include "cpu/avx2_reduce.h"
#include "cpu/q8_block.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_set>
#include <vector>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define CBS_Q4_X86 1
#endif

namespace cbs {

namespace {

constexpr int64_t kBlock = 32;    // values per Q4_0 / Q8_0 block
constexpr int64_t kChunk = 16;    // blocks per step of the kernel (one zmm of scales)
constexpr int64_t kGroup = 4;     // blocks per 64-byte load of weights
constexpr int64_t kRows = 8;      // rows interleaved in one stream (the last group: the rest)
// Bytes ahead of the weight stream, prefetched into L2 (not L1: L1 prefetches hold the few
// fill buffers a core has); 12 K was the best distance measured (docs/CPU.md).
constexpr int kPrefetch = 12288;
constexpr int64_t kOwnQuantizeColumns = 4;  // up to this many columns each thread quantises itself

struct BlockQ4 {  // ggml's block_q4_0
    ggml_fp16_t d;
    uint8_t qs[kBlock / 2];
};
static_assert(sizeof(BlockQ4) == 18, "block_q4_0 is 18 bytes");

// Where row r's block b lies in the packed layout (q4_matmul.h): rows in groups of kRows
// (the last group: the rest), a group's blocks in chunks of kChunk (the last: the rest),
// a chunk first the group's fp16 scales [G][n], then its nibbles in quads of up to kGroup
// blocks, [G][q * 16] bytes each. A group is then one stream the kernel reads in order.
struct PackedBlock {
    int64_t scale, nibbles;  // byte offsets in the tensor's data
    PackedBlock(int64_t N, int64_t nb, int64_t r, int64_t b) {
        const int64_t g0 = r - r % kRows, G = std::min(kRows, N - g0), i = r - g0;
        const int64_t b0 = b - b % kChunk, n = std::min(kChunk, nb - b0), j = b - b0;
        const int64_t p = j - j % kGroup, q = std::min(kGroup, n - p);
        const int64_t chunk = (g0 * nb + G * b0) * 18;
        scale = chunk + (i * n + j) * 2;
        nibbles = chunk + G * n * 2 + G * p * 16 + i * q * 16 + (j - p) * 16;
    }
};

// One column of quantised activations: kChunk-padded blocks, values grouped by kGroup = 4
// blocks b .. b+3 to match one 64-byte load of their weights, whose low nibbles are values
// 0-15 and high nibbles 16-31 of each block: [b 0-15 | .. | b+3 0-15][b 16-31 | .. | b+3 16-31];
// then each block's scale and 8 * scale * sum(q) (the Q4_0 offset: sum (n - 8) q = sum n q - 8 sum q).
struct ActLayout {
    int64_t blocks, padded, bytes;
    explicit ActLayout(int64_t K)
        : blocks(K / kBlock), padded((K / kBlock + kChunk - 1) / kChunk * kChunk), bytes(padded * (kBlock + 8)) {}
    int8_t* values(uint8_t* col) const { return reinterpret_cast<int8_t*>(col); }
    float* scales(uint8_t* col) const { return reinterpret_cast<float*>(col + padded * kBlock); }
    float* offsets(uint8_t* col) const { return scales(col) + padded; }
    const int8_t* values(const uint8_t* col) const { return reinterpret_cast<const int8_t*>(col); }
    const float* scales(const uint8_t* col) const { return reinterpret_cast<const float*>(col + padded * kBlock); }
    const float* offsets(const uint8_t* col) const { return scales(col) + padded; }
};

std::mutex g_mutex;
std::unordered_set<const ggml_tensor*>& packed_set() {
    static std::unordered_set<const ggml_tensor*> s;
    return s;
}

// Block b's scale and Q4_0 offset (8 * scale * the sum of its 8-bit values).
inline void block_scales(const ActLayout& L, uint8_t* col, int64_t b, Q8Block r) {
    L.scales(col)[b] = r.scale;
    L.offsets(col)[b] = 8.0f * static_cast<float>(r.sum) * r.scale;
}

// Where block b's values 0-15 go in a column (its values 16-31 follow 64 bytes later).
inline int8_t* block_values(int8_t* q, int64_t b) { return q + (b & ~(kGroup - 1)) * kBlock + (b & (kGroup - 1)) * 16; }

// One column of K floats quantised (ggml's Q8_0 rule) into `col` (ActLayout's bytes): the
// kernels' vector forms of the scalar rule at the #else below (the same products and
// round-to-nearest-even conversions: the same bytes; a decoding step quantises ~170 K values
// per thread, too many for the scalar loop).
#ifdef CBS_Q4_X86
#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))
#define AVX2_TARGET __attribute__((target("avx2,f16c,fma")))

// The AVX-512 kernel where the CPU has AVX-512 F/BW/VL/VNNI; else the AVX2 one (8-lane
// vectors, maddubs for dpbusd) over the same packed layout. CBS_Q4_KERNEL=avx2 takes the
// AVX2 one anyway (so that an AVX-512 machine's tests cover it too).
bool use_avx512() {
    static const bool yes = [] {
        const char* v = std::getenv("CBS_Q4_KERNEL");
        if (v && std::strcmp(v, "avx2") == 0) return false;
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    }();
    return yes;
}

AVX512_TARGET void quantize_column_avx512(const float* in, uint8_t* col, const ActLayout& L) {
    int8_t* q = L.values(col);
    std::memset(col, 0, static_cast<size_t>(L.bytes));
    for (int64_t b = 0; b < L.blocks; ++b) {
        int8_t* v = block_values(q, b);
        const Q8Block r = q8_block_avx512(in + b * kBlock, v, v + 64);
        block_scales(L, col, b, r);
    }
}

AVX2_TARGET void quantize_column_avx2(const float* in, uint8_t* col, const ActLayout& L) {
    int8_t* q = L.values(col);
    std::memset(col, 0, static_cast<size_t>(L.bytes));
    for (int64_t b = 0; b < L.blocks; ++b) {
        int8_t* v = block_values(q, b);
        const Q8Block r = q8_block_avx2(in + b * kBlock, v, v + 64);
        block_scales(L, col, b, r);
    }
}

void quantize_column(const float* in, uint8_t* col, const ActLayout& L) {
    if (use_avx512()) return quantize_column_avx512(in, col, L);
    quantize_column_avx2(in, col, L);
}
#else
void quantize_column(const float* in, uint8_t* col, const ActLayout& L) {
    int8_t* q = L.values(col);
    std::memset(col, 0, static_cast<size_t>(L.bytes));
    for (int64_t b = 0; b < L.blocks; ++b) {
        const float* v = in + b * kBlock;
        float amax = 0.0f;
        for (int64_t j = 0; j < kBlock; ++j) amax = std::max(amax, std::fabs(v[j]));
        const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
        int8_t* out = block_values(q, b);
        int sum = 0;
        for (int64_t j = 0; j < kBlock; ++j) {
            const int v8 = static_cast<int>(std::nearbyint(v[j] * id));
            out[(j < 16 ? 0 : 64) + (j & 15)] = static_cast<int8_t>(v8);
            sum += v8;
        }
        block_scales(L, col, b, {q8_scale(amax), sum});
    }
}

#endif

const float* column(const ggml_tensor* x, int64_t c) {
    return reinterpret_cast<const float*>(static_cast<const char*>(x->data) + c * x->nb[1]);
}

// Quantises x's columns into dst's columns, split over the threads.
void quantize_columns(ggml_tensor* dst, int ith, int nth, void*) {
    const ggml_tensor* x = dst->src[0];
    const ActLayout L(x->ne[0]);
    for (int64_t c = ith; c < x->ne[1]; c += nth) quantize_column(column(x, c), static_cast<uint8_t*>(dst->data) + c * dst->nb[1], L);
}

#ifdef CBS_Q4_X86
// A group of R packed rows (nb blocks each, from its first byte) times one activation
// column: out[i] = sum over blocks of dw * da * (sum n q) - dw * offset. Each step loads
// 64 bytes (4 blocks) of a row: its low nibbles and its high nibbles go through one dpbusd
// each into the same lanes (lanes 4j .. 4j+3: block j), then one conversion, one scaled add.
template <int R>
AVX512_TARGET void dot_rows_avx512(
    const uint8_t* group, int64_t nb, const uint8_t* col, const ActLayout& L, bool prefetch, float* out) {
    const int8_t* a = L.values(col);
    const float *da = L.scales(col), *off = L.offsets(col);
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i quad_idx = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    __m512 acc[R], offs[R];
    for (int i = 0; i < R; ++i) acc[i] = offs[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += kChunk) {
        const int64_t n = std::min(kChunk, nb - b);
        const uint8_t* chunk = group + R * b * 18;
        const auto* dw = reinterpret_cast<const ggml_fp16_t*>(chunk);
        if (prefetch)
            for (int64_t o = 0; o < R * n * 2; o += 64) _mm_prefetch(reinterpret_cast<const char*>(chunk) + kPrefetch + o, _MM_HINT_T1);
        const __mmask16 m = static_cast<__mmask16>((1u << n) - 1u);
        const __m512 sa = _mm512_loadu_ps(da + b), so = _mm512_loadu_ps(off + b);
        __m512 scale[R];
        for (int i = 0; i < R; ++i) {
            const __m512 w = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, dw + i * n));
            scale[i] = _mm512_mul_ps(w, sa);
            offs[i] = _mm512_fmadd_ps(w, so, offs[i]);
        }
        const uint8_t* nibbles = chunk + R * n * 2;
        for (int64_t p = 0; p < n; p += kGroup) {
            const __m512i lo = _mm512_loadu_si512(a + (b + p) * kBlock), hi = _mm512_loadu_si512(a + (b + p) * kBlock + 64);
            const __m512i idx = _mm512_add_epi32(quad_idx, _mm512_set1_epi32(static_cast<int>(p)));
            const int64_t q = std::min(kGroup, n - p);  // blocks in this quad (under 4 at a row's end)
            const __mmask64 bytes = q == kGroup ? ~__mmask64(0) : (__mmask64(1) << (q * 16)) - 1;
            const uint8_t* quad = nibbles + R * p * 16;
            for (int i = 0; i < R; ++i) {
                const uint8_t* src = quad + i * q * 16;
                if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(src) + kPrefetch, _MM_HINT_T1);
                const __m512i x = q == kGroup ? _mm512_loadu_si512(src) : _mm512_maskz_loadu_epi8(bytes, src);
                const __m512i dot = _mm512_dpbusd_epi32(
                    _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_and_si512(x, low4), lo),
                    _mm512_and_si512(_mm512_srli_epi16(x, 4), low4), hi);
                acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(idx, scale[i]), acc[i]);
            }
        }
    }
    for (int i = 0; i < R; ++i) out[i] = _mm512_reduce_add_ps(acc[i]) - _mm512_reduce_add_ps(offs[i]);
}

// The same product on AVX2: 32 bytes (2 blocks) of a row a step, maddubs (unsigned nibbles
// times signed activations, pairs summed in int16: at most 2 * 15 * 127 a pair, two pairs
// 7620, no saturation) for the low and the high nibbles, their sum widened by madd into
// lanes 4j .. 4j+3 for block j, then one conversion and one scaled add. With 16 registers
// a chunk goes row by row (its ~2 KB stay in L1), the rows' sums kept in memory between
// chunks. A chunk's scales are read through a zeroed copy where it is under 16 blocks (a
// row group's last): AVX2 has no 16-bit masked load, and the bytes after them are nibbles.
template <int R>
AVX2_TARGET void dot_rows_avx2(const uint8_t* group, int64_t nb, const uint8_t* col, const ActLayout& L,
                               bool prefetch, float* out) {
    const int8_t* a = L.values(col);
    const float *da = L.scales(col), *off = L.offsets(col);
    const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
    // The lanes of blocks k, k + 1 (k = 0, 2, 4, 6 within 8 scales): a table, not built per step.
    const __m256i pair_lanes[4] = {_mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1), _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3),
                                   _mm256_setr_epi32(4, 4, 4, 4, 5, 5, 5, 5), _mm256_setr_epi32(6, 6, 6, 6, 7, 7, 7, 7)};
    __m256 acc[R];
    for (int i = 0; i < R; ++i) acc[i] = _mm256_setzero_ps();
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
        const __m256 sa0 = _mm256_loadu_ps(da + b), sa1 = _mm256_loadu_ps(da + b + 8);
        const __m256 so0 = _mm256_loadu_ps(off + b), so1 = _mm256_loadu_ps(off + b + 8);
        const uint8_t* nibbles = chunk + R * n * 2;
        for (int i = 0; i < R; ++i) {
            const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dw + i * dw_stride)));
            const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(dw + i * dw_stride + 8)));
            const __m256 scale[2] = {_mm256_mul_ps(w0, sa0), _mm256_mul_ps(w1, sa1)};
            __m256 sum = _mm256_fnmadd_ps(w0, so0, acc[i]);
            sum = _mm256_fnmadd_ps(w1, so1, sum);
            for (int64_t p = 0; p < n; p += kGroup) {
                const int64_t q = std::min(kGroup, n - p);  // blocks in this quad (under 4 at a row's end)
                const uint8_t* src = nibbles + R * p * 16 + i * q * 16;
                for (int64_t h = 0; h < q; h += 2) {  // blocks p + h, p + h + 1
                    const int64_t j = p + h;
                    const __m256i x = q - h >= 2 ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + h * 16))
                                                 : _mm256_zextsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + h * 16)));
                    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + (b + p) * kBlock + h * 16));
                    const __m256i hi = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + (b + p) * kBlock + 64 + h * 16));
                    const __m256i pairs = _mm256_add_epi16(
                        _mm256_maddubs_epi16(_mm256_and_si256(x, low4), lo),
                        _mm256_maddubs_epi16(_mm256_and_si256(_mm256_srli_epi16(x, 4), low4), hi));
                    const __m256i dot = _mm256_madd_epi16(pairs, ones);
                    sum = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot),
                                          _mm256_permutevar8x32_ps(scale[j >> 3], pair_lanes[(j & 7) >> 1]), sum);
                }
            }
            acc[i] = sum;
        }
    }
    for (int i = 0; i < R; ++i) out[i] = hsum8(acc[i]);
}

// A row group of G = 1 .. kRows rows times one column, through the CPU's kernel.
template <int R>
void dot_rows(const uint8_t* group, int64_t nb, const uint8_t* col, const ActLayout& L, bool prefetch, float* out) {
    if (use_avx512()) return dot_rows_avx512<R>(group, nb, col, L, prefetch, out);
    dot_rows_avx2<R>(group, nb, col, L, prefetch, out);
}

// dot_rows for a group of G = 1 .. kRows rows.
void dot_group(int64_t G, const uint8_t* group, int64_t nb, const uint8_t* col, const ActLayout& L, bool prefetch,
               float* out) {
    switch (G) {
        case 8: return dot_rows<8>(group, nb, col, L, prefetch, out);
        case 7: return dot_rows<7>(group, nb, col, L, prefetch, out);
        case 6: return dot_rows<6>(group, nb, col, L, prefetch, out);
        case 5: return dot_rows<5>(group, nb, col, L, prefetch, out);
        case 4: return dot_rows<4>(group, nb, col, L, prefetch, out);
        case 3: return dot_rows<3>(group, nb, col, L, prefetch, out);
        case 2: return dot_rows<2>(group, nb, col, L, prefetch, out);
        default: return dot_rows<1>(group, nb, col, L, prefetch, out);
    }
}
static_assert(kRows == 8, "dot_group's cases");

// y = rows r0 .. r1-1 (r0 the first row of a group) of packed w [K, N] times the quantised
// columns cols[0 .. M-1] (stride col_stride), column c's rows at y + c * y_stride: a group's
// weights reused over the columns while they are in the cache.
void product_rows(const ggml_tensor* w, const uint8_t* cols, int64_t M, size_t col_stride, int64_t r0, int64_t r1,
                  float* y, int64_t y_stride) {
    const int64_t K = w->ne[0], N = w->ne[1], nb = K / kBlock;
    const ActLayout L(K);
    const auto* data = static_cast<const uint8_t*>(w->data);
    for (int64_t r = r0; r < r1; r += kRows) {
        const int64_t G = std::min(kRows, N - r);
        for (int64_t c = 0; c < M; ++c)
            dot_group(G, data + r * nb * 18, nb, cols + c * col_stride, L, c == 0, y + c * y_stride + (r - r0));
    }
}

// dst [N, M] = w [K, N] (packed) x activations (quantize_columns' output), rows split over
// the threads, columns in blocks that stay in the cache while a group's weights are reused.
void packed_product(ggml_tensor* dst, int ith, int nth, void*) {
    const ggml_tensor *w = dst->src[0], *act = dst->src[1];
    const int64_t K = w->ne[0], N = w->ne[1], M = act->ne[1];
    const ActLayout L(K);
    // A few f32 columns (a decoding step): every thread quantises them itself, which costs
    // less than the graph node and the barrier a separate quantisation would take.
    thread_local std::vector<uint8_t> own;
    const uint8_t* act_data = static_cast<const uint8_t*>(act->data);
    size_t col_stride = act->nb[1];
    if (act->type == GGML_TYPE_F32) {
        own.resize(static_cast<size_t>(M * L.bytes));
        for (int64_t c = 0; c < M; ++c) quantize_column(column(act, c), own.data() + c * L.bytes, L);
        act_data = own.data();
        col_stride = static_cast<size_t>(L.bytes);
    }
    int64_t r0, r1;
    q4_thread_rows(N, ith, nth, r0, r1);
    const int64_t cols_per_block = std::max<int64_t>(1, (256 << 10) / L.bytes);
    const int64_t y_stride = static_cast<int64_t>(dst->nb[1] / sizeof(float));
    for (int64_t c0 = 0; c0 < M; c0 += cols_per_block)
        product_rows(w, act_data + c0 * col_stride, std::min(M, c0 + cols_per_block) - c0, col_stride, r0, r1,
                     static_cast<float*>(dst->data) + c0 * y_stride + r0, y_stride);
}
#endif

}  // namespace

bool q4_packed_available() {
#ifdef CBS_Q4_X86
    static const bool yes = [] {
        const char* v = std::getenv("CBS_Q4_MATMUL");
        if (v && std::strcmp(v, "0") == 0) return false;
        return cpu_has_avx2_fma_f16c();
    }();
    return yes;
#else
    return false;
#endif
}

const char* q4_kernel_isa() {
    if (!q4_packed_available()) return "";
#ifdef CBS_Q4_X86
    return use_avx512() ? "AVX-512 VNNI" : "AVX2";
#else
    return "";
#endif
}

void q4_pack(const void* src, void* dst, int64_t n_rows, int64_t K) {
    const int64_t nb = K / kBlock;
    const auto* in = static_cast<const BlockQ4*>(src);
    auto* out = static_cast<uint8_t*>(dst);
    for (int64_t r = 0; r < n_rows; ++r)
        for (int64_t b = 0; b < nb; ++b) {
            const PackedBlock at(n_rows, nb, r, b);
            const BlockQ4& blk = in[r * nb + b];
            std::memcpy(out + at.scale, &blk.d, sizeof(blk.d));
            std::memcpy(out + at.nibbles, blk.qs, sizeof(blk.qs));
        }
}

// A row of Q4_0 blocks as f32, the same arithmetic as ggml's dequantize_row_q4_0 (low nibbles
// first, (q - 8) * d, exact in f32), whichever layout holds the blocks: `at(b)` gives block b's
// fp16 scale and 16 bytes of nibbles. One vector step a block where the CPU has AVX2 or AVX-512
// (GCC leaves the plain loop scalar, and T3's packed weights are converted for the AMX products
// on every prompt: docs/CPU_STAGES.md).
struct BlockAt {
    ggml_fp16_t d;
    const uint8_t* qs;
};

template <class At>
static void row_to_f32_scalar(const At& at, int64_t nb, float* out) {
    for (int64_t b = 0; b < nb; ++b, out += kBlock) {
        const BlockAt blk = at(b);
        const float d = ggml_fp16_to_fp32(blk.d);
        for (int j = 0; j < 16; ++j) {
            out[j] = static_cast<float>((blk.qs[j] & 0x0F) - 8) * d;
            out[j + 16] = static_cast<float>((blk.qs[j] >> 4) - 8) * d;
        }
    }
}

#ifdef CBS_Q4_X86
template <class At>
__attribute__((target("avx512f,f16c"))) static void row_to_f32_avx512(const At& at, int64_t nb, float* out) {
    const __m128i low = _mm_set1_epi8(0x0F);
    const __m512i eight = _mm512_set1_epi32(8);
    for (int64_t b = 0; b < nb; ++b, out += kBlock) {
        const BlockAt blk = at(b);
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(blk.d));
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs));
        const __m512i lo = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(q, low)), eight);
        const __m512i hi = _mm512_sub_epi32(_mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), low)), eight);
        _mm512_storeu_ps(out, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d));
        _mm512_storeu_ps(out + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d));
    }
}

template <class At>
__attribute__((target("avx2,f16c"))) static void row_to_f32_avx2(const At& at, int64_t nb, float* out) {
    const __m128i low = _mm_set1_epi8(0x0F);
    const __m256i eight = _mm256_set1_epi32(8);
    for (int64_t b = 0; b < nb; ++b, out += kBlock) {
        const BlockAt blk = at(b);
        const __m256 d = _mm256_set1_ps(_cvtsh_ss(blk.d));
        const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs));
        const __m128i nib[2] = {_mm_and_si128(q, low), _mm_and_si128(_mm_srli_epi16(q, 4), low)};
        for (int h = 0; h < 2; ++h)
            for (int e = 0; e < 2; ++e) {
                const __m256i v = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_srli_si128(nib[h], 8 * e)), eight);
                _mm256_storeu_ps(out + 16 * h + 8 * e, _mm256_mul_ps(_mm256_cvtepi32_ps(v), d));
            }
    }
}
#endif

template <class At>
static void row_to_f32(const At& at, int64_t nb, float* out) {
#ifdef CBS_Q4_X86
    static const int form = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("f16c") ? 2
                            : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")  ? 1
                                                                                                : 0;
    if (form == 2) return row_to_f32_avx512(at, nb, out);
    if (form == 1) return row_to_f32_avx2(at, nb, out);
#endif
    row_to_f32_scalar(at, nb, out);
}

// Row r's block b of a Q4_0 weight, in T3's packed layout or ggml's own.
template <bool kPacked>
static BlockAt block_at(const ggml_tensor* w, int64_t r, int64_t b) {
    const auto* data = static_cast<const uint8_t*>(w->data);
    if (!kPacked) {
        const auto* blk = reinterpret_cast<const BlockQ4*>(data + r * w->nb[1]) + b;
        return {blk->d, blk->qs};
    }
    const PackedBlock at(w->ne[1], w->ne[0] / kBlock, r, b);
    ggml_fp16_t d;
    std::memcpy(&d, data + at.scale, sizeof(d));
    return {d, data + at.nibbles};
}

template <bool kPacked>
static void rows_to_f32(const ggml_tensor* w, int64_t r0, int64_t n, float* out) {
    const int64_t K = w->ne[0];
    for (int64_t r = r0; r < r0 + n; ++r, out += K)
        row_to_f32([w, r](int64_t b) { return block_at<kPacked>(w, r, b); }, K / kBlock, out);
}

template <bool kPacked>
static void one_block_to_f32(const void* w, int64_t r, int64_t b, float* out) {
    row_to_f32([w, r, b](int64_t) { return block_at<kPacked>(static_cast<const ggml_tensor*>(w), r, b); }, 1, out);
}

void q4_unpack_rows(const ggml_tensor* w, int64_t r0, int64_t n, float* out) { rows_to_f32<true>(w, r0, n, out); }

// The layout's stream in order (PackedBlock's arithmetic, group by group and chunk by chunk),
// not block_at's arithmetic per block: a long prompt unpacks every weight (docs/CPU_STAGES.md).
#ifdef CBS_Q4_X86
AVX2_TARGET static void unpack_rows_i8(const ggml_tensor* w, int64_t r0, int64_t n, I8Weight& out) {
    const int64_t N = w->ne[1], nb = w->ne[0] / kBlock;
    const auto* data = static_cast<const uint8_t*>(w->data);
    out.reset(n, w->ne[0]);
    for (int64_t g0 = r0; g0 < r0 + n; g0 += kRows) {
        const int64_t G = std::min(kRows, N - g0), rows = std::min(G, r0 + n - g0);
        for (int64_t b0 = 0; b0 < nb; b0 += kChunk) {
            const int64_t c = std::min(kChunk, nb - b0);
            const uint8_t* chunk = data + (g0 * nb + G * b0) * 18;
            const auto* scales = reinterpret_cast<const ggml_fp16_t*>(chunk);
            const uint8_t* nibbles = chunk + G * c * 2;
            for (int64_t p = 0; p < c; p += kGroup) {
                const int64_t q = std::min(kGroup, c - p);
                for (int64_t i = 0; i < rows; ++i)
                    for (int64_t j = p; j < p + q; ++j)
                        out.set_block(g0 + i - r0, b0 + j, _cvtsh_ss(scales[i * c + j]),
                                      nibbles + G * p * 16 + i * q * 16 + (j - p) * 16);
            }
        }
    }
}

void q4_unpack_rows_i8(const ggml_tensor* w, int64_t r0, int64_t n, I8Weight& out) {
    if (int8_tile_available()) unpack_rows_i8(w, r0, n, out);
}
#else
void q4_unpack_rows_i8(const ggml_tensor*, int64_t, int64_t, I8Weight&) {}
#endif

void q4_0_rows_to_f32(const ggml_tensor* w, int64_t r0, int64_t n, float* out) { rows_to_f32<false>(w, r0, n, out); }

Q4BlockToF32 q4_block_to_f32(const ggml_tensor* w) {
    if (w->type != GGML_TYPE_Q4_0) return nullptr;
    return q4_is_packed(w) ? one_block_to_f32<true> : one_block_to_f32<false>;
}

void q4_mark_packed(const ggml_tensor* t, bool packed) {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (packed)
        packed_set().insert(t);
    else
        packed_set().erase(t);
}

bool q4_is_packed(const ggml_tensor* t) {
    std::lock_guard<std::mutex> lock(g_mutex);
    return packed_set().count(t) != 0;
}

size_t q4_column_bytes(int64_t K) { return static_cast<size_t>(ActLayout(K).bytes); }

void q4_quantize_column(const float* x, int64_t K, uint8_t* col) { quantize_column(x, col, ActLayout(K)); }

void q4_thread_rows(int64_t N, int ith, int nth, int64_t& r0, int64_t& r1) {
    const int64_t per = ((N + nth - 1) / nth + kRows - 1) / kRows * kRows;
    r0 = std::min(N, ith * per);
    r1 = std::min(N, r0 + per);
}

void q4_product_rows(const ggml_tensor* w, const uint8_t* cols, int64_t M, size_t col_stride, int64_t r0, int64_t r1,
                     float* y, int64_t y_stride) {
#ifdef CBS_Q4_X86
    product_rows(w, cols, M, col_stride, r0, r1, y, y_stride);
#else
    (void)cols, (void)M, (void)col_stride, (void)r0, (void)r1, (void)y, (void)y_stride;
    GGML_ABORT("q4_product_rows on a CPU without the kernel (%s)", ggml_get_name(w));
#endif
}

ggml_tensor* q4_matmul(ggml_context* ctx, ggml_tensor* w, ggml_tensor* x) {
#ifdef CBS_Q4_X86
    const int64_t K = w->ne[0], N = w->ne[1];
    // The kernel takes 2-D activations with contiguous columns.
    ggml_tensor* x2 = ggml_is_contiguous(x) ? x : ggml_cont(ctx, x);
    x2 = ggml_reshape_2d(ctx, x2, K, ggml_nelements(x2) / K);
    ggml_tensor* act = x2->ne[1] <= kOwnQuantizeColumns
        ? x2
        : ggml_custom_4d(ctx, GGML_TYPE_I8, ActLayout(K).bytes, x2->ne[1], 1, 1, &x2, 1, quantize_columns, GGML_N_TASKS_MAX,
                         nullptr);
    ggml_tensor* args[2] = {w, act};
    ggml_tensor* y = ggml_custom_4d(ctx, GGML_TYPE_F32, N, x2->ne[1], 1, 1, args, 2, packed_product, GGML_N_TASKS_MAX,
                                    nullptr);
    return ggml_reshape_4d(ctx, y, N, x->ne[1], x->ne[2], x->ne[3]);
#else
    (void)ctx;
    (void)x;
    GGML_ABORT("q4_matmul on a CPU without the kernel (%s)", ggml_get_name(w));
#endif
}

}  // namespace cbs
