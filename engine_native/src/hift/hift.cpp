#include "hift/hift.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <deque>
#include <numeric>
#include <string>
#include <type_traits>

#include "ggml-cpu.h"

#if defined(__x86_64__) || defined(_M_X64)
#define CBS_HIFT_X86 1  // kernels also built for AVX2 + FMA, used where the CPU has them
#endif

namespace cbs {

// ---------------------------------------------------------------------------
// Hyperparameters
// ---------------------------------------------------------------------------

static std::vector<int> ints(const ModelFile& mf, const std::string& key) {
    std::vector<int> out;
    for (int64_t v : mf.get_int_array(key)) out.push_back(static_cast<int>(v));
    return out;
}

HiftHparams HiftHparams::from(const ModelFile& mf) {
    const std::string p = "chatterbox.hift.";
    auto i = [&](const char* k) { return static_cast<int>(mf.get_int(p + k)); };
    auto f = [&](const char* k) { return static_cast<float>(mf.get_float(p + k)); };
    HiftHparams hp;
    hp.sample_rate = i("sample_rate");
    hp.base_channels = i("base_channels");
    hp.nb_harmonics = i("nb_harmonics");
    hp.upsample_rates = ints(mf, p + "upsample_rates");
    hp.upsample_kernel_sizes = ints(mf, p + "upsample_kernel_sizes");
    hp.resblock_kernel_sizes = ints(mf, p + "resblock_kernel_sizes");
    hp.resblock_dilations = ints(mf, p + "resblock_dilations");
    hp.source_resblock_kernel_sizes = ints(mf, p + "source_resblock_kernel_sizes");
    hp.source_resblock_dilations = ints(mf, p + "source_resblock_dilations");
    hp.n_fft = i("istft_n_fft");
    hp.hop = i("istft_hop");
    hp.lrelu_slope = f("lrelu_slope");
    hp.audio_limit = f("audio_limit");
    const size_t n_up = hp.upsample_rates.size();
    bool ok = n_up > 0 && hp.upsample_kernel_sizes.size() == n_up && hp.source_resblock_kernel_sizes.size() == n_up &&
              !hp.resblock_kernel_sizes.empty() && !hp.resblock_dilations.empty() &&
              !hp.source_resblock_dilations.empty() && hp.n_fft >= 2 && hp.n_fft % 2 == 0 && hp.hop >= 1 &&
              hp.base_channels >= (1 << n_up);
    for (int r : hp.upsample_rates) ok = ok && r >= 1;
    if (!ok) throw EngineError(mf.path() + ": inconsistent HiFT metadata");
    return hp;
}

int64_t HiftHparams::samples_per_frame() const {
    int64_t n = hop;
    for (int r : upsample_rates) n *= r;
    return n;
}

// ---------------------------------------------------------------------------
// CPU kernels (ggml custom ops)
// ---------------------------------------------------------------------------
//
// ggml has no fused Snake and its sin is a scalar libm loop, and a convolution
// through ggml_im2col + ggml_add for bias and residual makes several passes over
// signals of up to 64 x 60000 floats. So HiFT runs on a few kernels of its own, each a
// ggml custom op that shares its work out between ggml's threads:
//  - the resblock convolutions (almost all the work) through the DFT: see "FFT
//    convolution" below;
//  - the other convolutions and ConvTranspose1d's products as `rgemm`, a register-
//    blocked matrix product that reads the padded signal in place (`cols` pads it and
//    applies the activation), then `finish` (bias, residual, the next activation) or
//    `up` (ConvTranspose1d's overlap-add, bias, source branch); conv_post and odd
//    shapes as `cols` columns times the weight in ggml_mul_mat.
// Snake is computed in these kernels as the signal is read, with a vectorized sin.

namespace {

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

int64_t round_up(int64_t n, int64_t m) { return (n + m - 1) / m * m; }

// sin(x)^2 of 8 floats: x = j pi + r (pi in three parts, the first two short enough that
// j times them is exact for |j| < 8192), sin(x)^2 = sin(r)^2 with sin(r) from its Taylor
// series to r^13 (truncation < 7e-10 on |r| <= pi/2). Off sin(x)^2 by at most 2.6e-7
// for |x| < 8192, as much as sinf(x)^2 is; callers take larger x elsewhere.
template <class V>
CBS_INL V sin_sq(const V& x) {
    const float round = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
    const V j = (x * 0.318309886183790672f + round) - round;
    V r = x - j * 3.140625f;
    r = r - j * 9.67502593994140625e-4f;
    r = r - j * 1.509957990978376432e-7f;
    const V z = r * r;
    V p = z * (1.0f / 6227020800.0f) - 1.0f / 39916800.0f;
    p = p * z + 1.0f / 362880.0f;
    p = p * z - 1.0f / 5040.0f;
    p = p * z + 1.0f / 120.0f;
    p = p * z - 1.0f / 6.0f;
    const V sr = p * z * r + r;
    return sr * sr;
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
            for (; i + 8 <= n; i += 8) {
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

const float* data_f32(const ggml_tensor* t) { return t ? static_cast<const float*>(t->data) : nullptr; }

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

// cols: x ne [C, L] -> ne [kc, L_out], column t = act(x + bias) at frames
// t*stride - pad + k*dil for k < K, side by side (zeros outside [0, L) and past K*C).
// src: x, then bias when has_bias, then alpha and inv_alpha when act == snake.
struct ColsOp {
    int K, stride, pad, dil;
    bool has_bias;
    Act act;
    float slope;
    Work* work;
};

template <bool kWide>
CBS_INL void cols_body(ggml_tensor* dst, const ColsOp& p) {
    const ggml_tensor* x = dst->src[0];
    int si = 1;
    const float* bias = p.has_bias ? data_f32(dst->src[si++]) : nullptr;
    const float* alpha = p.act == Act::snake ? data_f32(dst->src[si++]) : nullptr;
    const float* inv = p.act == Act::snake ? data_f32(dst->src[si++]) : nullptr;
    const int64_t C = x->ne[0], L = x->ne[1], kc = dst->ne[0], out_len = dst->ne[1];
    const size_t x_row = x->nb[1] / sizeof(float);
    const float* xd = data_f32(x);
    float* out = static_cast<float*>(dst->data);

    // Frames are activated once per block of output frames into a small buffer that
    // stays in cache, then copied K times.
    thread_local std::vector<float> buf;
    for (int64_t tb, te; p.work->take(out_len, 256, tb, te);) {
        const int64_t r0 = tb * p.stride - p.pad, r1 = (te - 1) * p.stride - p.pad + int64_t(p.K - 1) * p.dil + 1;
        buf.resize(static_cast<size_t>((r1 - r0) * C));
        for (int64_t r = r0; r < r1; ++r) {
            float* row = buf.data() + (r - r0) * C;
            if (r < 0 || r >= L)
                std::fill(row, row + C, 0.0f);
            else
                act_row<Vec<kWide>>(row, xd + r * x_row, bias, p.act, p.slope, alpha, inv, C);
        }
        for (int64_t t = tb; t < te; ++t) {
            float* col = out + t * kc;
            for (int k = 0; k < p.K; ++k)
                std::memcpy(col + k * C, buf.data() + (t * p.stride - p.pad + int64_t(k) * p.dil - r0) * C,
                            C * sizeof(float));
            std::fill(col + p.K * C, col + kc, 0.0f);
        }
    }
}

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

FinishArgs finish_args(const FinishOp& p, const ggml_tensor* dst, int first_src) {
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
        for (; c + 8 <= C; c += 8) {
            V v = vload<V>(y + c);
            if (a.n_bias) v = v + vload<V>(a.b + c);
            if (res) v = v + vload<V>(res + c);
            if (acc) v = vload<V>(acc + c) + v;
            if (p.div != 1.0f) v = v / p.div;
            if (is_leaky) v = cbs::leaky(v, p.slope);
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

template <bool kWide>
CBS_INL void finish_body(ggml_tensor* dst, const FinishOp& p) {
    const ggml_tensor* y = dst->src[0];
    const FinishArgs a = finish_args(p, dst, 1);
    const int64_t C = y->ne[0];
    const float* yd = data_f32(y);
    float* out = static_cast<float*>(dst->data);
    for (int64_t t0, t1; p.work->take(y->ne[1], 64, t0, t1);)
        for (int64_t t = t0; t < t1; ++t) finish_row<Vec<kWide>>(out + t * C, yd + t * C, p, a, t, C);
}

// rgemm: y ne [n, rows] = A B, where row t of A is the kc floats at a + t * a_step and
// B is a weight in panels of 16 columns, ne [16, kc, n / 16]. For a convolution with
// dilation 1, A is the zero-padded (activated) signal itself: the K frames output frame
// t reads are contiguous there, and a_step is the stride in frames times the channels
// (the windows overlap: no columns buffer). The inner step does 12 multiply-adds of 8
// lanes for 6 rows x 16 columns, 12 independent accumulators (two rows at a time where
// the target has only 16 registers of 4 lanes). src: A, B.
struct RgemmOp {
    int64_t kc, a_step;
    Work* work;
};

template <bool kWide>
CBS_INL void rgemm_body(ggml_tensor* dst, const RgemmOp& p) {
    using V = Vec<kWide>;
    const float* a = data_f32(dst->src[0]);
    const float* b = data_f32(dst->src[1]);
    const int64_t n = dst->ne[0], rows = dst->ne[1], kc = p.kc, as = p.a_step;
    float* y = static_cast<float*>(dst->data);
    for (int64_t r0, r1; p.work->take(rows, 48, r0, r1);)
        for (int64_t co = 0; co < n; co += 16) {
            const float* panel = b + co * kc;
            int64_t t = r0;
            // The compiler barriers keep each row's broadcast next to its multiply-adds.
#define CBS_RGEMM_ROW(i)                   \
    {                                      \
        const float s = a##i[j];           \
        c##i##0 += w0 * s;                 \
        c##i##1 += w1 * s;                 \
        asm volatile("" ::: "memory");     \
    }
#define CBS_RGEMM_STORE(i)                           \
    vstore(y + (t + i) * n + co, c##i##0);           \
    vstore(y + (t + i) * n + co + 8, c##i##1);
            for (; kWide && t + 6 <= r1; t += 6) {
                const float *a0 = a + t * as, *a1 = a0 + as, *a2 = a1 + as, *a3 = a2 + as, *a4 = a3 + as, *a5 = a4 + as;
                V c00 = {}, c01 = {}, c10 = {}, c11 = {}, c20 = {}, c21 = {}, c30 = {}, c31 = {}, c40 = {}, c41 = {},
                  c50 = {}, c51 = {};
                for (int64_t j = 0; j < kc; ++j) {
                    const V w0 = vload<V>(panel + j * 16), w1 = vload<V>(panel + j * 16 + 8);
                    CBS_RGEMM_ROW(0)
                    CBS_RGEMM_ROW(1)
                    CBS_RGEMM_ROW(2)
                    CBS_RGEMM_ROW(3)
                    CBS_RGEMM_ROW(4)
                    CBS_RGEMM_ROW(5)
                }
                CBS_RGEMM_STORE(0)
                CBS_RGEMM_STORE(1)
                CBS_RGEMM_STORE(2)
                CBS_RGEMM_STORE(3)
                CBS_RGEMM_STORE(4)
                CBS_RGEMM_STORE(5)
            }
            for (; !kWide && t + 2 <= r1; t += 2) {
                const float *a0 = a + t * as, *a1 = a0 + as;
                V c00 = {}, c01 = {}, c10 = {}, c11 = {};
                for (int64_t j = 0; j < kc; ++j) {
                    const V w0 = vload<V>(panel + j * 16), w1 = vload<V>(panel + j * 16 + 8);
                    CBS_RGEMM_ROW(0)
                    CBS_RGEMM_ROW(1)
                }
                CBS_RGEMM_STORE(0)
                CBS_RGEMM_STORE(1)
            }
            for (; t < r1; ++t) {
                const float* a0 = a + t * as;
                V c00 = {}, c01 = {};
                for (int64_t j = 0; j < kc; ++j) {
                    const V w0 = vload<V>(panel + j * 16), w1 = vload<V>(panel + j * 16 + 8);
                    CBS_RGEMM_ROW(0)
                }
                CBS_RGEMM_STORE(0)
            }
#undef CBS_RGEMM_ROW
#undef CBS_RGEMM_STORE
        }
}

// ---------------------------------------------------------------------------
// FFT convolution
// ---------------------------------------------------------------------------
//
// A resblock Conv1d (C -> C channels, K taps, dilation d, "same" padding) costs 2 K C^2
// flops per output frame directly. Through the DFT it costs about 8 C^2 (N/2 + 1) /
// (N - K + 1): 1.4x less for K = 3, 3x for K = 7, 4.5x for K = 11 with N = 64. The
// signal is cut into polyphase tiles (phase q = t mod d makes the dilated conv an
// undilated one on every d-th frame); tile b of a phase holds the phase's frames
// b M - h .. b M - h + N - 1 (M = N - K + 1 outputs, h = (K - 1) / 2). Per DFT bin f
// the output spectrum is the C x C complex matrix conj(W_f) / N times the input
// spectrum: a circular cross-correlation, exact for the M outputs that do not wrap.
// The DFTs run 8 channels per SIMD vector, two real channel groups as the real and
// imaginary parts of one complex FFT. A conv is either one fused node (fconv, when all
// bins' weights fit in cache) or three (fft_in, cgemm, fft_out).

// Geometry of the tiles of one FFT convolution over L frames.
struct FftGeom {
    int N, K, dil;
    int64_t L;
    int M() const { return N - K + 1; }
    int64_t phase_len(int q) const { return (L - q + dil - 1) / dil; }
    int64_t blocks(int q) const { return (phase_len(q) + M() - 1) / M(); }
    int64_t tiles() const {
        int64_t n = 0;
        for (int q = 0; q < dil; ++q) n += blocks(q);
        return n;
    }
    void locate(int64_t tile, int& q, int64_t& b) const {
        for (q = 0; tile >= blocks(q); ++q) tile -= blocks(q);
        b = tile;
    }
};

// cos/sin(2 pi m / N), m < N, exact at multiples of N/4; and the bit reversal of log2 N bits.
struct FftTables {
    std::vector<float> cos, sin;
    std::vector<int> rev;
    explicit FftTables(int N) : cos(N), sin(N), rev(N) {
        for (int m = 0; m < N; ++m) {
            const double a = 2.0 * M_PI * m / N;
            cos[m] = (4 * m) % N == 0 ? static_cast<float>(m == 0 ? 1 : 4 * m == 2 * N ? -1 : 0) : static_cast<float>(std::cos(a));
            sin[m] = (4 * m) % N == 0 ? static_cast<float>(4 * m == N ? 1 : 4 * m == 3 * N ? -1 : 0) : static_cast<float>(std::sin(a));
            int r = 0;
            for (int bit = 1, rb = N >> 1; bit < N; bit <<= 1, rb >>= 1)
                if (m & bit) r |= rb;
            rev[m] = r;
        }
    }
};

const FftTables& fft_tables(int N) {
    static const FftTables t128(128), t64(64), t32(32), t16(16);
    switch (N) {
        case 128: return t128;
        case 64: return t64;
        case 32: return t32;
        default: return t16;
    }
}

// In-place complex FFT of N vectors given in bit-reversed order: the forward transform
// (exp(-2 pi i f n / N)) or, with inverse, the unscaled inverse. Radix-2 decimation in
// time with its stages taken two at a time (radix 2^2: the second stage's odd twiddles
// are the even ones times -i), so each pass over the data does two stages; a last
// radix-2 stage when log2 N is odd. The same arithmetic as plain radix-2.
template <class V>
CBS_INL void fft_vec(V* re, V* im, int N, const FftTables& t, bool inverse) {
    const float sg = inverse ? 1.0f : -1.0f;  // sign of the twiddles' sines
    int h = 1;
    for (; 4 * h <= N; h *= 4) {
        const int s1 = N / (2 * h), s2 = N / (4 * h);
        for (int i = 0; i < N; i += 4 * h)
            for (int j = 0; j < h; ++j) {
                V r0 = re[i + j], i0 = im[i + j], r1 = re[i + j + h], i1 = im[i + j + h];
                V r2 = re[i + j + 2 * h], i2 = im[i + j + 2 * h], r3 = re[i + j + 3 * h], i3 = im[i + j + 3 * h];
                if (j) {  // stage one: pairs (0, 1), (2, 3) with exp(-+2 pi i j / 2h)
                    const float wr = t.cos[j * s1], wi = sg * t.sin[j * s1];
                    V a = r1 * wr - i1 * wi, b = r1 * wi + i1 * wr;
                    r1 = a;
                    i1 = b;
                    a = r3 * wr - i3 * wi;
                    b = r3 * wi + i3 * wr;
                    r3 = a;
                    i3 = b;
                }
                V u0r = r0 + r1, u0i = i0 + i1, u1r = r0 - r1, u1i = i0 - i1;
                V u2r = r2 + r3, u2i = i2 + i3, u3r = r2 - r3, u3i = i2 - i3;
                if (j) {  // stage two: pairs (0, 2) with exp(-+2 pi i j / 4h), (1, 3) with that times -+i
                    const float wr = t.cos[j * s2], wi = sg * t.sin[j * s2];
                    V a = u2r * wr - u2i * wi, b = u2r * wi + u2i * wr;
                    u2r = a;
                    u2i = b;
                    a = u3r * wr - u3i * wi;
                    b = u3r * wi + u3i * wr;
                    u3r = a;
                    u3i = b;
                }
                const V v3r = inverse ? -u3i : u3i, v3i = inverse ? u3r : -u3r;
                re[i + j] = u0r + u2r;
                im[i + j] = u0i + u2i;
                re[i + j + 2 * h] = u0r - u2r;
                im[i + j + 2 * h] = u0i - u2i;
                re[i + j + h] = u1r + v3r;
                im[i + j + h] = u1i + v3i;
                re[i + j + 3 * h] = u1r - v3r;
                im[i + j + 3 * h] = u1i - v3i;
            }
    }
    if (h < N)  // the last radix-2 stage
        for (int j = 0; j < h; ++j) {
            const float wr = t.cos[j], wi = sg * t.sin[j];
            const V br = re[j + h], bi = im[j + h];
            const V vr = br * wr - bi * wi, vi = br * wi + bi * wr;
            const V ur = re[j], ui = im[j];
            re[j] = ur + vr;
            im[j] = ui + vi;
            re[j + h] = ur - vr;
            im[j + h] = ui - vi;
        }
}

// Where the spectra of tiles live: value v (C real parts, then C imaginary parts) of
// bin f of a tile at tile_base(tile) + f * bin_stride + v.
//
// Between graph nodes (fft_in -> cgemm -> fft_out) the tiles are stored in chunks of
// chunk_tiles(C) tiles, ne [block, N/2 + 1, chunks]: per chunk and bin a block of the
// chunk's tiles side by side, padded by 16 floats so that the bins of one tile do not
// all fall in the same cache set. A chunk (a few hundred KB for N = 64) is one
// contiguous piece of memory.
inline int64_t chunk_tiles(int64_t C) { return 3 * std::max<int64_t>(1, 384 / C); }  // cgemm takes 3 at a time
inline int64_t spec_block(int64_t C) { return chunk_tiles(C) * 2 * C + 16; }
inline int64_t spec_tile_offset(int64_t tile, int64_t C, int n_bins) {
    const int64_t ct = chunk_tiles(C);
    return (tile / ct) * n_bins * spec_block(C) + (tile % ct) * 2 * C;
}

// The N frames of a tile, act(x + bias) (zeros outside the signal), into rows [N][C].
struct ActIn {
    const float *x, *bias, *alpha, *inv;
    Act act;
    float slope;
};

template <class V>
CBS_INL void tile_rows(float* rows, const ActIn& in, const FftGeom& g, int64_t tile, int64_t C) {
    int q;
    int64_t b;
    g.locate(tile, q, b);
    const int64_t h = (g.K - 1) / 2;
    for (int i = 0; i < g.N; ++i) {
        const int64_t n = b * g.M() - h + i, r = q + n * g.dil;
        float* row = rows + i * C;
        if (n < 0 || r >= g.L)
            std::fill(row, row + C, 0.0f);
        else
            act_row<V>(row, in.x + r * C, in.bias, in.act, in.slope, in.alpha, in.inv, C);
    }
}

// Rows [N][C] -> the tile's spectra (bins 0..N/2). Channels c0..c0+7 go in as the real
// part and c0+8..c0+15 as the imaginary part of one complex FFT; then
// A = (Z[f] + conj Z[N-f]) / 2 and B = (Z[f] - conj Z[N-f]) / 2i.
template <class V>
CBS_INL void tile_forward(float* spec, int64_t bin_stride, const float* rows, int N, int64_t C,
                          const FftTables& tab) {
    V re[128], im[128];
    for (int64_t c0 = 0; c0 < C; c0 += 16) {
        for (int i = 0; i < N; ++i) {
            re[tab.rev[i]] = vload<V>(rows + i * C + c0);
            im[tab.rev[i]] = vload<V>(rows + i * C + c0 + 8);
        }
        fft_vec<V>(re, im, N, tab, false);
        for (int f = 0; f <= N / 2; ++f) {
            const int fc = (N - f) % N;
            float* o = spec + f * bin_stride;
            vstore(o + c0, (re[f] + re[fc]) * 0.5f);
            vstore(o + C + c0, (im[f] - im[fc]) * 0.5f);
            vstore(o + c0 + 8, (im[f] + im[fc]) * 0.5f);
            vstore(o + C + c0 + 8, (re[fc] - re[f]) * 0.5f);
        }
    }
}

// The tile's output spectra (1/N included) -> its M output frames, finished into y.
template <class V>
CBS_INL void tile_inverse(float* y, const float* spec, int64_t bin_stride, const FftGeom& g, int64_t tile, int64_t C,
                          const FftTables& tab, float* rows, const FinishOp& fin, const FinishArgs& fa) {
    const int N = g.N, M = g.M();
    V re[128], im[128];
    for (int64_t c0 = 0; c0 < C; c0 += 16) {
        // Z = A + iB over all N bins (A, B Hermitian), in bit-reversed order
        for (int f = 0; f <= N / 2; ++f) {
            const float* s = spec + f * bin_stride;
            const V ar = vload<V>(s + c0), ai = vload<V>(s + C + c0);
            const V br = vload<V>(s + c0 + 8), bi = vload<V>(s + C + c0 + 8);
            re[tab.rev[f]] = ar - bi;
            im[tab.rev[f]] = ai + br;
            if (f > 0 && f < N / 2) {
                re[tab.rev[N - f]] = ar + bi;
                im[tab.rev[N - f]] = br - ai;
            }
        }
        fft_vec<V>(re, im, N, tab, true);
        for (int j = 0; j < M; ++j) {
            vstore(rows + j * C + c0, re[j]);
            vstore(rows + j * C + c0 + 8, im[j]);
        }
    }
    int q;
    int64_t b;
    g.locate(tile, q, b);
    for (int j = 0; j < M; ++j) {
        const int64_t r = q + (b * M + j) * g.dil;
        if (r >= g.L) break;
        finish_row<V>(y + r * C, rows + j * C, fin, fa, r, C);
    }
}

// W_f = conj(sum_k w_k exp(-2 pi i f k / N)) / N for all C x C channel pairs, from the
// conv weight wt ne [C (out), C (in), K], as cmul_bin reads it: per 16 output channels
// and input channel, Wr of the 16 then Wi of the 16 (2 C^2 floats).
template <class V>
CBS_INL void weight_bin(float* wf, const float* wt, int64_t C, int K, int N, int f, const FftTables& tab) {
    float cs[64], sn[64];
    const float scale = 1.0f / static_cast<float>(N);
    for (int k = 0; k < K; ++k) {
        const int m = (f * k) % N;
        cs[k] = tab.cos[m] * scale;
        sn[k] = tab.sin[m] * scale;
    }
    // tap by tap, reading the weight in order (its taps lie C^2 floats apart)
    for (int64_t co = 0; co < C; co += 16) {
        float* o = wf + co * C * 2;
        for (int k = 0; k < K; ++k)
            for (int64_t ci = 0; ci < C; ++ci) {
                const float* w = wt + (k * C + ci) * C + co;
                const V w0 = vload<V>(w), w1 = vload<V>(w + 8);
                float* oc = o + ci * 32;
                vstore(oc, (k ? vload<V>(oc) : V{}) + w0 * cs[k]);
                vstore(oc + 8, (k ? vload<V>(oc + 8) : V{}) + w1 * cs[k]);
                vstore(oc + 16, (k ? vload<V>(oc + 16) : V{}) + w0 * sn[k]);
                vstore(oc + 24, (k ? vload<V>(oc + 24) : V{}) + w1 * sn[k]);
            }
    }
}

// One bin of n_t tiles (2C values each, side by side): Y = W_f X as complex numbers,
// Yr = Wr Xr - Wi Xi, Yi = Wi Xr + Wr Xi. The inner step does 24 multiply-adds of 8
// lanes for 3 tiles x 16 output channels: 12 accumulators, each taking two dependent
// multiply-adds per step (fewer tiles would wait on the multiply-add latency). The
// compiler barriers keep each tile's two broadcasts next to their four multiply-adds:
// hoisted, they would push accumulators out to the stack. DC and Nyquist bins are real.
template <bool kWide>
CBS_INL void cmul_bin(float* y, const float* x, const float* wf, int64_t C, int64_t n_t, bool real, int64_t co_begin,
                      int64_t co_end) {
    using V = Vec<kWide>;
    const int64_t ts = 2 * C;
    for (int64_t co = co_begin; co < co_end; co += 16) {
        const float* wb = wf + co * C * 2;
        if (real) {  // up to 3 tiles at a time: 6 independent accumulators
            for (int64_t t = 0; t < n_t; t += 3) {
                const int64_t m = std::min<int64_t>(3, n_t - t);
                const float* xt = x + t * ts;
                V a[3][2] = {};
                for (int64_t ci = 0; ci < C; ++ci) {
                    const V w0 = vload<V>(wb + ci * 32), w1 = vload<V>(wb + ci * 32 + 8);
                    for (int64_t j = 0; j < m; ++j) {
                        a[j][0] += w0 * xt[j * ts + ci];
                        a[j][1] += w1 * xt[j * ts + ci];
                    }
                }
                for (int64_t j = 0; j < m; ++j) {
                    float* yt = y + (t + j) * ts;
                    vstore(yt + co, a[j][0]);
                    vstore(yt + co + 8, a[j][1]);
                    vstore(yt + C + co, V{});
                    vstore(yt + C + co + 8, V{});
                }
            }
            continue;
        }
#define CBS_CMUL_TILE(x, r, i)                \
    {                                         \
        const float a = x[ci], b = x[C + ci]; \
        r += wr * a;                          \
        r -= wi * b;                          \
        i += wi * a;                          \
        i += wr * b;                          \
        asm volatile("" ::: "memory");        \
    }
#define CBS_CMUL_STORE(yt, r0, r1, i0, i1) \
    vstore(yt + co, r0);                   \
    vstore(yt + co + 8, r1);               \
    vstore(yt + C + co, i0);               \
    vstore(yt + C + co + 8, i1);
        int64_t t = 0;
        for (; kWide && t + 3 <= n_t; t += 3) {
            const float *x0 = x + t * ts, *x1 = x0 + ts, *x2 = x1 + ts;
            V r00 = {}, r01 = {}, i00 = {}, i01 = {}, r10 = {}, r11 = {}, i10 = {}, i11 = {}, r20 = {}, r21 = {},
               i20 = {}, i21 = {};
            for (int64_t ci = 0; ci < C; ++ci) {
                const float* w = wb + ci * 32;
                V wr = vload<V>(w), wi = vload<V>(w + 16);
                CBS_CMUL_TILE(x0, r00, i00)
                CBS_CMUL_TILE(x1, r10, i10)
                CBS_CMUL_TILE(x2, r20, i20)
                wr = vload<V>(w + 8);
                wi = vload<V>(w + 24);
                CBS_CMUL_TILE(x0, r01, i01)
                CBS_CMUL_TILE(x1, r11, i11)
                CBS_CMUL_TILE(x2, r21, i21)
            }
            float* y0 = y + t * ts;
            CBS_CMUL_STORE(y0, r00, r01, i00, i01)
            CBS_CMUL_STORE((y0 + ts), r10, r11, i10, i11)
            CBS_CMUL_STORE((y0 + 2 * ts), r20, r21, i20, i21)
        }
        for (; t < n_t; ++t) {  // the last one or two (every one with 16 vector registers or fewer)
            const float* x0 = x + t * ts;
            V r00 = {}, r01 = {}, i00 = {}, i01 = {};
            for (int64_t ci = 0; ci < C; ++ci) {
                const float* w = wb + ci * 32;
                V wr = vload<V>(w), wi = vload<V>(w + 16);
                CBS_CMUL_TILE(x0, r00, i00)
                wr = vload<V>(w + 8);
                wi = vload<V>(w + 24);
                CBS_CMUL_TILE(x0, r01, i01)
            }
            float* y0 = y + t * ts;
            CBS_CMUL_STORE(y0, r00, r01, i00, i01)
        }
#undef CBS_CMUL_TILE
#undef CBS_CMUL_STORE
    }
}

// The input side of an FFT conv: x, then bias when has_bias, then alpha and inv_alpha
// when act == snake, from src[first] on.
struct FftInOp {
    int N, K, dil;
    bool has_bias;
    Act act;
    float slope;
    Work* work;  // fft_in_kernel's; unused inside fconv
};

ActIn act_in(const FftInOp& p, const ggml_tensor* dst, int first) {
    int si = first;
    ActIn in{data_f32(dst->src[si++]), nullptr, nullptr, nullptr, p.act, p.slope};
    if (p.has_bias) in.bias = data_f32(dst->src[si++]);
    if (p.act == Act::snake) {
        in.alpha = data_f32(dst->src[si++]);
        in.inv = data_f32(dst->src[si++]);
    }
    return in;
}

int act_in_srcs(const FftInOp& p) { return 1 + (p.has_bias ? 1 : 0) + (p.act == Act::snake ? 2 : 0); }

// fft_in: x ne [C, L] -> the spectra of act(x + bias) of all tiles, chunked.
template <bool kWide>
CBS_INL void fft_in_body(ggml_tensor* dst, const FftInOp& p) {
    const ActIn in = act_in(p, dst, 0);
    const int64_t C = dst->src[0]->ne[0];
    const FftGeom g{p.N, p.K, p.dil, dst->src[0]->ne[1]};
    const int n_bins = p.N / 2 + 1;
    const FftTables& tab = fft_tables(p.N);
    float* out = static_cast<float*>(dst->data);
    thread_local std::vector<float> rows;
    rows.resize(static_cast<size_t>(p.N * C));
    for (int64_t t0, t1; p.work->take(g.tiles(), 4, t0, t1);)
        for (int64_t tile = t0; tile < t1; ++tile) {
            tile_rows<Vec<kWide>>(rows.data(), in, g, tile, C);
            tile_forward<Vec<kWide>>(out + spec_tile_offset(tile, C, n_bins), spec_block(C), rows.data(), p.N, C, tab);
        }
}

// cgemm: the per-bin products of all tiles' spectra with W_f, from the conv weight wt
// ne [C (out), C (in), K], chunked spectra in and out. A thread takes whole bins: W_f is
// made once into a buffer, then each chunk's block of the bin is read once for all
// output channels. src: X, wt.
struct CgemmOp {
    int N, K;
    int64_t tiles;  // the rest of the last chunk is left alone
    Work* work;
};

template <bool kWide>
CBS_INL void cgemm_body(ggml_tensor* dst, const CgemmOp& p) {
    const ggml_tensor* X = dst->src[0];
    const ggml_tensor* wt = dst->src[1];
    const int64_t C = wt->ne[0], n_chunks = X->ne[2], ct = chunk_tiles(C);
    const int n_bins = static_cast<int>(X->ne[1]);
    const FftTables& tab = fft_tables(p.N);
    thread_local std::vector<float> wf;
    wf.resize(static_cast<size_t>(2 * C * C));
    for (int64_t f0, f1; p.work->take(n_bins, 1, f0, f1);) {
        const int f = static_cast<int>(f0);
        weight_bin<Vec<kWide>>(wf.data(), data_f32(wt), C, p.K, p.N, f, tab);
        // 16 output channels at a time over all chunks: their part of W_f stays in L1
        // and the bin's spectra (a few hundred KB) in L2.
        for (int64_t co = 0; co < C; co += 16)
            for (int64_t chunk = 0; chunk < n_chunks; ++chunk) {
                const int64_t off = (chunk * n_bins + f) * spec_block(C);
                cmul_bin<kWide>(static_cast<float*>(dst->data) + off, data_f32(X) + off, wf.data(), C,
                         std::min(ct, p.tiles - chunk * ct), f == 0 || 2 * f == p.N, co, co + 16);
            }
    }
}

// fft_out: chunked output spectra -> y ne [C, L] through the inverse DFT and finish.
// src: Y, then finish's b, res, acc.
struct FftOutOp {
    int N, K, dil;
    FinishOp fin;
    Work* work;
};

template <bool kWide>
CBS_INL void fft_out_body(ggml_tensor* dst, const FftOutOp& p) {
    const FinishArgs fa = finish_args(p.fin, dst, 1);
    const int64_t C = dst->ne[0];
    const FftGeom g{p.N, p.K, p.dil, dst->ne[1]};
    const int n_bins = p.N / 2 + 1;
    const FftTables& tab = fft_tables(p.N);
    const float* yd = data_f32(dst->src[0]);
    thread_local std::vector<float> rows;
    rows.resize(static_cast<size_t>(p.N * C));
    for (int64_t t0, t1; p.work->take(g.tiles(), 4, t0, t1);)
        for (int64_t tile = t0; tile < t1; ++tile)
            tile_inverse<Vec<kWide>>(static_cast<float*>(dst->data), yd + spec_tile_offset(tile, C, n_bins), spec_block(C), g,
                         tile, C, tab, rows.data(), p.fin, fa);
}

// wprep: W_f of every bin (N/2 + 1 times 2 C^2 floats) from the conv weight wt, for fconv.
struct WprepOp {
    int N, K;
    Work* work;
};

template <bool kWide>
CBS_INL void wprep_body(ggml_tensor* dst, const WprepOp& p) {
    const ggml_tensor* wt = dst->src[0];
    const int64_t C = wt->ne[0];
    const FftTables& tab = fft_tables(p.N);
    for (int64_t f0, f1; p.work->take(p.N / 2 + 1, 1, f0, f1);) {
        const int f = static_cast<int>(f0);
        weight_bin<Vec<kWide>>(static_cast<float*>(dst->data) + f * 2 * C * C, data_f32(wt), C, p.K, p.N, f, tab);
    }
}

// fconv: a whole FFT conv in one node when all bins' W_f fit in cache (small C): per
// chunk of tiles, the forward transforms into a buffer that stays in L2, the products
// bin by bin (in place, through a one-bin buffer), the inverse transforms and finish.
// No spectra go through memory. src: the FftInOp inputs, then W (wprep), then finish's
// b, res, acc.
struct FconvOp {
    FftInOp in;
    FinishOp fin;
    int64_t chunk;  // tiles per chunk
    Work* work;
};

template <bool kWide>
CBS_INL void fconv_body(ggml_tensor* dst, const FconvOp& p) {
    const ActIn in = act_in(p.in, dst, 0);
    const int wsrc = act_in_srcs(p.in);
    const float* W = data_f32(dst->src[wsrc]);
    const FinishArgs fa = finish_args(p.fin, dst, wsrc + 1);
    const int64_t C = dst->ne[0], ts = 2 * C, ct = p.chunk, bs = ct * ts + 16;
    const int N = p.in.N, n_bins = N / 2 + 1;
    const FftGeom g{N, p.in.K, p.in.dil, dst->ne[1]};
    const FftTables& tab = fft_tables(N);
    thread_local std::vector<float> rows, spec, tmp;
    rows.resize(static_cast<size_t>(N * C));
    spec.resize(static_cast<size_t>(n_bins * bs));
    tmp.resize(static_cast<size_t>(ct * ts));
    const int64_t tiles = g.tiles(), n_chunks = (tiles + ct - 1) / ct;
    for (int64_t chunk, c1; p.work->take(n_chunks, 1, chunk, c1);) {
        const int64_t first = chunk * ct, n_t = std::min(ct, tiles - first);
        for (int64_t t = 0; t < n_t; ++t) {
            tile_rows<Vec<kWide>>(rows.data(), in, g, first + t, C);
            tile_forward<Vec<kWide>>(spec.data() + t * ts, bs, rows.data(), N, C, tab);
        }
        for (int f = 0; f < n_bins; ++f) {
            float* sf = spec.data() + f * bs;
            cmul_bin<kWide>(tmp.data(), sf, W + f * 2 * C * C, C, n_t, f == 0 || 2 * f == N, 0, C);
            std::memcpy(sf, tmp.data(), static_cast<size_t>(n_t * ts) * sizeof(float));
        }
        for (int64_t t = 0; t < n_t; ++t)
            tile_inverse<Vec<kWide>>(static_cast<float*>(dst->data), spec.data() + t * ts, bs, g, first + t, C, tab, rows.data(),
                         p.fin, fa);
    }
}


// ConvTranspose1d's overlap-add: cols ne [K*Cout, L_in] (row k*Cout + co of frame i
// is input frame i's contribution to output frame i*stride + k - pad) -> ne [Cout,
// T_out] with the bias, optionally ReflectionPad1d((1, 0)) (output frame 1 repeated
// in front), then + add (the source branch). src: cols, b, add.
struct UpOp {
    int K, stride, pad;
    bool reflect_first;
    Work* work;
};

template <bool kWide>
CBS_INL void up_body(ggml_tensor* dst, const UpOp& p) {
    const ggml_tensor* cols = dst->src[0];
    const float* b = data_f32(dst->src[1]);
    const float* add = data_f32(dst->src[2]);
    const int64_t C = dst->ne[0], T = dst->ne[1], L_in = cols->ne[1], kc = cols->ne[0];
    const float* cd = data_f32(cols);
    float* out = static_cast<float*>(dst->data);
    auto frame = [&](int64_t t) {
        const int64_t u = p.reflect_first ? (t == 0 ? 1 : t - 1) : t;  // frame of the unpadded output
        const int64_t a = u + p.pad;
        const int64_t i_min = std::max<int64_t>(0, (a - p.K + p.stride) / p.stride);
        const int64_t i_max = std::min<int64_t>(L_in - 1, a / p.stride);
        float* o = out + t * C;
        std::fill(o, o + C, 0.0f);
        for (int64_t i = i_min; i <= i_max; ++i) {
            const int64_t k = a - i * p.stride;
            if (k < 0 || k >= p.K) continue;
            const float* src = cd + i * kc + k * C;
            for (int64_t c = 0; c < C; ++c) o[c] += src[c];
        }
        const float* ad = add + t * C;
        for (int64_t c = 0; c < C; ++c) o[c] = (o[c] + b[c]) + ad[c];
    };
    for (int64_t t0, t1; p.work->take(T, 64, t0, t1);)
        for (int64_t t = t0; t < t1; ++t) frame(t);
}

// The ggml entry points: each kernel built twice, for AVX2 + FMA (wide register blocks)
// and for the compiler's baseline target, picked at run time.
#ifdef CBS_HIFT_X86
bool has_avx2_fma() {
    static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
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
CBS_KERNEL(cols, ColsOp)
CBS_KERNEL(rgemm, RgemmOp)
CBS_KERNEL(finish, FinishOp)
CBS_KERNEL(up, UpOp)
CBS_KERNEL(fft_in, FftInOp)
CBS_KERNEL(fft_out, FftOutOp)
CBS_KERNEL(cgemm, CgemmOp)
CBS_KERNEL(wprep, WprepOp)
CBS_KERNEL(fconv, FconvOp)
#undef CBS_KERNEL

}  // namespace

// ---------------------------------------------------------------------------
// Weights
// ---------------------------------------------------------------------------

// A weight [kc][n] (row-major, columns fastest) in rgemm's panels of 16 columns,
// [n16 / 16][kc][16], the columns past n zero.
static std::vector<float> panels16(const std::vector<float>& w, int64_t kc, int64_t n, int64_t n16) {
    std::vector<float> out(static_cast<size_t>(kc * n16), 0.0f);
    for (int64_t j = 0; j < kc; ++j)
        for (int64_t c = 0; c < n; ++c) out[(c / 16 * kc + j) * 16 + c % 16] = w[j * n + c];
    return out;
}

Hift::Hift(const ModelFile& mf, ggml_backend_t backend)
    : hp_(HiftHparams::from(mf)), backend_(backend), runner_(backend, 4096) {
    // The kernels above read and write tensor memory directly.
    if (!ggml_backend_is_cpu(backend_)) throw EngineError("the HiFT vocoder runs on the CPU backend only");
    const size_t n_tensors = mf.tensors().size() + 16;
    own_ctx_ = ggml_init({ggml_tensor_overhead() * n_tensors, nullptr, true});
    auto t = [&](const std::string& name) { return mf.tensor("hift." + name); };
    const size_t n_up = hp_.upsample_rates.size();

    // f0 predictor: condnet.{0,2,4,...} Conv1d (ELU between), then a Linear classifier.
    for (int i = 0; mf.find_tensor("hift.f0_predictor.condnet." + std::to_string(i) + ".weight"); i += 2) {
        const std::string name = "f0_predictor.condnet." + std::to_string(i);
        const int K = static_cast<int>(t(name + ".weight")->ne[0]);
        f0_convs_.push_back(conv(mf, name, 1, K / 2, 1));  // Conv1d(kernel_size=3, padding=1)
    }
    if (f0_convs_.empty()) throw EngineError(mf.path() + ": no HiFT f0 predictor");
    f0_cls_w_ = f32_weight(mf, "hift.f0_predictor.classifier.weight");
    f0_cls_b_ = f32_weight(mf, "hift.f0_predictor.classifier.bias");
    hp_.in_channels = static_cast<int>(t("conv_pre.weight")->ne[1]);
    for (size_t i = 1; i < f0_convs_.size(); ++i)
        if (f0_convs_[i].cin != f0_convs_[i - 1].cout)
            throw EngineError(mf.path() + ": HiFT f0 predictor shapes disagree");
    if (f0_convs_[0].cin != hp_.in_channels || f0_cls_w_->ne[0] != f0_convs_.back().cout ||
        ggml_nelements(f0_cls_w_) != f0_cls_w_->ne[0] || ggml_nelements(f0_cls_b_) != 1)
        throw EngineError(mf.path() + ": HiFT f0 predictor shapes disagree");

    const int k_pre = static_cast<int>(t("conv_pre.weight")->ne[0]);
    conv_pre_ = conv(mf, "conv_pre", 1, k_pre / 2, 1);  // Conv1d(in, base, 7, 1, padding=3)
    if (conv_pre_.cout != hp_.base_channels)
        throw EngineError(mf.path() + ": hift.conv_pre disagrees with chatterbox.hift.base_channels");

    // ups[i]: ConvTranspose1d(base/2^i, base/2^(i+1), k, u, padding=(k-u)/2): one matrix
    // product to ne [K*Cout, L] (weight re-ordered to ne [Cin, K*Cout], row k*Cout + co),
    // then up_kernel's overlap-add.
    for (size_t i = 0; i < n_up; ++i) {
        const std::string name = "hift.ups." + std::to_string(i);
        const ggml_tensor* w = mf.tensor(name + ".weight");  // ne [K, Cout, Cin]
        const int u = hp_.upsample_rates[i], K = hp_.upsample_kernel_sizes[i];
        const int64_t cin = hp_.base_channels >> i, cout = hp_.base_channels >> (i + 1);
        if (w->ne[0] != K || w->ne[1] != cout || w->ne[2] != cin || K < u)
            throw EngineError(mf.path() + ": " + name + " shape disagrees with the HiFT metadata");
        std::vector<float> src = mf.read_f32(w), t(src.size());
        for (int64_t ci = 0; ci < cin; ++ci)
            for (int64_t co = 0; co < cout; ++co)
                for (int64_t k = 0; k < K; ++k) t[ci * K * cout + k * cout + co] = src[(ci * cout + co) * K + k];
        const int64_t n16 = round_up(K * cout, 16);
        Up up;
        up.wt = upload(panels16(t, cin, K * cout, n16), 16, cin * n16 / 16);
        up.b = f32_weight(mf, name + ".bias");
        if (ggml_nelements(up.b) != cout) throw EngineError(mf.path() + ": " + name + ".bias has the wrong size");
        up.K = K;
        up.stride = u;
        up.pad = (K - u) / 2;
        up.cout = static_cast<int>(cout);
        ups_.push_back(up);
    }

    // Source branch: downsample_rates = [1] + upsample_rates[::-1][:-1], cumulated and
    // reversed: source_downs[i] has stride u (kernel 2u, padding u/2; a 1x1 conv when u == 1).
    std::vector<int64_t> cum(n_up);
    {
        std::vector<int64_t> down(n_up);
        down[0] = 1;
        for (size_t i = 1; i < n_up; ++i) down[i] = hp_.upsample_rates[n_up - i];
        std::partial_sum(down.begin(), down.end(), cum.begin(), std::multiplies<int64_t>());
        std::reverse(cum.begin(), cum.end());
    }
    for (size_t i = 0; i < n_up; ++i) {
        const int u = static_cast<int>(cum[i]);
        const std::string name = "source_downs." + std::to_string(i);
        const int64_t K = t(name + ".weight")->ne[0];
        if (K != (u == 1 ? 1 : 2 * u) || t(name + ".weight")->ne[1] != hp_.n_fft + 2 ||
            t(name + ".weight")->ne[2] != ups_[i].cout)
            throw EngineError(mf.path() + ": hift." + name + " shape disagrees with the HiFT metadata");
        source_downs_.push_back(conv(mf, name, u, u == 1 ? 0 : u / 2, 1));
        source_resblocks_.push_back(resblock(mf, "source_resblocks." + std::to_string(i),
                                             hp_.source_resblock_kernel_sizes[i], hp_.source_resblock_dilations));
    }
    for (size_t i = 0; i < n_up; ++i)
        for (size_t j = 0; j < hp_.resblock_kernel_sizes.size(); ++j)
            resblocks_.push_back(resblock(mf, "resblocks." + std::to_string(i * hp_.resblock_kernel_sizes.size() + j),
                                          hp_.resblock_kernel_sizes[j], hp_.resblock_dilations));
    for (size_t i = 0; i < n_up; ++i)
        for (const ResBlock* rb : {&source_resblocks_[i], &resblocks_[i * hp_.resblock_kernel_sizes.size()]})
            if (rb->convs1[0].cin != ups_[i].cout)
                throw EngineError(mf.path() + ": HiFT resblock channels disagree with the upsampling layers");
    const int k_post = static_cast<int>(t("conv_post.weight")->ne[0]);
    conv_post_ = conv(mf, "conv_post", 1, k_post / 2, 1);  // Conv1d(ch, n_fft + 2, 7, 1, padding=3)
    if (conv_post_.cout != hp_.n_fft + 2 || conv_post_.cin != ups_.back().cout)
        throw EngineError(mf.path() + ": hift.conv_post disagrees with chatterbox.hift.istft_n_fft");
    if (conv_post_.w->ne[0] != int64_t{conv_post_.K} * conv_post_.cin)  // conv_rows reads no padding
        throw EngineError(mf.path() + ": hift.conv_post needs K * channels to be a multiple of 8");
    post_bias_ = mf.read_f32(mf.tensor("hift.conv_post.bias"));

    // scipy.signal.get_window("hann", n_fft, fftbins=True): the periodic Hann window, as float32.
    for (int n = 0; n < hp_.n_fft; ++n)
        window_.push_back(static_cast<float>(0.5 - 0.5 * std::cos(2.0 * M_PI * n / hp_.n_fft)));

    own_buf_ = ggml_backend_alloc_ctx_tensors(own_ctx_, backend_);
    if (!own_buf_) throw EngineError("not enough memory for the HiFT weights");
    for (auto& [tensor, data] : pending_) ggml_backend_tensor_set(tensor, data.data(), 0, ggml_nbytes(tensor));
    pending_.clear();
    pending_.shrink_to_fit();
}

Hift::~Hift() {
    if (own_buf_) ggml_backend_buffer_free(own_buf_);
    if (own_ctx_) ggml_free(own_ctx_);
}

ggml_tensor* Hift::upload(std::vector<float> data, int64_t ne0, int64_t ne1) {
    ggml_tensor* t = ggml_new_tensor_2d(own_ctx_, GGML_TYPE_F32, ne0, ne1);
    pending_.emplace_back(t, std::move(data));
    return t;
}

// The model's tensor when it is F32, otherwise an F32 copy (HiFT runs in F32).
ggml_tensor* Hift::f32_weight(const ModelFile& mf, const std::string& name) {
    ggml_tensor* t = mf.tensor(name);
    if (t->type == GGML_TYPE_F32) return t;
    ggml_tensor* c = ggml_new_tensor(own_ctx_, GGML_TYPE_F32, GGML_MAX_DIMS, t->ne);
    pending_.emplace_back(c, mf.read_f32(t));
    return c;
}

// The FFT size for a conv (0: direct): resblock convs (C -> C, stride 1, odd K, "same"
// padding) with C a multiple of the 16 channels the FFT kernels take at a time. N = 64
// measured best for K = 3..11 (K = 3 gains 1.4x in products, K = 11 4.5x).
static int fft_size(int64_t K, int64_t cin, int64_t cout, int stride, int pad, int dil) {
    constexpr int N = 64;
    if (stride != 1 || cin != cout || cin % 16 != 0 || K % 2 == 0 || pad != dil * (K - 1) / 2 || 2 * K > N)
        return 0;
    return N;
}

Hift::Conv Hift::conv(const ModelFile& mf, const std::string& name, int stride, int pad, int dil, bool allow_fft) {
    const ggml_tensor* w = mf.tensor("hift." + name + ".weight");  // ne [K, Cin, Cout]
    const int64_t K = w->ne[0], cin = w->ne[1], cout = w->ne[2];
    Conv c;
    c.fft_n = allow_fft ? fft_size(K, cin, cout, stride, pad, dil) : 0;
    std::vector<float> src = mf.read_f32(w);
    if (c.fft_n) {
        // ne [Cout, Cin, K], output channel fastest (cgemm_kernel's layout)
        std::vector<float> dst(src.size());
        for (int64_t oc = 0; oc < cout; ++oc)
            for (int64_t ci = 0; ci < cin; ++ci)
                for (int64_t k = 0; k < K; ++k) dst[(k * cin + ci) * cout + oc] = src[(oc * cin + ci) * K + k];
        c.w = upload(std::move(dst), cout, cin * K);
    } else if (cout % 16 == 0 && dil == 1) {
        // rgemm's panels of the weight [K * Cin][Cout] (row k Cin + ci)
        std::vector<float> t(src.size());
        for (int64_t oc = 0; oc < cout; ++oc)
            for (int64_t ci = 0; ci < cin; ++ci)
                for (int64_t k = 0; k < K; ++k) t[(k * cin + ci) * cout + oc] = src[(oc * cin + ci) * K + k];
        c.w = upload(panels16(t, K * cin, cout, cout), 16, K * cin * cout / 16);
        c.panels = true;
    } else {
        const int64_t kc = round_up(K * cin, 8), cout_pad = round_up(cout, 4);
        std::vector<float> dst(static_cast<size_t>(kc * cout_pad), 0.0f);
        for (int64_t oc = 0; oc < cout; ++oc)
            for (int64_t ci = 0; ci < cin; ++ci)
                for (int64_t k = 0; k < K; ++k) dst[oc * kc + k * cin + ci] = src[(oc * cin + ci) * K + k];
        c.w = upload(std::move(dst), kc, cout_pad);
    }
    c.b = f32_weight(mf, "hift." + name + ".bias");
    if (ggml_nelements(c.b) != cout) throw EngineError(mf.path() + ": hift." + name + ".bias has the wrong size");
    c.K = static_cast<int>(K);
    c.cin = static_cast<int>(cin);
    c.cout = static_cast<int>(cout);
    c.stride = stride;
    c.pad = pad;
    c.dil = dil;
    return c;
}

Hift::Snake Hift::snake(const ModelFile& mf, const std::string& name) {
    const ggml_tensor* a = mf.tensor("hift." + name + ".alpha");
    std::vector<float> alpha = mf.read_f32(a), inv(alpha.size());
    // Snake: x + 1 / (alpha + no_div_by_zero) * sin(alpha x)^2, no_div_by_zero = 1e-9
    // (float32 arithmetic, as torch does it).
    for (size_t i = 0; i < alpha.size(); ++i) inv[i] = 1.0f / (alpha[i] + 1e-9f);
    const auto n = static_cast<int64_t>(alpha.size());
    Snake s;
    s.alpha = upload(std::move(alpha), n);
    s.inv_alpha = upload(std::move(inv), n);
    return s;
}

Hift::ResBlock Hift::resblock(const ModelFile& mf, const std::string& prefix, int kernel,
                              const std::vector<int>& dilations) {
    ResBlock rb;
    for (size_t i = 0; i < dilations.size(); ++i) {
        const std::string n = std::to_string(i);
        const int d = dilations[i];
        // get_padding(k, d) = (k*d - d) / 2
        rb.convs1.push_back(conv(mf, prefix + ".convs1." + n, 1, (kernel * d - d) / 2, d, true));
        rb.convs2.push_back(conv(mf, prefix + ".convs2." + n, 1, (kernel - 1) / 2, 1, true));
        const Conv &c1 = rb.convs1.back(), &c2 = rb.convs2.back();
        if (c1.K != kernel || c2.K != kernel || c1.cin != c1.cout || c2.cin != c1.cout || c2.cout != c1.cout ||
            (i > 0 && c1.cin != rb.convs1[0].cin))
            throw EngineError(mf.path() + ": hift." + prefix + " shapes disagree with the HiFT metadata");
        rb.act1.push_back(snake(mf, prefix + ".activations1." + n));
        rb.act2.push_back(snake(mf, prefix + ".activations2." + n));
        if (ggml_nelements(rb.act1.back().alpha) != c1.cin || ggml_nelements(rb.act2.back().alpha) != c1.cin)
            throw EngineError(mf.path() + ": hift." + prefix + " Snake sizes disagree with its convolutions");
    }
    return rb;
}

// ---------------------------------------------------------------------------
// Graph pieces (signals are ne [C, L], channel fastest)
// ---------------------------------------------------------------------------

struct Hift::Graph {
    explicit Graph(ggml_context* c) : ctx(c) {}
    ggml_context* ctx;
    std::deque<ColsOp> cols_ops;  // kernel parameters, alive until the graph has run
    std::deque<RgemmOp> rgemm_ops;
    std::deque<FinishOp> finish_ops;
    std::deque<UpOp> up_ops;
    std::deque<CgemmOp> cgemm_ops;
    std::deque<FftInOp> fft_in_ops;
    std::deque<FftOutOp> fft_out_ops;
    std::deque<WprepOp> wprep_ops;
    std::deque<FconvOp> fconv_ops;
    std::deque<Work> works;

    Work* work() { return &works.emplace_back(); }

    // A B through rgemm: rows windows of kc floats of a, a_step apart; B in panels.
    ggml_tensor* rgemm(ggml_tensor* a, ggml_tensor* b, int64_t kc, int64_t a_step, int64_t rows) {
        rgemm_ops.push_back({kc, a_step, work()});
        ggml_tensor* args[2] = {a, b};
        return ggml_custom_4d(ctx, GGML_TYPE_F32, ggml_nelements(b) / kc, rows, 1, 1, args, 2, rgemm_kernel,
                              GGML_N_TASKS_MAX, &rgemm_ops.back());
    }

    // act(x + pre_bias) convolved with c, without c's bias: ne [cout_pad, L_out].
    ggml_tensor* conv(const Conv& c, ggml_tensor* x, ggml_tensor* pre_bias = nullptr, Act act = Act::none,
                      const Snake* s = nullptr, float slope = 0.0f) {
        const int64_t out_len = (x->ne[1] + 2 * c.pad - int64_t(c.dil) * (c.K - 1) - 1) / c.stride + 1;
        if (out_len < 1) throw EngineError("HiFT input is too short for its convolutions");
        if (c.panels) {
            // the activated signal, zero-padded, read by rgemm in overlapping windows
            const int64_t rows = (out_len - 1) * c.stride + c.K;
            cols_ops.push_back({1, 1, c.pad, 1, pre_bias != nullptr, act, slope, work()});
            ggml_tensor* args[4] = {x};
            int n = 1;
            if (pre_bias) args[n++] = pre_bias;
            if (act == Act::snake) {
                args[n++] = s->alpha;
                args[n++] = s->inv_alpha;
            }
            ggml_tensor* xp = ggml_custom_4d(ctx, GGML_TYPE_F32, c.cin, rows, 1, 1, args, n, cols_kernel,
                                             GGML_N_TASKS_MAX, &cols_ops.back());
            return rgemm(xp, c.w, int64_t{c.K} * c.cin, int64_t{c.stride} * c.cin, out_len);
        }
        cols_ops.push_back({c.K, c.stride, c.pad, c.dil, pre_bias != nullptr, act, slope, work()});
        ggml_tensor* args[4] = {x};
        int n = 1;
        if (pre_bias) args[n++] = pre_bias;
        if (act == Act::snake) {
            args[n++] = s->alpha;
            args[n++] = s->inv_alpha;
        }
        ggml_tensor* cols = ggml_custom_4d(ctx, GGML_TYPE_F32, c.w->ne[0], out_len, 1, 1, args, n, cols_kernel,
                                           GGML_N_TASKS_MAX, &cols_ops.back());
        return ggml_mul_mat(ctx, c.w, cols);
    }

    // A stride-1, dilation-1 conv without a columns buffer: frame t's columns are the K
    // frames from t - pad on, contiguous in the zero-padded signal, so that signal read
    // with a row step of one frame is the columns matrix (its rows overlap). Output time
    // fastest, ne [L rounded up to 4 (for the sgemm), cout_pad], without c's bias.
    ggml_tensor* conv_rows(const Conv& c, ggml_tensor* x) {
        const int64_t C = x->ne[0], L4 = round_up(x->ne[1], 4);
        cols_ops.push_back({1, 1, c.pad, 1, false, Act::none, 0.0f, work()});
        ggml_tensor* args[1] = {x};
        ggml_tensor* xp = ggml_custom_4d(ctx, GGML_TYPE_F32, C, L4 + c.K - 1, 1, 1, args, 1, cols_kernel,
                                         GGML_N_TASKS_MAX, &cols_ops.back());
        // ggml_view_2d refuses a view that reads memory twice, so the rows are widened
        // to K frames after the fact (nbytes then matches xp's exactly).
        ggml_tensor* cols = ggml_view_2d(ctx, xp, C, L4 + c.K - 1, xp->nb[1], 0);
        cols->ne[0] = int64_t{c.K} * C;
        cols->ne[1] = L4;
        cols->nb[2] = cols->nb[3] = cols->nb[1] * L4;
        return ggml_mul_mat(ctx, cols, c.w);
    }

    ggml_tensor* finish(ggml_tensor* y, ggml_tensor* b, ggml_tensor* res = nullptr, ggml_tensor* acc = nullptr,
                        float div = 1.0f, Act post = Act::none, float slope = 0.0f) {
        finish_ops.push_back({true, res != nullptr, acc != nullptr, div, post, slope, work()});
        ggml_tensor* args[4] = {y, b};
        int n = 2;
        if (res) args[n++] = res;
        if (acc) args[n++] = acc;
        return ggml_custom_4d(ctx, GGML_TYPE_F32, y->ne[0], y->ne[1], 1, 1, args, n, finish_kernel,
                              GGML_N_TASKS_MAX, &finish_ops.back());
    }

    // A signal and the bias still to be added to it (by the op that reads it next).
    struct Sig {
        ggml_tensor* t;
        ggml_tensor* bias;
    };

    // c(act(x.t + x.bias)), then `fin` (bias, res, acc, div, post) when given, else with
    // c's bias left pending.
    Sig conv_block(const Conv& c, Sig x, Act act, const Snake* s, const FinishOp* fin = nullptr,
                   ggml_tensor* res = nullptr, ggml_tensor* acc = nullptr) {
        const int N = c.fft_n;
        if (N == 0) {
            ggml_tensor* y = conv(c, x.t, x.bias, act, s);
            if (!fin) return {y, c.b};
            return {finish(y, c.b, res, acc, fin->div, fin->post, fin->slope), nullptr};
        }
        const int64_t C = c.cin, L = x.t->ne[1];
        const FftGeom geom{N, c.K, c.dil, L};
        const int n_bins = N / 2 + 1;
        FinishOp f = fin ? *fin : FinishOp{true, false, false, 1.0f, Act::none, 0.0f, nullptr};
        f.has_res = res != nullptr;
        f.has_acc = acc != nullptr;
        const FftInOp in_op{N, c.K, c.dil, x.bias != nullptr, act, 0.0f, nullptr};
        ggml_tensor* args[10];
        int n = 0;
        args[n++] = x.t;
        if (x.bias) args[n++] = x.bias;
        if (act == Act::snake) {
            args[n++] = s->alpha;
            args[n++] = s->inv_alpha;
        }
        // One fused node when all bins' weights stay in L3 (C <= 128 for N = 64): the
        // spectra then never go through memory. With bigger C the signal is short and
        // the three nodes' spectra stay in L3 instead.
        constexpr int64_t fuse_max_bytes = 8 << 20;
        if (int64_t{n_bins} * 2 * C * C * 4 <= fuse_max_bytes) {
            wprep_ops.push_back({N, c.K, work()});
            ggml_tensor* wargs[1] = {c.w};
            ggml_tensor* W = ggml_custom_4d(ctx, GGML_TYPE_F32, 2 * C * C, n_bins, 1, 1, wargs, 1, wprep_kernel,
                                            GGML_N_TASKS_MAX, &wprep_ops.back());
            args[n++] = W;
            args[n++] = c.b;
            if (res) args[n++] = res;
            if (acc) args[n++] = acc;
            // chunks of tiles (a multiple of 3) whose spectra take at most half of L2
            const int64_t per_chunk = std::max<int64_t>(1, (256 * 1024) / (int64_t{n_bins} * 2 * C * 4) / 3);
            fconv_ops.push_back({in_op, f, 3 * per_chunk, work()});
            return {ggml_custom_4d(ctx, GGML_TYPE_F32, C, L, 1, 1, args, n, fconv_kernel, GGML_N_TASKS_MAX,
                                   &fconv_ops.back()),
                    nullptr};
        }
        fft_in_ops.push_back(in_op);
        fft_in_ops.back().work = work();
        const int64_t n_chunks = (geom.tiles() + chunk_tiles(C) - 1) / chunk_tiles(C);
        ggml_tensor* X = ggml_custom_4d(ctx, GGML_TYPE_F32, spec_block(C), n_bins, n_chunks, 1, args, n,
                                        fft_in_kernel, GGML_N_TASKS_MAX, &fft_in_ops.back());
        cgemm_ops.push_back({N, c.K, geom.tiles(), work()});
        ggml_tensor* gargs[2] = {X, c.w};
        ggml_tensor* Y = ggml_custom_4d(ctx, GGML_TYPE_F32, spec_block(C), n_bins, n_chunks, 1, gargs, 2,
                                        cgemm_kernel, GGML_N_TASKS_MAX, &cgemm_ops.back());
        fft_out_ops.push_back({N, c.K, c.dil, f, work()});
        ggml_tensor* oargs[4] = {Y, c.b};
        n = 2;
        if (res) oargs[n++] = res;
        if (acc) oargs[n++] = acc;
        return {ggml_custom_4d(ctx, GGML_TYPE_F32, C, L, 1, 1, oargs, n, fft_out_kernel, GGML_N_TASKS_MAX,
                               &fft_out_ops.back()),
                nullptr};
    }

    // ResBlock(x) (Snake, conv1, Snake, conv2, + x per dilation); its last step also
    // does `acc + r`, the division by `div` and the activation `post`.
    ggml_tensor* resblock(const ResBlock& rb, ggml_tensor* x, ggml_tensor* acc = nullptr, float div = 1.0f,
                          Act post = Act::none, float slope = 0.0f) {
        const size_t n = rb.convs1.size();
        const FinishOp plain{true, false, false, 1.0f, Act::none, 0.0f, nullptr},
            last{true, false, false, div, post, slope, nullptr};
        for (size_t i = 0; i < n; ++i) {
            Sig h = conv_block(rb.convs1[i], {x, nullptr}, Act::snake, &rb.act1[i]);
            x = conv_block(rb.convs2[i], h, Act::snake, &rb.act2[i], i + 1 < n ? &plain : &last, x,
                           i + 1 < n ? nullptr : acc)
                    .t;
        }
        return x;
    }

    // ConvTranspose1d of x (already activated), optionally reflection-padded by one
    // frame in front, plus `add`.
    ggml_tensor* up(const Up& u, ggml_tensor* x, ggml_tensor* add, bool reflect_first) {
        ggml_tensor* cols = rgemm(x, u.wt, x->ne[0], x->ne[0], x->ne[1]);  // [K*Cout (to 16), L]
        const int64_t T = (x->ne[1] - 1) * u.stride + u.K - 2 * u.pad + (reflect_first ? 1 : 0);
        if (add->ne[0] != u.cout || add->ne[1] != T)
            throw EngineError("HiFT source branch length " + std::to_string(add->ne[1]) + " != " + std::to_string(T) +
                              " (metadata inconsistent with the weights)");
        if (reflect_first && T < 3) throw EngineError("HiFT input is too short for the reflection padding");
        up_ops.push_back({u.K, u.stride, u.pad, reflect_first, work()});
        ggml_tensor* args[3] = {cols, u.b, add};
        return ggml_custom_4d(ctx, GGML_TYPE_F32, u.cout, T, 1, 1, args, 3, up_kernel, GGML_N_TASKS_MAX,
                              &up_ops.back());
    }
};

// ---------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------

void Hift::check_mel(int64_t T) const {
    if (T < 1) throw EngineError("mel must have at least one frame");
    if (T > (int64_t{1} << 31) / hp_.samples_per_frame())
        throw EngineError("mel has too many frames (" + std::to_string(T) + ")");
}

// mel [C][T] row-major -> [T][C] (ne [C, T], channel fastest).
static std::vector<float> channel_fastest(const float* mel, int64_t C, int64_t T) {
    std::vector<float> out(static_cast<size_t>(C * T));
    for (int64_t c = 0; c < C; ++c)
        for (int64_t t = 0; t < T; ++t) out[t * C + c] = mel[c * T + t];
    return out;
}

std::vector<float> Hift::f0(const float* mel, int64_t T) {
    check_mel(T);
    Graph g(runner_.begin());
    GraphInputs inputs;
    ggml_tensor* x = inputs.f32(g.ctx, channel_fastest(mel, hp_.in_channels, T), hp_.in_channels, T);
    // condnet: Conv1d, ELU, ...: each ELU (with the previous bias) is applied by the next conv.
    for (size_t i = 0; i < f0_convs_.size(); ++i)
        x = i == 0 ? g.conv(f0_convs_[i], x) : g.conv(f0_convs_[i], x, f0_convs_[i - 1].b, Act::elu);
    x = g.finish(x, f0_convs_.back().b, nullptr, nullptr, 1.0f, Act::elu);
    // classifier: Linear(cond_channels, 1) over every frame, then abs.
    x = ggml_mul_mat(g.ctx, ggml_reshape_2d(g.ctx, f0_cls_w_, f0_cls_w_->ne[0], 1), x);  // [1, T]
    x = ggml_abs(g.ctx, ggml_add(g.ctx, x, f0_cls_b_));
    return runner_.compute(x, inputs);
}

std::vector<float> Hift::decode(const float* mel, int64_t T, const float* source, int64_t n_source) {
    check_mel(T);
    const int64_t spf = hp_.samples_per_frame();
    if (n_source != T * spf)
        throw EngineError("source has " + std::to_string(n_source) + " samples; a mel of " + std::to_string(T) +
                          " frames needs " + std::to_string(T * spf) + " (" + std::to_string(spf) + " per frame)");
    const int n_fft = hp_.n_fft, hop = hp_.hop, n_bins = n_fft / 2 + 1, pad = n_fft / 2;
    if (n_source <= pad) throw EngineError("source is too short for the STFT's reflection padding");

    // _stft: torch.stft(s, n_fft, hop, n_fft, window=hann, center=True, pad_mode="reflect"),
    // real parts then imaginary parts as n_fft + 2 channels. A 16-point DFT per frame is a
    // few operations per sample, done here on the host in double precision.
    const int64_t n_frames = 1 + n_source / hop;
    std::vector<double> cos_t(n_fft * n_bins), sin_t(n_fft * n_bins);
    for (int k = 0; k < n_bins; ++k)
        for (int n = 0; n < n_fft; ++n) {
            const double a = 2.0 * M_PI * static_cast<double>((static_cast<int64_t>(k) * n) % n_fft) / n_fft;
            cos_t[k * n_fft + n] = std::cos(a);
            sin_t[k * n_fft + n] = std::sin(a);
        }
    std::vector<float> s_stft(static_cast<size_t>(n_frames * (n_fft + 2)));  // ne [n_fft + 2, n_frames]
    {
        auto reflect = [&](int64_t j) {
            if (j < 0) return -j;
            if (j >= n_source) return 2 * (n_source - 1) - j;
            return j;
        };
        std::vector<double> frame(n_fft);
        for (int64_t m = 0; m < n_frames; ++m) {
            for (int n = 0; n < n_fft; ++n) frame[n] = static_cast<double>(window_[n]) * source[reflect(m * hop + n - pad)];
            for (int k = 0; k < n_bins; ++k) {
                double re = 0, im = 0;
                for (int n = 0; n < n_fft; ++n) {
                    re += frame[n] * cos_t[k * n_fft + n];
                    im -= frame[n] * sin_t[k * n_fft + n];
                }
                s_stft[m * (n_fft + 2) + k] = static_cast<float>(re);
                s_stft[m * (n_fft + 2) + n_bins + k] = static_cast<float>(im);
            }
        }
    }

    Graph g(runner_.begin());
    GraphInputs inputs;
    ggml_tensor* in = inputs.f32(g.ctx, channel_fastest(mel, hp_.in_channels, T), hp_.in_channels, T);
    ggml_tensor* s_in = inputs.f32(g.ctx, std::move(s_stft), n_fft + 2, n_frames);

    const size_t n_up = ups_.size(), n_k = hp_.resblock_kernel_sizes.size();
    // Every stage's input is only read through F.leaky_relu(x, lrelu_slope): done by
    // the op that makes it.
    ggml_tensor* x = g.finish(g.conv(conv_pre_, in), conv_pre_.b, nullptr, nullptr, 1.0f, Act::leaky, hp_.lrelu_slope);
    for (size_t i = 0; i < n_up; ++i) {
        ggml_tensor* si = g.finish(g.conv(source_downs_[i], s_in), source_downs_[i].b);
        si = g.resblock(source_resblocks_[i], si);
        // ups[i], ReflectionPad1d((1, 0)) after the last one, + source branch.
        x = g.up(ups_[i], x, si, i == n_up - 1);
        // mean of the resblocks, then the next stage's leaky ReLU (torch's default slope
        // 0.01 before conv_post, not lrelu_slope).
        const float slope = i + 1 < n_up ? hp_.lrelu_slope : 0.01f;
        ggml_tensor* xs = nullptr;
        for (size_t j = 0; j < n_k; ++j)
            xs = j + 1 < n_k ? g.resblock(resblocks_[i * n_k + j], x, xs)
                             : g.resblock(resblocks_[i * n_k + j], x, xs, static_cast<float>(n_k), Act::leaky, slope);
        x = xs;
    }
    if (x->ne[1] != n_frames)
        throw EngineError("HiFT output frames disagree with the source STFT (metadata inconsistent)");
    // conv_post, time fastest: spec[k * spec_len + m] (+ bias) is channel k of frame m.
    x = g.conv_rows(conv_post_, x);
    const int64_t spec_len = x->ne[0];
    std::vector<float> spec = runner_.compute(x, inputs);

    // _istft: magnitude = clip(exp(x[:n_bins]), max=1e2), phase = sin(x[n_bins:]), then
    // torch.istft(n_fft, hop, n_fft, hann, center=True): per-frame inverse real DFT
    // (1/n_fft; imaginary parts of DC and Nyquist ignored), windowed overlap-add,
    // division by the overlap-added squared window, n_fft/2 trimmed from each end.
    const int64_t full = n_fft + hop * (n_frames - 1);
    std::vector<double> y(full, 0.0), env(full, 0.0);
    std::vector<double> re(n_bins), im(n_bins);
    const std::vector<float>& b = post_bias_;
    for (int64_t m = 0; m < n_frames; ++m) {
        for (int k = 0; k < n_bins; ++k) {
            const float mag = std::min(std::exp(spec[k * spec_len + m] + b[k]), 100.0f);
            const float ph = std::sin(spec[(n_bins + k) * spec_len + m] + b[n_bins + k]);
            re[k] = static_cast<double>(mag * std::cos(ph));
            im[k] = static_cast<double>(mag * std::sin(ph));
        }
        for (int n = 0; n < n_fft; ++n) {
            double v = re[0] + ((n & 1) ? -re[n_bins - 1] : re[n_bins - 1]);
            for (int k = 1; k < n_bins - 1; ++k) v += 2.0 * (re[k] * cos_t[k * n_fft + n] - im[k] * sin_t[k * n_fft + n]);
            const double w = window_[n];
            y[m * hop + n] += v / n_fft * w;
            env[m * hop + n] += w * w;
        }
    }
    const int64_t n_out = full - 2 * pad;
    std::vector<float> wav(n_out);
    for (int64_t i = 0; i < n_out; ++i) {
        const double e = env[pad + i];
        if (std::abs(e) < 1e-11) throw EngineError("HiFT ISTFT window envelope is zero (n_fft/hop inconsistent)");
        const float v = static_cast<float>(y[pad + i] / e);
        wav[i] = std::clamp(v, -hp_.audio_limit, hp_.audio_limit);
    }
    return wav;
}

}  // namespace cbs
