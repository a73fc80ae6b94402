// HiFT's direct kernels: columns (pad + activation), finish, the register-blocked
// rgemm and ConvTranspose1d's overlap-add (see hift/kernels.h).
#include "hift/kernels.h"

#include "cpu/amx_gemm.h"

namespace cbs::hiftk {

// The activation's inputs of a kernel that reads its signal as cols does: the pending bias
// when has_bias, then Snake's alpha and 1 / alpha, from src[1] on.
struct ActInputs {
    const float *bias, *alpha, *inv;
};
static ActInputs act_inputs(const ggml_tensor* dst, bool has_bias, Act act) {
    int si = 1;
    ActInputs a{};
    if (has_bias) a.bias = data_f32(dst->src[si++]);
    if (act == Act::snake) a.alpha = data_f32(dst->src[si++]), a.inv = data_f32(dst->src[si++]);
    return a;
}

template <bool kWide>
CBS_INL void cols_body(ggml_tensor* dst, const ColsOp& p) {
    const ggml_tensor* x = dst->src[0];
    const auto [bias, alpha, inv] = act_inputs(dst, p.has_bias, p.act);
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

#ifdef CBS_HIFT_X86
// rgemm's R rows x 16 P columns at (t, co) on AVX-512: R P accumulators, one panel's row
// of 16 weights per register, the products in the 8-lane build's order.
template <int R, int P>
__attribute__((target("avx512f"), always_inline)) inline void rgemm16_block(float* y, const float* a, const float* b,
                                                                           int64_t n, int64_t kc, int64_t as, int64_t t,
                                                                           int64_t co) {
    v16 c[R][P] = {};
    const float* panel[P];
    for (int q = 0; q < P; ++q) panel[q] = b + (co + 16 * q) * kc;
    const float* row = a + t * as;
    for (int64_t j = 0; j < kc; ++j) {
        v16 w[P];
        for (int q = 0; q < P; ++q) w[q] = vload<v16>(panel[q] + j * 16);
        for (int i = 0; i < R; ++i) {
            const float s = row[i * as + j];
            for (int q = 0; q < P; ++q) c[i][q] += w[q] * s;
        }
    }
    for (int i = 0; i < R; ++i)
        for (int q = 0; q < P; ++q) vstore(y + (t + i) * n + co + 16 * q, c[i][q]);
}

// Rows r0..r1: 6 rows x 32 columns a step (12 accumulators; two of the 8-lane build's
// 6 x 16 steps in one, the weights read half as often per product).
template <int P>
__attribute__((target("avx512f"))) void rgemm16_cols(float* y, const float* a, const float* b, int64_t n, int64_t kc,
                                                     int64_t as, int64_t r0, int64_t r1, int64_t co) {
    int64_t t = r0;
    for (; t + 6 <= r1; t += 6) rgemm16_block<6, P>(y, a, b, n, kc, as, t, co);
    switch (r1 - t) {
        case 5: return rgemm16_block<5, P>(y, a, b, n, kc, as, t, co);
        case 4: return rgemm16_block<4, P>(y, a, b, n, kc, as, t, co);
        case 3: return rgemm16_block<3, P>(y, a, b, n, kc, as, t, co);
        case 2: return rgemm16_block<2, P>(y, a, b, n, kc, as, t, co);
        case 1: return rgemm16_block<1, P>(y, a, b, n, kc, as, t, co);
        default: return;
    }
}

void rgemm16(float* y, const float* a, const float* b, int64_t n, int64_t kc, int64_t as, int64_t r0, int64_t r1) {
    int64_t co = 0;
    for (; co + 32 <= n; co += 32) rgemm16_cols<2>(y, a, b, n, kc, as, r0, r1, co);
    if (co < n) rgemm16_cols<1>(y, a, b, n, kc, as, r0, r1, co);
}
#endif

template <bool kWide>
CBS_INL void rgemm_body(ggml_tensor* dst, const RgemmOp& p) {
    using V = Vec<kWide>;
    const float* a = data_f32(dst->src[0]);
    const float* b = data_f32(dst->src[1]);
    const int64_t n = dst->ne[0], rows = dst->ne[1], kc = p.kc, as = p.a_step;
    float* y = static_cast<float*>(dst->data);
#ifdef CBS_HIFT_X86
    if (kWide && use_avx512()) {
        for (int64_t r0, r1; p.work->take(rows, 48, r0, r1);) rgemm16(y, a, b, n, kc, as, r0, r1);
        return;
    }
#endif
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

template <class V>
CBS_INL void amx_conv_body(ggml_tensor* dst, const AmxConvOp& p) {
    const ggml_tensor* x = dst->src[0];
    const auto [bias, alpha, inv] = act_inputs(dst, p.has_bias, p.act);
    const int64_t C = x->ne[0], L = x->ne[1], cout = dst->ne[0], out_len = dst->ne[1];
    const int64_t halo = int64_t(p.K - 1) * p.dil, x_row = x->nb[1] / sizeof(float);
    const float* xd = data_f32(x);
    float* y = static_cast<float*>(dst->data);
    // Pieces of up to 256 frames (their frames' split stays in L2), fewer for a short signal
    // so that both threads have work.
    const int64_t piece = std::min<int64_t>(256, round_up((out_len + 1) / 2, 16));
    const FinishArgs fa = p.has_fin ? finish_args(p.fin, dst, p.n_in) : FinishArgs{};
    thread_local std::vector<float> buf, product;
    thread_local AmxSplitFrames frames;
    for (int64_t t0, t1; p.work->take(out_len, piece, t0, t1);) {
        const int64_t m = t1 - t0, n = m + halo, r0 = t0 - p.pad;
        buf.resize(static_cast<size_t>(n * C));
        for (int64_t r = r0; r < r0 + n; ++r) {
            float* row = buf.data() + (r - r0) * C;
            if (r < 0 || r >= L)
                std::fill(row, row + C, 0.0f);
            else
                act_row<V>(row, xd + r * x_row, bias, p.act, p.slope, alpha, inv, C);
        }
        frames.split(buf.data(), C, n, round_up(m, 16) + halo, C);
        if (!p.has_fin) {
            amx_conv(frames, m, p.dil, *p.w, y + t0 * cout, cout);
            continue;
        }
        product.resize(static_cast<size_t>(m * cout));
        amx_conv(frames, m, p.dil, *p.w, product.data(), cout);
        for (int64_t t = t0; t < t1; ++t) finish_row<V>(y + t * cout, product.data() + (t - t0) * cout, p.fin, fa, t, cout);
    }
}

CBS_KERNEL(cols, ColsOp)
// AMX comes with AVX-512: the activations 16 lanes at a time.
#ifdef CBS_HIFT_X86
__attribute__((target("avx512f,avx512dq,avx512bw,avx512vl"))) static void amx_conv_avx512(ggml_tensor* dst,
                                                                                         const AmxConvOp& p) {
    amx_conv_body<v16>(dst, p);
}
void amx_conv_kernel(ggml_tensor* dst, int, int, void* ud) { amx_conv_avx512(dst, *static_cast<const AmxConvOp*>(ud)); }
#else
void amx_conv_kernel(ggml_tensor* dst, int, int, void* ud) { amx_conv_body<v4x2>(dst, *static_cast<const AmxConvOp*>(ud)); }
#endif
CBS_KERNEL(rgemm, RgemmOp)
CBS_KERNEL(finish, FinishOp)
CBS_KERNEL(up, UpOp)

}  // namespace cbs::hiftk
