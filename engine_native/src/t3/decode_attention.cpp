#include "t3/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cpu/avx2_reduce.h"
#include "cpu/softmax.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define CBS_DA_X86 1
#endif

namespace cbs {

namespace {

bool have_avx512() {
#ifdef CBS_DA_X86
    static const bool yes = __builtin_cpu_supports("avx512f");
    return yes;
#else
    return false;
#endif
}

bool have_avx2() {
#ifdef CBS_DA_X86
    static const bool yes = cpu_has_avx2_fma_f16c();
    return yes;
#else
    return false;
#endif
}

template <class T>
const T* at(const ggml_tensor* t, int64_t i1, int64_t i2) {
    return reinterpret_cast<const T*>(static_cast<const char*>(t->data) + i1 * t->nb[1] + i2 * t->nb[2]);
}

// One head's attention over the n positions listed (bias: their mask values): scores into
// `scores`, then out = the softmax-weighted values summed in f32. The portable loop here;
// below the AVX-512 one (D = 16 C) with q and the value sums held in registers: each score
// a 16-lane dot product reduced once, the values summed in position order; and the same on
// AVX2 (D = 8 C, 8 lanes).
void attend_head(const float* qh, const ggml_tensor* k, const ggml_tensor* v, int64_t h, const int32_t* positions,
                 const float* bias, int64_t n, float scale, float* scores, float* out) {
    const int64_t D = k->ne[0];
    for (int64_t i = 0; i < n; ++i) {
        const ggml_fp16_t* kr = at<ggml_fp16_t>(k, positions[i], h);
        float s = 0.0f;
        for (int64_t d = 0; d < D; ++d) s += qh[d] * ggml_fp16_to_fp32(kr[d]);
        scores[i] = scale * s + bias[i];
    }
    const float sum = n > 0 ? exp_shifted_row(scores, n) : 0.0f;
    std::vector<float> acc(static_cast<size_t>(D), 0.0f);
    for (int64_t i = 0; i < n; ++i) {
        const ggml_fp16_t* vr = at<ggml_fp16_t>(v, positions[i], h);
        for (int64_t d = 0; d < D; ++d) acc[d] += scores[i] * ggml_fp16_to_fp32(vr[d]);
    }
    const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
    for (int64_t d = 0; d < D; ++d) out[d] = acc[d] * inv;
}

#ifdef CBS_DA_X86
// 16 values of cache row (position i, head h) from value 16 c, as f32.
__attribute__((target("avx512f,f16c"))) inline __m512 row16(const ggml_tensor* t, int64_t i, int64_t h, int c) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(at<ggml_fp16_t>(t, i, h) + 16 * c)));
}

// Prefetches the row (position i, head h) of t: its 32 C bytes, a cache line at a time.
template <int C>
inline void prefetch_row(const ggml_tensor* t, int64_t i, int64_t h) {
    const char* r = reinterpret_cast<const char*>(at<ggml_fp16_t>(t, i, h));
    for (int l = 0; l < (32 * C + 63) / 64; ++l) _mm_prefetch(r + 64 * l, _MM_HINT_T0);
}

// Rows this many positions ahead are prefetched: a head's keys, then its values, are short
// streams (a few hundred rows) that the hardware prefetcher only picks up late.
constexpr int64_t kRowsAhead = 16;

// (The score's scale and mask added apart, unfused, as the portable loop does.)
template <int C>
__attribute__((target("avx512f,f16c,fma"), optimize("fp-contract=off"))) void attend_head_avx512(
    const float* qh, const ggml_tensor* k, const ggml_tensor* v, int64_t h, const int32_t* positions, const float* bias,
    int64_t n, float scale, float* scores, float* out) {
    __m512 qv[C], acc[C];
    for (int c = 0; c < C; ++c) qv[c] = _mm512_loadu_ps(qh + 16 * c);
    for (int64_t i = 0; i < n; ++i) {
        // The keys' stream runs on into the values'.
        const int64_t ahead = i + kRowsAhead;
        if (ahead < n)
            prefetch_row<C>(k, positions[ahead], h);
        else if (ahead - n < n)
            prefetch_row<C>(v, positions[ahead - n], h);
        __m512 s = _mm512_setzero_ps();
        for (int c = 0; c < C; ++c) s = _mm512_fmadd_ps(qv[c], row16(k, positions[i], h, c), s);
        scores[i] = scale * _mm512_reduce_add_ps(s) + bias[i];
    }
    const float sum = n > 0 ? exp_shifted_row(scores, n) : 0.0f;
    for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; ++i) {
        if (i + kRowsAhead < n) prefetch_row<C>(v, positions[i + kRowsAhead], h);
        const __m512 p = _mm512_set1_ps(scores[i]);
        for (int c = 0; c < C; ++c) acc[c] = _mm512_fmadd_ps(p, row16(v, positions[i], h, c), acc[c]);
    }
    const __m512 inv = _mm512_set1_ps(sum > 0.0f ? 1.0f / sum : 0.0f);
    for (int c = 0; c < C; ++c) _mm512_storeu_ps(out + 16 * c, _mm512_mul_ps(acc[c], inv));
}

