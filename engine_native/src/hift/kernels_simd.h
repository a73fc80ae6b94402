// HiFT's CPU kernels, shared part: 8-lane vector types (one AVX register in the AVX2
// build of each kernel, two 4-lane vectors in the baseline build), the fused activations
// (Snake with a vectorized sin^2, leaky ReLU, ELU), the per-node work counter, the
// "finish" step (bias, residual, resblock sum, activation) every kernel ends with, and
// the macro that builds a kernel for both targets. Internal to hift/.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ggml.h"

#if defined(__x86_64__) || defined(_M_X64)
#define CBS_HIFT_X86 1  // kernels also built for AVX2 + FMA, used where the CPU has them
#include <immintrin.h>
#endif

namespace cbs::hiftk {

enum class Act { none, snake, leaky, elu };

// 8 channels at a time: one AVX register (the AVX2 build of each kernel), or two native
// 4-lane vectors (SSE, NEON) for the baseline build: the compiler keeps an 8-lane vector
// type in memory where the target has no 8-lane registers.
using v8 = float __attribute__((vector_size(32)));
using v4 = float __attribute__((vector_size(16)));
struct v4x2 {
    v4 lo, hi;
};
template <bool kWide>
using Vec = std::conditional_t<kWide, v8, v4x2>;

// These helpers are always inlined into the kernels below, so the note that passing a
// 32-byte vector without AVX changes the calling convention does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

#define CBS_INL __attribute__((always_inline)) inline
#define CBS_V4X2_OP(op)                                                                 \
    CBS_INL v4x2 operator op(v4x2 a, v4x2 b) { return {a.lo op b.lo, a.hi op b.hi}; } \
    CBS_INL v4x2 operator op(v4x2 a, float b) { return {a.lo op b, a.hi op b}; }      \
    CBS_INL v4x2& operator op##=(v4x2& a, v4x2 b) { return a = a op b; }
CBS_V4X2_OP(+)
CBS_V4X2_OP(-)
CBS_V4X2_OP(*)
CBS_V4X2_OP(/)
#undef CBS_V4X2_OP
CBS_INL v4x2 operator-(v4x2 a) { return {-a.lo, -a.hi}; }

template <class V>
CBS_INL V vload(const float* p) {
    V v;
    std::memcpy(&v, p, sizeof(v));
    return v;
}
template <class V>
CBS_INL void vstore(float* p, const V& v) {
    std::memcpy(p, &v, sizeof(v));
}

// max(v, 0) + slope * min(v, 0), as torch's leaky_relu
CBS_INL v8 leaky(const v8& v, float slope) { return v > 0.0f ? v : v * slope; }
CBS_INL v4 leaky(v4 v, float slope) { return v > 0.0f ? v : v * slope; }
CBS_INL v4x2 leaky(v4x2 v, float slope) { return {leaky(v.lo, slope), leaky(v.hi, slope)}; }

// Whether any lane is beyond +-limit or NaN.
template <class M>
CBS_INL bool any_lane(const M& m) {
    int64_t lanes[sizeof(M) / 8];
    std::memcpy(lanes, &m, sizeof(m));
    int64_t any = 0;
    for (int64_t l : lanes) any |= l;
    return any != 0;
}
CBS_INL bool any_big(const v8& a, float limit) { return any_lane((a > limit) | (a < -limit) | (a != a)); }
CBS_INL bool any_big(v4 a, float limit) { return any_lane((a > limit) | (a < -limit) | (a != a)); }
CBS_INL bool any_big(v4x2 a, float limit) { return any_big(a.lo, limit) || any_big(a.hi, limit); }
#ifdef CBS_HIFT_X86
// 16 lanes (AVX-512 kernels): one compare into a mask register (the generic form's vector of
// lane masks compiles to lane-by-lane moves there).
using v16 = float __attribute__((vector_size(64)));
__attribute__((target("avx512f"))) inline bool any_big(const v16& a, float limit) {
    const __m512 v = reinterpret_cast<__m512>(a);
    return _mm512_cmp_ps_mask(_mm512_abs_ps(v), _mm512_set1_ps(limit), _CMP_NLE_UQ) != 0;
}
CBS_INL v16 leaky(const v16& v, float slope) { return v > 0.0f ? v : v * slope; }
#endif

inline int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// sin(r) for x = j pi + r, and j (pi in three parts, the first two short enough that j times
// them is exact for |j| < 8192), from sin's Taylor series to r^13 (truncation < 7e-10 on
// |r| <= pi/2). sin(x)^2 (sin_sq) from it is off by at most 2.6e-7 for |x| < 8192, as much
// as sinf(x)^2 is; callers take larger x elsewhere.
template <class V>
CBS_INL V sin_reduced(const V& x, V& j) {
    const float round = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
    j = (x * 0.318309886183790672f + round) - round;
    V r = x - j * 3.140625f;
    r = r - j * 9.67502593994140625e-4f;
    r = r - j * 1.509957990978376432e-7f;
    const V z = r * r;
    V p = z * (1.0f / 6227020800.0f) - 1.0f / 39916800.0f;
    p = p * z + 1.0f / 362880.0f;
    p = p * z - 1.0f / 5040.0f;
    p = p * z + 1.0f / 120.0f;
    p = p * z - 1.0f / 6.0f;
    return p * z * r + r;
}

template <class V>
CBS_INL V sin_sq(const V& x) {
    V j;
    const V sr = sin_reduced(x, j);
    return sr * sr;
}

// sin(x) for |x| < 8192: (-1)^j sin(r).
template <class V>
CBS_INL V sin_small(const V& x) {
    V j;
    const V sr = sin_reduced(x, j);
    const float round = 12582912.0f;
    const V odd = j - ((j * 0.5f - 0.25f + round) - round) * 2.0f;  // j - 2 floor(j / 2): 0 or 1
    return sr - odd * 2.0f * sr;
}

// y = act(x (+ b)) for one frame of n channels; alpha/inv only for Snake, which is
// v + inv * sin(v * alpha)^2 in float32 as torch computes it. Always inlined, so each
// kernel gets it built for its own target.
template <class V>
CBS_INL void act_row(float* y, const float* x, const float* b, Act act, float slope, const float* alpha,
                     const float* inv, int64_t n) {
    int64_t i = 0;
    switch (act) {
        case Act::snake:
            for (constexpr int64_t lanes = sizeof(V) / sizeof(float); i + lanes <= n; i += lanes) {
                V v = vload<V>(x + i);
                if (b) v = v + vload<V>(b + i);
                const V a = v * vload<V>(alpha + i);
                if (any_big(a, 8192.0f)) break;  // the rest with libm
                vstore(y + i, v + vload<V>(inv + i) * sin_sq(a));
            }
            for (; i < n; ++i) {
                const float v = b ? x[i] + b[i] : x[i];
                const float s = std::sin(v * alpha[i]);
                y[i] = v + inv[i] * (s * s);
            }
            return;
        case Act::none:
            for (; i < n; ++i) y[i] = b ? x[i] + b[i] : x[i];
            return;
        case Act::leaky:
            for (; i < n; ++i) {
                const float v = b ? x[i] + b[i] : x[i];
                y[i] = v > 0.0f ? v : v * slope;
            }
            return;
        case Act::elu:
            for (; i < n; ++i) {
                const float v = b ? x[i] + b[i] : x[i];
                y[i] = v > 0.0f ? v : std::expm1(v);
            }
            return;
    }
}

inline const float* data_f32(const ggml_tensor* t) { return t ? static_cast<const float*>(t->data) : nullptr; }

// A node's work, handed out piece by piece to ggml's threads as they come for more: a
// thread that the OS holds back (the machine is shared) then takes fewer pieces, and
// the others do not wait for it at the end of the node.
struct Work {
    std::atomic<int64_t> next{0};
    // The next piece [i0, i1) of n items in steps of `step`; false once all are taken.
    bool take(int64_t n, int64_t step, int64_t& i0, int64_t& i1) {
        i0 = next.fetch_add(step, std::memory_order_relaxed);
        i1 = std::min(n, i0 + step);
        return i0 < n;
    }
};

// finish: y ne [C, L] (a conv without bias) -> post(((y + b) + res + acc) / div):
// bias over the first n_bias channels, then the residual, the running resblock sum
// (acc + r, as torch's `xs += r`), the division by the number of resblocks and the
// activation the next layer starts with. src: y, then b, res and acc when present.
struct FinishOp {
    bool has_bias, has_res, has_acc;
    float div;  // 1: none
    Act post;   // none, leaky or elu
    float slope;
    Work* work;  // finish_kernel's; unused inside the FFT kernels
};

struct FinishArgs {
    const float *b, *res, *acc;
    int64_t n_bias;
};

inline FinishArgs finish_args(const FinishOp& p, const ggml_tensor* dst, int first_src) {
    int si = first_src;
    FinishArgs a{};
    if (p.has_bias) {
        a.n_bias = ggml_nelements(dst->src[si]);
        a.b = data_f32(dst->src[si++]);
    }
    if (p.has_res) a.res = data_f32(dst->src[si++]);
    if (p.has_acc) a.acc = data_f32(dst->src[si++]);
    return a;
}

// One frame t of C channels: o = finish(y). Always inlined, so the kernels built for
// AVX2 get it in AVX2.
template <class V>
CBS_INL void finish_row(float* o, const float* y, const FinishOp& p, const FinishArgs& a, int64_t t, int64_t C) {
    const float* res = a.res ? a.res + t * C : nullptr;
    const float* acc = a.acc ? a.acc + t * C : nullptr;
    const bool is_leaky = p.post == Act::leaky;
    int64_t c = 0;
    if (a.n_bias == 0 || a.n_bias == C) {
        for (constexpr int64_t lanes = sizeof(V) / sizeof(float); c + lanes <= C; c += lanes) {
            V v = vload<V>(y + c);
            if (a.n_bias) v = v + vload<V>(a.b + c);
            if (res) v = v + vload<V>(res + c);
            if (acc) v = vload<V>(acc + c) + v;
            if (p.div != 1.0f) v = v / p.div;
            if (is_leaky) v = hiftk::leaky(v, p.slope);
            vstore(o + c, v);
        }
    }
    for (; c < C; ++c) {
        float v = c < a.n_bias ? y[c] + a.b[c] : y[c];
        if (res) v = v + res[c];
        if (acc) v = acc[c] + v;
        if (p.div != 1.0f) v = v / p.div;
        if (is_leaky) v = v > 0.0f ? v : v * p.slope;
        o[c] = v;
    }
    if (p.post == Act::elu) act_row<V>(o, o, nullptr, Act::elu, 0.0f, nullptr, nullptr, C);
}

// The ggml entry point name##_kernel of a kernel body name##_body<kWide>: built twice,
// for AVX2 + FMA (wide register blocks) and for the compiler's baseline target, picked
// at run time.
#ifdef CBS_HIFT_X86
inline bool has_avx2_fma() {
    static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    return yes;
}
// The products' 16-lane forms (cmul_bin16, rgemm16) where the CPU has AVX-512; each output
// gets the same multiply-adds in the same order as in the 8-lane build, so the result is the
// same bit for bit. CBS_HIFT_AVX512=0: the 8-lane build everywhere (a comparison).
inline bool use_avx512() {
    static const bool yes = __builtin_cpu_supports("avx512f") &&
                            !(std::getenv("CBS_HIFT_AVX512") && std::strcmp(std::getenv("CBS_HIFT_AVX512"), "0") == 0);
    return yes;
}
#define CBS_KERNEL(name, Op)                                                                                \
    __attribute__((target("avx2,fma"))) void name##_avx2(ggml_tensor* d, const Op& p) { name##_body<true>(d, p); } \
    void name##_kernel(ggml_tensor* dst, int, int, void* ud) {                                            \
        const Op& p = *static_cast<const Op*>(ud);                                                        \
        if (has_avx2_fma()) return name##_avx2(dst, p);                                                    \
        name##_body<false>(dst, p);                                                                        \
    }
#else
#define CBS_KERNEL(name, Op) \
    void name##_kernel(ggml_tensor* dst, int, int, void* ud) { name##_body<false>(dst, *static_cast<const Op*>(ud)); }
#endif

}  // namespace cbs::hiftk
