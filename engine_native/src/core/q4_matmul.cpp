#include "core/q4_matmul.h"

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
constexpr int kPrefetch = 8192;   // bytes ahead of the weight stream (measured best of 1-16 K)
constexpr int64_t kOwnQuantizeColumns = 4;  // up to this many columns each thread quantises itself

struct BlockQ4 {  // ggml's block_q4_0
    ggml_fp16_t d;
    uint8_t qs[kBlock / 2];
};
static_assert(sizeof(BlockQ4) == 18, "block_q4_0 is 18 bytes");

// One column of quantised activations: kChunk-padded blocks, values in the order the
// kernel's nibble expansion produces for a pair of blocks b, b+1:
// [b 0-15 | b+1 0-15 | b 16-31 | b+1 16-31]; then each block's scale and 8 * scale * sum(q)
// (the Q4_0 offset: sum (n - 8) q = sum n q - 8 sum q).
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

// The scale and Q4_0 offset of block b from its |max| and the sum of its 8-bit values.
inline void block_scales(const ActLayout& L, uint8_t* col, int64_t b, float amax, int sum) {
    float *d = L.scales(col), *off = L.offsets(col);
    d[b] = ggml_fp16_to_fp32(ggml_fp32_to_fp16(amax / 127.0f));
    off[b] = 8.0f * static_cast<float>(sum) * d[b];
}

// One column of K floats quantised (ggml's Q8_0 rule) into `col` (ActLayout's bytes).
// Block b's halves go to b's side of its pair's 64 bytes (ActLayout).
#ifdef CBS_Q4_X86
// Only the kernel's CPUs quantise (AVX-512): the scalar rule below, 16 values at a time
// (the same products and round-to-nearest-even conversions: the same bytes); a decoding
// step quantises ~170 K values per thread, which the scalar loop took ~0.3 ms for.
__attribute__((target("avx512f,avx512bw,avx512vl"))) void quantize_column(const float* in, uint8_t* col,
                                                                         const ActLayout& L) {
    int8_t* q = L.values(col);
    std::memset(col, 0, static_cast<size_t>(L.bytes));
    for (int64_t b = 0; b < L.blocks; ++b) {
        const __m512 x0 = _mm512_loadu_ps(in + b * kBlock), x1 = _mm512_loadu_ps(in + b * kBlock + 16);
        const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
        const __m512 id = _mm512_set1_ps(amax != 0.0f ? 127.0f / amax : 0.0f);
        const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, id)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, id));
        int8_t* pair = q + (b & ~int64_t(1)) * kBlock + (b & 1) * 16;
        _mm_storeu_si128(reinterpret_cast<__m128i*>(pair), _mm512_cvtepi32_epi8(q0));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(pair + 32), _mm512_cvtepi32_epi8(q1));
        block_scales(L, col, b, amax, _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1)));
    }
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
        int8_t* pair = q + (b & ~int64_t(1)) * kBlock + (b & 1) * 16;
        int sum = 0;
        for (int64_t j = 0; j < kBlock; ++j) {
            const int v8 = static_cast<int>(std::nearbyint(v[j] * id));
            pair[(j < 16 ? 0 : 32) + (j & 15)] = static_cast<int8_t>(v8);
            sum += v8;
        }
        block_scales(L, col, b, amax, sum);
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
// R rows of packed weights (rows r .. r+R-1, nb blocks each) times one activation column:
// out[i] = sum over blocks of dw * da * (sum n q) - dw * offset.
template <int R>
__attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma"))) void dot_rows(
    const uint8_t* qs, const ggml_fp16_t* dw, int64_t nb, const uint8_t* col, const ActLayout& L, bool prefetch,
    float* out) {
    const int8_t* a = L.values(col);
    const float *da = L.scales(col), *off = L.offsets(col);
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const __m512i pair_idx = _mm512_set_epi32(1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0);
    __m512 acc[R], offs[R];
    for (int i = 0; i < R; ++i) acc[i] = offs[i] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b += kChunk) {
        const int64_t n = std::min(kChunk, nb - b);
        const __mmask16 m = static_cast<__mmask16>((1u << n) - 1u);
        const __m512 sa = _mm512_loadu_ps(da + b), so = _mm512_loadu_ps(off + b);
        __m512 scale[R];
        for (int i = 0; i < R; ++i) {
            const __m512 w = _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, dw + i * nb + b));
            scale[i] = _mm512_mul_ps(w, sa);
            offs[i] = _mm512_fmadd_ps(w, so, offs[i]);
        }
        for (int64_t p = 0; p < n; p += 2) {
            const __m512i av = _mm512_loadu_si512(a + (b + p) * kBlock);
            const __m512i idx = _mm512_add_epi32(pair_idx, _mm512_set1_epi32(static_cast<int>(p)));
            for (int i = 0; i < R; ++i) {
                const uint8_t* src = qs + (i * nb + b + p) * 16;
                if (prefetch) _mm_prefetch(reinterpret_cast<const char*>(src) + kPrefetch, _MM_HINT_T0);
                // The last block of an odd count: only its 16 bytes (the next row follows).
                const __m256i x = p + 1 < n ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src))
                                            : _mm256_maskz_loadu_epi8(0xFFFFu, src);
                const __m512i w = _mm512_and_si512(
                    _mm512_inserti64x4(_mm512_castsi256_si512(x), _mm256_srli_epi16(x, 4), 1), low4);
                const __m512i dot = _mm512_dpbusd_epi32(_mm512_setzero_si512(), w, av);
                acc[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_permutexvar_ps(idx, scale[i]), acc[i]);
            }
        }
    }
    for (int i = 0; i < R; ++i) out[i] = _mm512_reduce_add_ps(acc[i]) - _mm512_reduce_add_ps(offs[i]);
}