// 8 values of cache row (position i, head h) from value 8 c, as f32.
__attribute__((target("avx2,f16c"))) inline __m256 row8(const ggml_tensor* t, int64_t i, int64_t h, int c) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(at<ggml_fp16_t>(t, i, h) + 8 * c)));
}

// (prefetch_row counts a row in 16 values, hence (C + 1) / 2.)
template <int C>
__attribute__((target("avx2,f16c,fma"), optimize("fp-contract=off"))) void attend_head_avx2(
    const float* qh, const ggml_tensor* k, const ggml_tensor* v, int64_t h, const int32_t* positions, const float* bias,
    int64_t n, float scale, float* scores, float* out) {
    __m256 qv[C], acc[C];
    for (int c = 0; c < C; ++c) qv[c] = _mm256_loadu_ps(qh + 8 * c);
    for (int64_t i = 0; i < n; ++i) {
        const int64_t ahead = i + kRowsAhead;
        if (ahead < n)
            prefetch_row<(C + 1) / 2>(k, positions[ahead], h);
        else if (ahead - n < n)
            prefetch_row<(C + 1) / 2>(v, positions[ahead - n], h);
        __m256 s = _mm256_setzero_ps();
        for (int c = 0; c < C; ++c) s = _mm256_fmadd_ps(qv[c], row8(k, positions[i], h, c), s);
        scores[i] = scale * hsum8(s) + bias[i];
    }
    const float sum = n > 0 ? exp_shifted_row(scores, n) : 0.0f;
    for (int c = 0; c < C; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; ++i) {
        if (i + kRowsAhead < n) prefetch_row<(C + 1) / 2>(v, positions[i + kRowsAhead], h);
        const __m256 p = _mm256_set1_ps(scores[i]);
        for (int c = 0; c < C; ++c) acc[c] = _mm256_fmadd_ps(p, row8(v, positions[i], h, c), acc[c]);
    }
    const __m256 inv = _mm256_set1_ps(sum > 0.0f ? 1.0f / sum : 0.0f);
    for (int c = 0; c < C; ++c) _mm256_storeu_ps(out + 8 * c, _mm256_mul_ps(acc[c], inv));
}
#endif

using HeadKernel = void (*)(const float*, const ggml_tensor*, const ggml_tensor*, int64_t, const int32_t*, const float*,
                            int64_t, float, float*, float*);

// The kernel for head size D: AVX-512 for D = 16 .. 128 in steps of 16, AVX2 for the common
// head sizes (32, 48, 64, 80, 96, 128), else the loop.
HeadKernel head_kernel(int64_t D) {
#ifdef CBS_DA_X86
    if (have_avx512() && D % 16 == 0) switch (D / 16) {
            case 1: return attend_head_avx512<1>;
            case 2: return attend_head_avx512<2>;
            case 3: return attend_head_avx512<3>;
            case 4: return attend_head_avx512<4>;
            case 5: return attend_head_avx512<5>;
            case 6: return attend_head_avx512<6>;
            case 7: return attend_head_avx512<7>;
            case 8: return attend_head_avx512<8>;
            default: break;
        }
    if (have_avx2() && D % 8 == 0) switch (D / 8) {
            case 4: return attend_head_avx2<4>;
            case 6: return attend_head_avx2<6>;
            case 8: return attend_head_avx2<8>;
            case 10: return attend_head_avx2<10>;
            case 12: return attend_head_avx2<12>;
            case 16: return attend_head_avx2<16>;
            default: break;
        }
#endif
    return attend_head;
}

// n floats to f16, rounded to nearest even as ggml_fp32_to_fp16 (and ggml_set_rows) rounds;
// the CPU's conversion, 16 (AVX-512) or 8 (F16C) at a time (not a function call per value).
#ifdef CBS_DA_X86
__attribute__((target("avx512f,f16c"))) void to_f16_avx512(const float* in, ggml_fp16_t* out, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                            _mm512_cvtps_ph(_mm512_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; ++i) out[i] = ggml_fp32_to_fp16(in[i]);
}

__attribute__((target("avx2,f16c"))) void to_f16_avx2(const float* in, ggml_fp16_t* out, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; ++i) out[i] = ggml_fp32_to_fp16(in[i]);
}
#endif

void to_f16(const float* in, ggml_fp16_t* out, int64_t n) {
#ifdef CBS_DA_X86
    if (have_avx512()) return to_f16_avx512(in, out, n);
    if (have_avx2()) return to_f16_avx2(in, out, n);
#endif
    for (int64_t i = 0; i < n; ++i) out[i] = ggml_fp32_to_fp16(in[i]);
}

