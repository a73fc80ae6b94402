// HiFT's CPU kernels (ggml custom ops): their parameters, and the entry points the
// graph (hift_graph.cpp) hands to ggml_custom_4d. They read and write tensor memory
// directly, so HiFT runs on the CPU backend only.
//
// ggml has no fused Snake and its sin is a scalar libm loop, and a convolution
// through ggml_im2col + ggml_add for bias and residual makes several passes over
// signals of up to 64 x 60000 floats. So HiFT runs on a few kernels of its own, each a
// ggml custom op that shares its work out between ggml's threads:
//  - the resblock convolutions (almost all the work) through the DFT: see "FFT
//    convolution" below; a quantised model's, where the CPU has AMX, as direct products on
//    its tiles (amx_conv), as are ConvTranspose1d's;
//  - the other convolutions and ConvTranspose1d's products as `rgemm`, a register-
//    blocked matrix product that reads the padded signal in place (`cols` pads it and
//    applies the activation), then `finish` (bias, residual, the next activation) or
//    `up` (ConvTranspose1d's overlap-add, bias, source branch); conv_post and odd
//    shapes as `cols` columns times the weight in ggml_mul_mat.
// Snake is computed in these kernels as the signal is read, with a vectorized sin.
#pragma once

#include "core/fft.h"
#include "hift/kernels_simd.h"

namespace cbs {
class AmxPackedB;
}

namespace cbs::hiftk {

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

// amx_conv: a stride-1 conv's product on AMX tiles (the fast products of a quantised model),
// x ne [C, L] -> y ne [Cout, L_out]. Per piece of output frames, the frames it reads are
// activated as cols does (zeros outside the signal), split into bf16 parts and multiplied in
// place (cpu/amx_gemm.h amx_conv): no columns matrix, no DFT. The piece's product stays in
// cache for `fin` (the conv's bias, residual, ...) when given, else y is without the bias.
// src: as cols, then finish's b, res, acc (from src n_in on).
struct AmxConvOp {
    int K, pad, dil;
    bool has_bias;
    Act act;
    float slope;
    const AmxPackedB* w;  // the weight [Cout][K * Cin] (row k Cin + ci), packed at load
    bool has_fin;
    FinishOp fin;
    int n_in;
    Work* work;
};

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

// The tiles' transform (float twiddles), of length at most kMaxTile: its six buffers
// (input, output, scratch) live on the stack, sized to kMaxTile: no larger than the tiles
// used, since a larger stack slows every tile (more of L1 in use).
using TileFft = FftPlan<float>;
constexpr int kMaxTile = 64;

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

// Where the spectra of tiles live: value v (C real parts, then C imaginary parts) of
// bin f of a tile at tile_base(tile) + f * bin_stride + v.
//
// Between graph nodes (fft_in -> cgemm -> fft_out) the tiles are stored in chunks of
// chunk_tiles(C) tiles, ne [block, N/2 + 1, chunks]: per chunk and bin a block of the
// chunk's tiles side by side, padded by 16 floats so that the bins of one tile do not
// all fall in the same cache set. A chunk (a few hundred KB for N = 64) is one
// contiguous piece of memory.
// (cmul_bin takes 6 tiles at a time on AVX-512, 3 otherwise)
inline int64_t chunk_tiles(int64_t C) { return 6 * std::max<int64_t>(1, 192 / C); }
inline int64_t spec_block(int64_t C) { return chunk_tiles(C) * 2 * C + 16; }
inline int64_t spec_tile_offset(int64_t tile, int64_t C, int n_bins) {
    const int64_t ct = chunk_tiles(C);
    return (tile / ct) * n_bins * spec_block(C) + (tile % ct) * 2 * C;
}

// The input side of an FFT conv: x, then bias when has_bias, then alpha and inv_alpha
// when act == snake, from src[first] on.
struct FftInOp {
    const TileFft* fft;  // of the tile length N
    int K, dil;
    bool has_bias;
    Act act;
    float slope;
    Work* work;  // fft_in_kernel's; unused inside fconv
};

// cgemm: the per-bin products of all tiles' spectra with W_f, from the conv weight wt in
// rgemm's panels of 16 output channels ([C / 16][K][C][16]), chunked spectra in and out. A thread
// takes whole bins: W_f is made once into a buffer, then each chunk's block of the bin is
// read once for all output channels. src: X, wt.
struct CgemmOp {
    const TileFft* fft;
    int K;
    int64_t C;  // channels (in = out)
    int64_t tiles;  // the rest of the last chunk is left alone
    Work* work;
};

// fft_out: chunked output spectra -> y ne [C, L] through the inverse DFT and finish.
// src: Y, then finish's b, res, acc.
struct FftOutOp {
    const TileFft* fft;
    int K, dil;
    FinishOp fin;
    Work* work;
};

// wprep: W_f of every bin (N/2 + 1 times 2 C^2 floats) from the conv weight wt, for fconv.
struct WprepOp {
    const TileFft* fft;
    int K;
    int64_t C;
    Work* work;
};

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

// ConvTranspose1d's overlap-add: cols ne [K*Cout, L_in] (row k*Cout + co of frame i
// is input frame i's contribution to output frame i*stride + k - pad) -> ne [Cout,
// T_out] with the bias, optionally ReflectionPad1d((1, 0)) (output frame 1 repeated
// in front), then + add (the source branch). src: cols, b, add.
struct UpOp {
    int K, stride, pad;
    bool reflect_first;
    Work* work;
};

// The entry points (ggml_custom_op_t).
void cols_kernel(ggml_tensor* dst, int ith, int nth, void* ud);
void rgemm_kernel(ggml_tensor* dst, int ith, int nth, void* ud);
void amx_conv_kernel(ggml_tensor* dst, int ith, int nth, void* ud);
void finish_kernel(ggml_tensor* dst, int ith, int nth, void* ud);
void up_kernel(ggml_tensor* dst, int ith, int nth, void* ud);
void fft_in_kernel(ggml_tensor* dst, int ith, int nth, void* ud);
void fft_out_kernel(ggml_tensor* dst, int ith, int nth, void* ud);
void cgemm_kernel(ggml_tensor* dst, int ith, int nth, void* ud);
void wprep_kernel(ggml_tensor* dst, int ith, int nth, void* ud);
void fconv_kernel(ggml_tensor* dst, int ith, int nth, void* ud);

}  // namespace cbs::hiftk