// y = rows r0 .. r1-1 of packed w [K, N] times the quantised columns cols[0 .. M-1] (stride
// col_stride), column c's rows at y + c * y_stride: rows in groups of 4 (the rest one by one),
// each group's weights reused over the columns while they are in the cache.
void product_rows(const ggml_tensor* w, const uint8_t* cols, int64_t M, size_t col_stride, int64_t r0, int64_t r1,
                  float* y, int64_t y_stride) {
    const int64_t K = w->ne[0], N = w->ne[1], nb = K / kBlock;
    const ActLayout L(K);
    const auto* qs = static_cast<const uint8_t*>(w->data);
    const auto* dw = reinterpret_cast<const ggml_fp16_t*>(qs + N * nb * 16);
    for (int64_t r = r0; r < r1;) {
        const int rows = r + 4 <= r1 ? 4 : 1;
        for (int64_t c = 0; c < M; ++c) {
            const uint8_t* col = cols + c * col_stride;
            float* out = y + c * y_stride + (r - r0);
            if (rows == 4)
                dot_rows<4>(qs + r * nb * 16, dw + r * nb, nb, col, L, c == 0, out);
            else
                dot_rows<1>(qs + r * nb * 16, dw + r * nb, nb, col, L, c == 0, out);
        }
        r += rows;
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
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
               __builtin_cpu_supports("f16c") && __builtin_cpu_supports("fma");
    }();
    return yes;
#else
    return false;
#endif
}

void q4_pack(const void* src, void* dst, int64_t n_rows, int64_t K) {
    const int64_t nb = K / kBlock;
    const auto* in = static_cast<const BlockQ4*>(src);
    auto* qs = static_cast<uint8_t*>(dst);
    auto* d = reinterpret_cast<ggml_fp16_t*>(qs + n_rows * nb * 16);
    for (int64_t i = 0; i < n_rows * nb; ++i) {
        std::memcpy(qs + i * 16, in[i].qs, 16);
        d[i] = in[i].d;
    }
}

void q4_unpack_rows(const ggml_tensor* w, int64_t r0, int64_t n, float* out) {
    const int64_t K = w->ne[0], N = w->ne[1], nb = K / kBlock;
    const auto* qs = static_cast<const uint8_t*>(w->data);
    const auto* dw = reinterpret_cast<const ggml_fp16_t*>(qs + N * nb * 16);
    for (int64_t r = r0; r < r0 + n; ++r)
        for (int64_t b = 0; b < nb; ++b, out += kBlock) {
            const uint8_t* q = qs + (r * nb + b) * 16;
            const float d = ggml_fp16_to_fp32(dw[r * nb + b]);
            for (int j = 0; j < 16; ++j) {  // ggml's dequantize_row_q4_0: low nibbles first
                out[j] = static_cast<float>((q[j] & 0x0F) - 8) * d;
                out[j + 16] = static_cast<float>((q[j] >> 4) - 8) * d;
            }
        }
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
    const int64_t per = ((N + nth - 1) / nth + 3) / 4 * 4;
    r0 = std::min(N, ith * per);
    r1 = std::min(N, r0 + per);
}

void q4_product_rows(const ggml_tensor* w, const uint8_t* col, int64_t r0, int64_t r1, float* y) {
#ifdef CBS_Q4_X86
    product_rows(w, col, 1, 0, r0, r1, y, 0);
#else
    (void)col, (void)r0, (void)r1, (void)y;
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