// Writes the new key and value of head h of row r (k_new, v_new laid out as q) at cache row
// `pos`, rounded to f16; k and v are that row's cache.
void append_head(const ggml_tensor* k_new, const ggml_tensor* v_new, int64_t pos, int64_t h, int64_t r,
                 const ggml_tensor* k, const ggml_tensor* v) {
    const int64_t D = k->ne[0];
    auto* kd = reinterpret_cast<ggml_fp16_t*>(static_cast<char*>(k->data) + pos * k->nb[1] + h * k->nb[2]);
    auto* vd = reinterpret_cast<ggml_fp16_t*>(static_cast<char*>(v->data) + pos * v->nb[1] + h * v->nb[2]);
    to_f16(at<float>(k_new, h, 0) + r * k_new->nb[3] / sizeof(float), kd, D);
    to_f16(at<float>(v_new, h, 0) + r * v_new->nb[3] / sizeof(float), vd, D);
}

// Row r of a 4-D tensor (its fourth dimension) as a tensor of its own: the same header, the
// data moved (the kernels above index positions and heads only).
ggml_tensor row_of(const ggml_tensor* t, int64_t r) {
    ggml_tensor row = *t;
    row.data = static_cast<char*>(t->data) + r * t->nb[3];
    return row;
}

// Whole heads per thread (a short prompt's: each query's heads): (the new key and value
// appended,) scores over the unmasked positions of the query's mask row, softmax, values in f32.
void decode_attention_op(ggml_tensor* dst, int ith, int nth, void*) {
    const ggml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const ggml_tensor *k_new = dst->src[4], *v_new = dst->src[5], *pos = dst->src[6];
    const int64_t D = k->ne[0], n_kv = k->ne[1], H = k->ne[2], rows = k->ne[3], n_q = q->ne[2];
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const HeadKernel attend = head_kernel(D);
    constexpr uint16_t kF16Zero = 0x0000, kF16MinusInf = 0xFC00;  // a causal mask holds only these
    std::vector<std::vector<int32_t>> positions(static_cast<size_t>(n_q));
    std::vector<std::vector<float>> bias(static_cast<size_t>(n_q));
    size_t most = 0;
    for (int64_t i = 0; i < n_q; ++i) {
        const auto* m = reinterpret_cast<const ggml_fp16_t*>(static_cast<const char*>(mask->data) + i * mask->nb[1]);
        for (int64_t j = 0; j < n_kv; ++j) {
            const uint16_t bits = static_cast<uint16_t>(m[j]);
            if (bits == kF16MinusInf) continue;  // exactly zero weight, and the row is never read
            positions[i].push_back(static_cast<int32_t>(j));
            bias[i].push_back(bits == kF16Zero ? 0.0f : ggml_fp16_to_fp32(m[j]));
        }
        most = std::max(most, positions[i].size());
    }
    std::vector<float> scores(most);
    for (int64_t t = ith; t < H * rows * n_q; t += nth) {  // heads of every row and query, each a unit of work
        const int64_t h = t % H, r = (t / H) % rows, i = t / (H * rows);
        const ggml_tensor kr = row_of(k, r), vr = row_of(v, r);
        if (pos) append_head(k_new, v_new, *static_cast<const int32_t*>(pos->data), h, r, &kr, &vr);
        attend(at<float>(q, h, i) + r * q->nb[3] / sizeof(float), &kr, &vr, h, positions[i].data(), bias[i].data(),
               static_cast<int64_t>(positions[i].size()), scale, scores.data(),
               reinterpret_cast<float*>(static_cast<char*>(dst->data) + h * dst->nb[1] + i * dst->nb[2] + r * dst->nb[3]));
    }
}

}  // namespace

bool decode_attention_applies(const ggml_tensor* k, int n_new, bool on_cpu) {
    static const bool enabled = [] {
        const char* v = std::getenv("CBS_T3_ATTENTION");
        return !v || std::strcmp(v, "0") != 0;
    }();
    // Past kMaxQueries ggml's tiled flash attention takes a prompt; below it ggml's walks the
    // cache a position at a time with a scalar expf each (docs/CPU_STAGES.md).
    constexpr int kMaxQueries = 63;
    return enabled && on_cpu && n_new >= 1 && n_new <= kMaxQueries && k->type == GGML_TYPE_F16;
}

ggml_tensor* decode_attention(ggml_context* ctx, ggml_tensor* q, ggml_tensor* k, ggml_tensor* v, ggml_tensor* mask,
                              ggml_tensor* k_new, ggml_tensor* v_new, ggml_tensor* pos) {
    ggml_tensor* args[7] = {q, k, v, mask, k_new, v_new, pos};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, k->ne[0], k->ne[2], q->ne[2], k->ne[3], args, pos ? 7 : 4,
                          decode_attention_op, GGML_N_TASKS_MAX, nullptr);
}

}  // namespace cbs
