// HiFT's FFT convolution kernels (see "FFT convolution" in hift/kernels.h): tiles to
// spectra, per-bin complex products with the weight's DFT, back to frames and finish.
#include "hift/kernels.h"

#include <cstdlib>
#include <cstring>
#include <type_traits>

namespace cbs::hiftk {

// The N frames of a tile, act(x + bias) (zeros outside the signal), into rows [N][C].
struct ActIn {
    const float *x, *bias, *alpha, *inv;
    Act act;
    float slope;
};

// The frames kRowsAhead rows on are prefetched into L1: a conv's signal, residual and sum
// (megabytes each) stream from L3, and without it the misses of the signal's loads alone
// are a large share of fconv's own time.
constexpr int kRowsAhead = 8;

CBS_INL void prefetch_frame(const float* x, int64_t r, int64_t L, int64_t C) {
    if (x && r >= 0 && r < L)
        for (int64_t c = 0; c < C; c += 16) __builtin_prefetch(x + r * C + c);
}

template <class V>
CBS_INL void tile_rows(float* rows, const ActIn& in, const FftGeom& g, int64_t tile, int64_t C) {
    int q;
    int64_t b;
    g.locate(tile, q, b);
    const int64_t h = (g.K - 1) / 2;
    for (int i = 0; i < g.N; ++i) {
        const int64_t n = b * g.M() - h + i, r = q + n * g.dil;
        prefetch_frame(in.x, r + kRowsAhead * g.dil, g.L, C);
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
CBS_INL void tile_forward(float* spec, int64_t bin_stride, const float* rows, int64_t C, const TileFft& fft) {
    const int N = fft.size();
    V xr[kMaxTile], xi[kMaxTile], zr[kMaxTile], zi[kMaxTile], sr[kMaxTile], si[kMaxTile];
    for (int64_t c0 = 0; c0 < C; c0 += 16) {
        for (int i = 0; i < N; ++i) {
            xr[i] = vload<V>(rows + i * C + c0);
            xi[i] = vload<V>(rows + i * C + c0 + 8);
        }
        fft.forward(xr, xi, zr, zi, sr, si);
        for (int f = 0; f <= N / 2; ++f) {
            const int fc = (N - f) % N;
            float* o = spec + f * bin_stride;
            vstore(o + c0, (zr[f] + zr[fc]) * 0.5f);
            vstore(o + C + c0, (zi[f] - zi[fc]) * 0.5f);
            vstore(o + c0 + 8, (zi[f] + zi[fc]) * 0.5f);
            vstore(o + C + c0 + 8, (zr[fc] - zr[f]) * 0.5f);
        }
    }
}

// The tile's output spectra (1/N included) -> its M output frames, finished into y.
template <class V>
CBS_INL void tile_inverse(float* y, const float* spec, int64_t bin_stride, const FftGeom& g, int64_t tile, int64_t C,
                          const TileFft& fft, float* rows, const FinishOp& fin, const FinishArgs& fa) {
    const int N = g.N, M = g.M();
    V xr[kMaxTile], xi[kMaxTile], zr[kMaxTile], zi[kMaxTile], sr[kMaxTile], si[kMaxTile];
    for (int64_t c0 = 0; c0 < C; c0 += 16) {
        // Z = A + iB over all N bins (A, B Hermitian)
        for (int f = 0; f <= N / 2; ++f) {
            const float* s = spec + f * bin_stride;
            const V ar = vload<V>(s + c0), ai = vload<V>(s + C + c0);
            const V br = vload<V>(s + c0 + 8), bi = vload<V>(s + C + c0 + 8);
            xr[f] = ar - bi;
            xi[f] = ai + br;
            if (f > 0 && f < N / 2) {
                xr[N - f] = ar + bi;
                xi[N - f] = br - ai;
            }
        }
        fft.inverse(xr, xi, zr, zi, sr, si);
        for (int j = 0; j < M; ++j) {
            vstore(rows + j * C + c0, zr[j]);
            vstore(rows + j * C + c0 + 8, zi[j]);
        }
    }
    int q;
    int64_t b;
    g.locate(tile, q, b);
    for (int j = 0; j < M; ++j) {
        const int64_t r = q + (b * M + j) * g.dil;
        if (r >= g.L) break;
        prefetch_frame(fa.res, r + kRowsAhead * g.dil, g.L, C);
        prefetch_frame(fa.acc, r + kRowsAhead * g.dil, g.L, C);
        finish_row<V>(y + r * C, rows + j * C, fin, fa, r, C);
    }
}

// W_f = conj(sum_k w_k exp(-2 pi i f k / N)) / N for all C x C channel pairs, from the
// conv weight wt in rgemm's panels of 16 output channels, [C / 16][K][C (in)][16], as
// cmul_bin reads it: per 16 output channels and input channel, Wr of the 16 then Wi of the
// 16 (2 C^2 floats).
template <class V>
CBS_INL void weight_bin(float* wf, const float* wt, int64_t C, int K, int f, const TileFft& fft) {
    const int N = fft.size();
    float cs[kMaxTile / 2], sn[kMaxTile / 2];  // K <= N / 2
    const float scale = 1.0f / static_cast<float>(N);
    for (int k = 0; k < K; ++k) {
        const int m = (f * k) % N;  // cos and sin of 2 pi m / N
        cs[k] = fft.w_re(m) * scale;
        sn[k] = -fft.w_im(m) * scale;
    }
    // Per input channel the K taps summed in registers, in tap order, each W_f value written
    // once; a panel is read as K streams, a tap's C inputs apart (every bin reads the whole
    // weight: laid out [C (out)][C (in)][K], the taps C^2 floats apart, its loads would
    // dominate cgemm).
    for (int64_t co = 0; co < C; co += 16) {
        float* o = wf + co * C * 2;
        const float* panel = wt + co * C * K;
        for (int64_t ci = 0; ci < C; ++ci) {
            V r0{}, r1{}, i0{}, i1{};
            for (int k = 0; k < K; ++k) {
                const float* w = panel + (k * C + ci) * 16;
                const V w0 = vload<V>(w), w1 = vload<V>(w + 8);
                r0 = r0 + w0 * cs[k];
                r1 = r1 + w1 * cs[k];
                i0 = i0 + w0 * sn[k];
                i1 = i1 + w1 * sn[k];
            }
            float* oc = o + ci * 32;
            vstore(oc, r0);
            vstore(oc + 8, r1);
            vstore(oc + 16, i0);
            vstore(oc + 24, i1);
        }
    }
}

#ifdef CBS_HIFT_X86
// cmul_bin (below) with 16 lanes where the CPU has AVX-512: 16 output channels in one
// register, 6 tiles a step (12 accumulators of the 32 registers). Each output element gets
// the same multiply-adds in the same order as in the 8-lane build, so the result is the same
// bit for bit; only twice the lanes per instruction.
__attribute__((target("avx512f"))) void cmul_bin16(float* y, const float* x, const float* wf, int64_t C, int64_t n_t,
                                                    bool real, int64_t co_begin, int64_t co_end) {
    constexpr int64_t kT = 6;
    const int64_t ts = 2 * C;
    for (int64_t co = co_begin; co < co_end; co += 16) {
        const float* wb = wf + co * C * 2;
        for (int64_t t = 0; t < n_t; t += kT) {
            const int64_t m = std::min(kT, n_t - t);
            const float* xt = x + t * ts;
            v16 r[kT] = {}, im[kT] = {};
            if (real) {
                for (int64_t ci = 0; ci < C; ++ci) {
                    const v16 w = vload<v16>(wb + ci * 32);
                    for (int64_t j = 0; j < m; ++j) r[j] += w * xt[j * ts + ci];
                }
            } else {
                // n: a whole tile's kT as a constant (the loop unrolled) or the last tile's count.
                auto complex_tile = [&](auto n) {
                    for (int64_t ci = 0; ci < C; ++ci) {
                        const v16 wr = vload<v16>(wb + ci * 32), wi = vload<v16>(wb + ci * 32 + 16);
                        for (int64_t j = 0; j < n; ++j) {
                            const float a = xt[j * ts + ci], b = xt[j * ts + C + ci];
                            r[j] += wr * a;
                            r[j] -= wi * b;
                            im[j] += wi * a;
                            im[j] += wr * b;
                        }
                    }
                };
                switch (m) {  // the tile count a constant: the accumulators stay in registers
                    case 1: complex_tile(std::integral_constant<int64_t, 1>{}); break;
                    case 2: complex_tile(std::integral_constant<int64_t, 2>{}); break;
                    case 3: complex_tile(std::integral_constant<int64_t, 3>{}); break;
                    case 4: complex_tile(std::integral_constant<int64_t, 4>{}); break;
                    case 5: complex_tile(std::integral_constant<int64_t, 5>{}); break;
                    default: complex_tile(std::integral_constant<int64_t, kT>{}); break;
                }
            }
            for (int64_t j = 0; j < m; ++j) {
                vstore(y + (t + j) * ts + co, r[j]);
                vstore(y + (t + j) * ts + C + co, im[j]);
            }
        }
    }
}
#endif

// One bin of n_t tiles (2C values each, side by side): Y = W_f X as complex numbers,
// Yr = Wr Xr - Wi Xi, Yi = Wi Xr + Wr Xi. The inner step does 24 multiply-adds of 8
// lanes for 3 tiles x 16 output channels: 12 accumulators, each taking two dependent
// multiply-adds per step (fewer tiles would wait on the multiply-add latency). The
// compiler barriers keep each tile's two broadcasts next to their four multiply-adds:
// hoisted, they would push accumulators out to the stack. DC and Nyquist bins are real.
template <bool kWide>
CBS_INL void cmul_bin(float* y, const float* x, const float* wf, int64_t C, int64_t n_t, bool real, int64_t co_begin,
                      int64_t co_end) {
#ifdef CBS_HIFT_X86
    if (kWide && use_avx512())
        return cmul_bin16(y, x, wf, C, n_t, real, co_begin, co_end);
#endif
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

static ActIn act_in(const FftInOp& p, const ggml_tensor* dst, int first) {
    int si = first;
    ActIn in{data_f32(dst->src[si++]), nullptr, nullptr, nullptr, p.act, p.slope};
    if (p.has_bias) in.bias = data_f32(dst->src[si++]);
    if (p.act == Act::snake) {
        in.alpha = data_f32(dst->src[si++]);
        in.inv = data_f32(dst->src[si++]);
    }
    return in;
}

[[maybe_unused]] static int act_in_srcs(const FftInOp& p) { return 1 + (p.has_bias ? 1 : 0) + (p.act == Act::snake ? 2 : 0); }

// fft_in: x ne [C, L] -> the spectra of act(x + bias) of all tiles, chunked.
template <bool kWide>
CBS_INL void fft_in_body(ggml_tensor* dst, const FftInOp& p) {
    const ActIn in = act_in(p, dst, 0);
    const int64_t C = dst->src[0]->ne[0];
    const int N = p.fft->size(), n_bins = N / 2 + 1;
    const FftGeom g{N, p.K, p.dil, dst->src[0]->ne[1]};
    float* out = static_cast<float*>(dst->data);
    thread_local std::vector<float> rows;
    rows.resize(static_cast<size_t>(N * C));
    for (int64_t t0, t1; p.work->take(g.tiles(), 4, t0, t1);)
        for (int64_t tile = t0; tile < t1; ++tile) {
            tile_rows<Vec<kWide>>(rows.data(), in, g, tile, C);
            tile_forward<Vec<kWide>>(out + spec_tile_offset(tile, C, n_bins), spec_block(C), rows.data(), C, *p.fft);
        }
}

template <bool kWide>
CBS_INL void cgemm_body(ggml_tensor* dst, const CgemmOp& p) {
    const ggml_tensor* X = dst->src[0];
    const ggml_tensor* wt = dst->src[1];
    const int64_t C = p.C, n_chunks = X->ne[2], ct = chunk_tiles(C);
    const int n_bins = static_cast<int>(X->ne[1]);
    const int N = p.fft->size();
    thread_local std::vector<float> wf;
    wf.resize(static_cast<size_t>(2 * C * C));
    for (int64_t f0, f1; p.work->take(n_bins, 1, f0, f1);) {
        const int f = static_cast<int>(f0);
        weight_bin<Vec<kWide>>(wf.data(), data_f32(wt), C, p.K, f, *p.fft);
        // 16 output channels at a time over all chunks: their part of W_f stays in L1
        // and the bin's spectra (a few hundred KB) in L2.
        for (int64_t co = 0; co < C; co += 16)
            for (int64_t chunk = 0; chunk < n_chunks; ++chunk) {
                const int64_t off = (chunk * n_bins + f) * spec_block(C);
                cmul_bin<kWide>(static_cast<float*>(dst->data) + off, data_f32(X) + off, wf.data(), C,
                         std::min(ct, p.tiles - chunk * ct), f == 0 || 2 * f == N, co, co + 16);
            }
    }
}

template <bool kWide>
CBS_INL void fft_out_body(ggml_tensor* dst, const FftOutOp& p) {
    const FinishArgs fa = finish_args(p.fin, dst, 1);
    const int64_t C = dst->ne[0];
    const int N = p.fft->size(), n_bins = N / 2 + 1;
    const FftGeom g{N, p.K, p.dil, dst->ne[1]};
    const float* yd = data_f32(dst->src[0]);
    thread_local std::vector<float> rows;
    rows.resize(static_cast<size_t>(N * C));
    for (int64_t t0, t1; p.work->take(g.tiles(), 4, t0, t1);)
        for (int64_t tile = t0; tile < t1; ++tile)
            tile_inverse<Vec<kWide>>(static_cast<float*>(dst->data), yd + spec_tile_offset(tile, C, n_bins), spec_block(C), g,
                         tile, C, *p.fft, rows.data(), p.fin, fa);
}

template <bool kWide>
CBS_INL void wprep_body(ggml_tensor* dst, const WprepOp& p) {
    const ggml_tensor* wt = dst->src[0];
    const int64_t C = p.C;
    for (int64_t f0, f1; p.work->take(p.fft->size() / 2 + 1, 1, f0, f1);) {
        const int f = static_cast<int>(f0);
        weight_bin<Vec<kWide>>(static_cast<float*>(dst->data) + f * 2 * C * C, data_f32(wt), C, p.K, f, *p.fft);
    }
}

template <bool kWide>
CBS_INL void fconv_body(ggml_tensor* dst, const FconvOp& p) {
    const ActIn in = act_in(p.in, dst, 0);
    const int wsrc = act_in_srcs(p.in);
    const float* W = data_f32(dst->src[wsrc]);
    const FinishArgs fa = finish_args(p.fin, dst, wsrc + 1);
    const int64_t C = dst->ne[0], ts = 2 * C, ct = p.chunk, bs = ct * ts + 16;
    const int N = p.in.fft->size(), n_bins = N / 2 + 1;
    const FftGeom g{N, p.in.K, p.in.dil, dst->ne[1]};
    thread_local std::vector<float> rows, spec, tmp;
    rows.resize(static_cast<size_t>(N * C));
    spec.resize(static_cast<size_t>(n_bins * bs));
    tmp.resize(static_cast<size_t>(ct * ts));
    const int64_t tiles = g.tiles(), n_chunks = (tiles + ct - 1) / ct;
    for (int64_t chunk, c1; p.work->take(n_chunks, 1, chunk, c1);) {
        const int64_t first = chunk * ct, n_t = std::min(ct, tiles - first);
        for (int64_t t = 0; t < n_t; ++t) {
            tile_rows<Vec<kWide>>(rows.data(), in, g, first + t, C);
            tile_forward<Vec<kWide>>(spec.data() + t * ts, bs, rows.data(), C, *p.in.fft);
        }
        for (int f = 0; f < n_bins; ++f) {
            float* sf = spec.data() + f * bs;
            cmul_bin<kWide>(tmp.data(), sf, W + f * 2 * C * C, C, n_t, f == 0 || 2 * f == N, 0, C);
            std::memcpy(sf, tmp.data(), static_cast<size_t>(n_t * ts) * sizeof(float));
        }
        for (int64_t t = 0; t < n_t; ++t)
            tile_inverse<Vec<kWide>>(static_cast<float*>(dst->data), spec.data() + t * ts, bs, g, first + t, C, *p.in.fft, rows.data(),
                         p.fin, fa);
    }
}

CBS_KERNEL(fft_in, FftInOp)
CBS_KERNEL(fft_out, FftOutOp)
CBS_KERNEL(cgemm, CgemmOp)
CBS_KERNEL(wprep, WprepOp)
CBS_KERNEL(fconv, FconvOp)

}  // namespace cbs::hiftk
