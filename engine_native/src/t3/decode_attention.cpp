#include "t3/decode_attention.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/ggml_ops.h"

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

#ifdef CBS_DA_X86
// q . k for D a multiple of 16 (f32 q, f16 k).
__attribute__((target("avx512f"))) float dot_f16_avx512(const float* q, const ggml_fp16_t* k, int64_t D) {
    __m512 acc = _mm512_setzero_ps();
    for (int64_t d = 0; d < D; d += 16)
        acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + d),
                              _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k + d))), acc);
    return _mm512_reduce_add_ps(acc);
}

// acc += p v for D a multiple of 16.
__attribute__((target("avx512f"))) void axpy_f16_avx512(float* acc, float p, const ggml_fp16_t* v, int64_t D) {
    const __m512 pv = _mm512_set1_ps(p);
    for (int64_t d = 0; d < D; d += 16)
        _mm512_storeu_ps(acc + d, _mm512_fmadd_ps(pv, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(v + d))),
                                                  _mm512_loadu_ps(acc + d)));
}
#endif

float dot_f16(const float* q, const ggml_fp16_t* k, int64_t D, bool simd) {
#ifdef CBS_DA_X86
    if (simd) return dot_f16_avx512(q, k, D);
#endif
    (void)simd;
    float s = 0.0f;
    for (int64_t d = 0; d < D; ++d) s += q[d] * ggml_fp16_to_fp32(k[d]);
    return s;
}

void axpy_f16(float* acc, float p, const ggml_fp16_t* v, int64_t D, bool simd) {
#ifdef CBS_DA_X86
    if (simd) return axpy_f16_avx512(acc, p, v, D);
#endif
    (void)simd;
    for (int64_t d = 0; d < D; ++d) acc[d] += p * ggml_fp16_to_fp32(v[d]);
}

template <class T>
const T* at(const ggml_tensor* t, int64_t i1, int64_t i2) {
    return reinterpret_cast<const T*>(static_cast<const char*>(t->data) + i1 * t->nb[1] + i2 * t->nb[2]);
}

// Writes the new key and value of head h (f32 [D] each) at cache row `pos`, rounded to f16 as
// ggml_set_rows rounds them.
void append_head(const ggml_tensor* k_new, const ggml_tensor* v_new, int64_t pos, int64_t h, ggml_tensor* k,
                 ggml_tensor* v) {
    const int64_t D = k->ne[0];
    const float* kn = static_cast<const float*>(k_new->data) + h * D;
    const float* vn = static_cast<const float*>(v_new->data) + h * D;
    auto* kd = reinterpret_cast<ggml_fp16_t*>(static_cast<char*>(k->data) + pos * k->nb[1] + h * k->nb[2]);
    auto* vd = reinterpret_cast<ggml_fp16_t*>(static_cast<char*>(v->data) + pos * v->nb[1] + h * v->nb[2]);
    for (int64_t d = 0; d < D; ++d) {
        kd[d] = ggml_fp32_to_fp16(kn[d]);
        vd[d] = ggml_fp32_to_fp16(vn[d]);
    }
}

// Whole heads per thread: (the new key and value appended,) scores over the unmasked
// positions, softmax, values in f32.
void decode_attention_op(ggml_tensor* dst, int ith, int nth, void*) {
    const ggml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2], *mask = dst->src[3];
    const ggml_tensor *k_new = dst->src[4], *v_new = dst->src[5], *pos = dst->src[6];
    const int64_t D = k->ne[0], n_kv = k->ne[1], H = k->ne[2];
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const bool simd = have_avx512() && D % 16 == 0;
    const auto* m = static_cast<const ggml_fp16_t*>(mask->data);
    thread_local std::vector<float> scores, acc;
    thread_local std::vector<int32_t> positions;
    positions.clear();
    std::vector<float> bias;
    for (int64_t j = 0; j < n_kv; ++j) {
        const float b = ggml_fp16_to_fp32(m[j]);
        if (b == -INFINITY) continue;  // exactly zero weight, and the row is never read
        positions.push_back(static_cast<int32_t>(j));
        bias.push_back(b);
    }
    const int64_t n = static_cast<int64_t>(positions.size());
    scores.resize(static_cast<size_t>(n));
    acc.resize(static_cast<size_t>(D));
    for (int64_t h = ith; h < H; h += nth) {
        if (pos) append_head(k_new, v_new, *static_cast<const int32_t*>(pos->data), h, dst->src[1], dst->src[2]);
        const float* qh = at<float>(q, h, 0);
        for (int64_t i = 0; i < n; ++i)
            scores[i] = scale * dot_f16(qh, at<ggml_fp16_t>(k, positions[i], h), D, simd) + bias[i];
        const float sum = n > 0 ? exp_shifted_row(scores.data(), n) : 0.0f;
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t i = 0; i < n; ++i) axpy_f16(acc.data(), scores[i], at<ggml_fp16_t>(v, positions[i], h), D, simd);
        float* out = reinterpret_cast<float*>(static_cast<char*>(dst->data) + h * dst->nb[1]);
        const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
        for (int64_t d = 0; d < D; ++d) out[d] = acc[d] * inv;
    }
}

}  // namespace

bool decode_attention_applies(const ggml_tensor* k, int n_new, bool on_cpu) {
    static const bool enabled = [] {
        const char* v = std::getenv("CBS_T3_ATTENTION");
        return !v || std::strcmp(v, "0") != 0;
    }();
    return enabled && on_cpu && n_new == 1 && k->type == GGML_TYPE_F16;
}

ggml_tensor* decode_attention(ggml_context* ctx, ggml_tensor* q, ggml_tensor* k, ggml_tensor* v, ggml_tensor* mask,
                              ggml_tensor* k_new, ggml_tensor* v_new, ggml_tensor* pos) {
    ggml_tensor* args[7] = {q, k, v, mask, k_new, v_new, pos};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, k->ne[0], k->ne[2], 1, 1, args, pos ? 7 : 4, decode_attention_op,
                          GGML_N_TASKS_MAX, nullptr);
}

}  // namespace cbs
