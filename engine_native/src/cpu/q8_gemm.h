// T3's Q4_0 products over a prompt's many columns in 8-bit integers, on CPUs without AMX:
// AVX-512 VNNI (AMD Zen 4 and Zen 5, Intel Ice Lake and Cascade Lake) or AVX2 (the rest).
//
// The decoding kernel (cpu/q4_matmul.h) already multiplies T3's weights by activations rounded
// as ggml's Q8_0 rounds them; it reads the weights once for all its columns, so a step is bound
// by memory, but over many columns it redoes each weight's nibbles for every column and reaches
// a third of what the CPU's integer units do. This product takes the same integer dot products
// (the same activation bytes, sum (n - 8) q per block as sum n q - 8 sum q) as a register tile:
// 16 weight rows' 4 values of a block in one 64-byte vector (their nibbles as unsigned bytes),
// one broadcast of a column's 4 values, one vpdpbusd for 64 multiply-adds (on AVX2, half the
// vector: vpmaddubsw, summed in int16 over a block); each block's int32 sums (at most 32 * 15 *
// 127: exact in f32) scaled by the two blocks' scales into f32 sums. Only the order of the
// float sums differs from the kernel's (and ggml's).
//
// C = A B^T with A [m x k] the activations (f32 rows, rounded once per product) and B [n x k]
// the weight rows (block_q4_0, unpacked by the thread that multiplies them); k a multiple of 32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "cpu/aligned_buffer.h"

namespace cbs {

// AVX-512 F/BW/VL/VNNI, or AVX2 with FMA and F16C, on this CPU, and CBS_Q8_TILE is not 0
// (CBS_Q8_TILE=avx2: the AVX2 form on an AVX-512 CPU too).
bool int8_tile_available();
// Which form runs: "AVX-512 VNNI", "AVX2" or "" (none).
const char* int8_tile_isa();

// A's rows rounded to Q8_0 (per 32 values: scale max|x| / 127 as fp16, values rounded to
// nearest even, as the decoding kernel rounds them): row i's k bytes at values(i), per block
// its scale at scales(i) and 8 x the sum of its values at offsets(i). Over storage of bytes(m, k)
// (a graph tensor: one node rounds the rows, later nodes read them).
class I8Rows {
public:
    static size_t bytes(int64_t m, int64_t k);
    void view(void* storage, int64_t m, int64_t k);
    // Rows r0 .. r1-1 of the m rows of k floats at `rows` (row i at rows + i * ld).
    void quantize(const float* rows, int64_t ld, int64_t r0, int64_t r1);
    int64_t rows() const { return m_; }
    int64_t k() const { return k_; }
    const int8_t* values(int64_t i) const { return values_ + i * k_; }
    const float* scales(int64_t i) const { return scales_ + i * (k_ / 32); }
    const float* offsets(int64_t i) const { return offsets_ + i * (k_ / 32); }

private:
    int8_t* values_ = nullptr;
    float* scales_ = nullptr;
    float* offsets_ = nullptr;
    int64_t m_ = 0, k_ = 0;
};

// B's rows unpacked from Q4_0 in groups of 16 rows (zero rows after the last): per block and
// 4 values of it, the group's 16 rows' 4 values as bytes 0..15 (64 bytes: the lanes of one
// vpdpbusd); per group and block the 16 rows' scales. Filled block by block by whoever knows
// where the weight's blocks lie (q4_matmul.cpp: q4_unpack_rows_i8, T3's packed layout).
class I8Weight {
public:
    // Room for n rows of k values; the rows of the last group past n are zeros.
    void reset(int64_t n, int64_t k);
    // Row r's block b: its scale and its 16 bytes of nibbles (block_q4_0's: values 0-15 in the
    // low nibbles, 16-31 in the high ones).
    void set_block(int64_t r, int64_t b, float d, const uint8_t* qs) {
        const int64_t lane = r % 16, g = r / 16;
        scales_[static_cast<size_t>((g * (k_ / 32) + b) * 16 + lane)] = d;
        uint8_t values[32];
        for (int j = 0; j < 16; ++j) values[j] = qs[j] & 15, values[j + 16] = qs[j] >> 4;
        uint8_t* out = values_.data() + g * 16 * k_ + b * 32 * 16 + lane * 4;
        for (int s = 0; s < 8; ++s) std::memcpy(out + s * 64, values + 4 * s, 4);
    }
    int64_t rows() const { return n_; }
    int64_t k() const { return k_; }
    int64_t groups() const { return (n_ + 15) / 16; }
    const uint8_t* group(int64_t g) const { return values_.data() + g * 16 * k_; }  // on a cache line
    const float* group_scales(int64_t g) const { return scales_.data() + g * 16 * (k_ / 32); }

private:
    AlignedBuffer<uint8_t> values_;
    std::vector<float> scales_;
    int64_t n_ = 0, k_ = 0;
};

// C[i][j] = sum_k A[i][k] B[j][k] for i < a.rows(), j < b.rows(), row i of C at C + i * ldc.
// Runs on the calling thread.
void q8_gemm(const I8Rows& a, const I8Weight& b, float* C, int64_t ldc);

}  // namespace cbs
