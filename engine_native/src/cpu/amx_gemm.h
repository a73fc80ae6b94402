// Matrix products on Intel AMX tiles at near-f32 accuracy ("bf16x3"), for the CPU's S3Gen.
//
// AMX multiplies bf16 tiles into f32 sums at about 30x the f32 rate of AVX-512 on this CPU
// class (a tile product: 16 x 16 x 32 multiply-adds). Plain bf16 operands would put S3Gen's
// mel ~3e-3 from f32 (8-bit mantissas), so each f32 operand is split into a bf16 high part
// and a bf16 low part (x = hi + lo, exact to ~2^-17 |x|) and a.b is taken as
// hi.hi + hi.lo + lo.hi with f32 accumulation: within ~1e-5 of f32 (the dropped lo.lo term
// and the split), three tile products for one, still several times faster than sgemm.
//
// C = A B^T with A [m x k] the activations (f32 rows) and B [n x k] the weight rows (f32 rows,
// or any type ggml converts to f32 row by row). B is packed by its thread first, A is split
// by every thread that reads it; both zero-padded to whole tiles (k to 32, rows to 16).
//
// Used only where the model is not f32 (its S3Gen matrices quantised or f16, so already
// approximate by far more than 1e-5): an f32 model keeps OpenBLAS's exact sgemm, the
// reference mode of the parity tests. CBS_AMX=0 turns it off.
#pragma once

#include <cstddef>
#include <cstdint>
#include "cpu/aligned_buffer.h"

namespace cbs {

// AMX-BF16 and AVX512-BF16 on this CPU, the kernel granted this process the tile state
// (arch_prctl, asked once), and CBS_AMX is not 0.
bool amx_available();

// B's packed form: for each block of 16 rows and each 32 values of k, a tile of high parts
// and a tile of low parts (1 KiB each), pairs of k adjacent as AMX's dot product reads them.
class AmxPackedB {
public:
    // B's n rows of k floats, row r at `rows + r * ld`.
    void pack(const float* rows, int64_t ld, int64_t n, int64_t k);
    // The same from B's transpose: B[r][i] at `cols + i * ld + r` (attention's values).
    void pack_transposed(const float* cols, int64_t ld, int64_t n, int64_t k);
    // The same from rows in a form of their own (a quantised weight): `block(src, row, kb, out)`
    // writes values 32 kb .. 32 kb + 31 of B's row `first + row` to out (k a multiple of 32),
    // so a Q4_0 block goes to its tiles through L1, not a buffer of f32 rows.
    using RowBlock = void (*)(const void* src, int64_t row, int64_t k_block, float* out);
    void pack(RowBlock block, const void* src, int64_t first, int64_t n, int64_t k);
    int64_t rows() const { return n_; }
    int64_t k() const { return k_; }
    const uint16_t* block(int64_t row_block, int64_t k_block) const {
        return data_.data() + (row_block * k_blocks_ + k_block) * 2 * 512;
    }
    int64_t k_blocks() const { return k_blocks_; }

private:
    AlignedBuffer<uint16_t> data_;
    int64_t n_ = 0, k_ = 0, k_blocks_ = 0;
};

// A's split form, laid out as B's: for each 16 rows (zero rows at the end) and each 32
// values of k, a tile of high parts and a tile of low parts, each 16 rows x 32 values
// (a tile load then reads 1 KiB in a row, not 16 strided rows).
class AmxSplitA {
public:
    // scale * the m rows of k floats at `rows` (row i at rows + i * ld), in a buffer of its own.
    void split(const float* rows, int64_t ld, int64_t m, int64_t k, float scale = 1.0f);
    // Bytes of the split of m rows of k values (a cache line spare, to align them), and the
    // same form over `storage` of that size (a graph tensor: one node splits the rows, later
    // nodes read them), its row blocks filled by split_blocks (each thread a share).
    static size_t bytes(int64_t m, int64_t k);
    void view(void* storage, int64_t m, int64_t k);
    void split_blocks(const float* rows, int64_t ld, int64_t rb0, int64_t rb1, float scale = 1.0f);
    int64_t row_blocks() const { return (m_ + 15) / 16; }

    int64_t rows() const { return m_; }
    int64_t k_blocks() const { return k_blocks_; }
    const uint16_t* block(int64_t row_block, int64_t k_block) const {
        return data_ + (row_block * k_blocks_ + k_block) * 2 * 512;
    }

private:
    AlignedBuffer<uint8_t> own_;
    uint16_t* data_ = nullptr;
    int64_t m_ = 0, k_ = 0, k_blocks_ = 0;
};

// C[i][j] = sum_k A[i][k] B[j][k] for i < a.rows(), j < b.rows(), row i of C at C + i * ldc.
// A and B must have the same k. Runs on the calling thread.
void amx_gemm(const AmxSplitA& a, const AmxPackedB& b, float* C, int64_t ldc);
// The same over B's row blocks [first_block, end_block) only (rows 16 first_block on): column
// j of C is B's row 16 first_block + j.
void amx_gemm_blocks(const AmxSplitA& a, const AmxPackedB& b, int64_t first_block, int64_t end_block, float* C,
                     int64_t ldc);

// A signal's frames (rows of `channels` values, a multiple of 32) as bf16 high and low parts,
// each frame's in a row: a convolution's A tiles are then read in place (amx_conv), no
// columns matrix made.
class AmxSplitFrames {
public:
    // x's first n frames (frame i at frames + i * ld), zero frames after them up to `rows`.
    void split(const float* frames, int64_t ld, int64_t n, int64_t rows, int64_t channels);
    int64_t rows() const { return rows_; }
    int64_t channels() const { return channels_; }
    const uint16_t* hi() const { return hi_.data(); }
    const uint16_t* lo() const { return lo_.data(); }

private:
    AlignedBuffer<uint16_t> hi_, lo_;
    int64_t rows_ = 0, channels_ = 0;
};

// A convolution's product: C[t][j] = sum over taps i and channels c of x's frame
// t + i * tap_step, channel c, times B[j][i * channels + c], for t < m (B's k = taps x
// channels). x must hold m rounded up to 16 plus (taps - 1) x tap_step frames. Runs on the
// calling thread.
void amx_conv(const AmxSplitFrames& x, int64_t m, int64_t tap_step, const AmxPackedB& b, float* C, int64_t ldc);

// Tuning (benchmarks): k blocks of 32 per run of the loop nest.
void amx_set_k_run(int64_t k_blocks);

}  // namespace cbs
