// Q4_0 weight products in 16-bit integers, the CPU's `fast` mode where it has no AMX, for a
// quantised model's S3Gen: on AVX512-VNNI (AMD Zen 4 and Zen 5, Intel before Sapphire Rapids)
// and, in the same layout with the same bits, on AVX2 (most desktop and laptop CPUs).
//
// A Q4_0 weight is d * q with q a small integer (-8..7) and d one fp16 scale per 32 values,
// so its integer part is exact in int16. The activations are rounded to int16 per 32 values
// (scale max|x| / 32767: ~2e-5 of each product, where bf16x3 on AMX keeps ~5e-6), and one
// vpdpwssd multiplies 32 pairs: twice the multiply-adds per cycle of f32 FMAs on these CPUs
// (both one 512-bit instruction per cycle on Zen 4). On AVX2 a vpmaddwd and a vpaddd take its
// place: 16 multiply-adds in two instructions that share three vector ports, against an f32
// FMA's 8 in one of two. Each block's int32 sums (at most
// 32 * 8 * 32767 < 2^24: exact in f32) are scaled by the two blocks' scales into f32 sums.
// Attention's two products take the same path with both operands activations, rounded so
// that no block's sum can overflow (kNormBound; ~3e-5 of each product).
//
// C = A B^T with A [m x k] the activations (f32 rows, rounded once per product) and B [n x k]
// the weight rows (ggml's block_q4_0, unpacked by the thread that multiplies them) or, for
// attention, activations packed the same way; k must be a multiple of 32. CBS_VNNI=0 turns
// it off, CBS_VNNI=avx2 takes the AVX2 form on a CPU that has AVX-512 too.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "cpu/aligned_buffer.h"

namespace cbs {

// AVX-512 F/BW/VL/VNNI, or AVX2 and FMA, on this CPU, and CBS_VNNI is not 0.
bool int16_products_available();
// Which form runs: "AVX-512 VNNI", "AVX2" or "" (none).
const char* int16_products_isa();

// A's rows as int16 with a float scale per 32 values: row i's values at values(i) (each row
// on a cache line), its k / 32 scales at scales(i). Over storage of bytes(m, k) (a graph tensor: one node rounds
// the rows, later nodes read them), each thread a share of the rows.
class I16Rows {
public:
    static size_t bytes(int64_t m, int64_t k);
    void view(void* storage, int64_t m, int64_t k);
    // The same over storage of its own (a thread's buffer, kept between uses).
    void own(int64_t m, int64_t k);
    // Rows r0 .. r1-1 of the m rows of k floats at `rows` (row i at rows + i * ld), times
    // `multiplier` (folded into the scales). `bounded`: each block's int16 also kept within a
    // norm of kNormBound (both operands of a product rounded so can have no block's int32 sum
    // overflow: attention's scores and values).
    void quantize(const float* rows, int64_t ld, int64_t r0, int64_t r1, bool bounded = false, float multiplier = 1.0f);
    int64_t rows() const { return m_; }
    int64_t k() const { return k_; }
    const int16_t* values(int64_t i) const { return values_ + i * k_; }
    const float* scales(int64_t i) const { return scales_ + i * (k_ / 32); }

private:
    AlignedBuffer<char> own_;
    int16_t* values_ = nullptr;
    float* scales_ = nullptr;
    int64_t m_ = 0, k_ = 0;
};

// B's rows unpacked from Q4_0: in groups of 16 rows (zero rows after the last), for each pair
// of k the group's 16 pairs of int16 (64 bytes, the lanes of one vpdpwssd), and per group and
// block of 32 the 16 rows' scales.
class I16Weight {
public:
    // n rows of ggml block_q4_0, k values each, row r at `rows + r * row_bytes`.
    void unpack_q4_0(const void* rows, size_t row_bytes, int64_t n, int64_t k);
    // n rows of f32 activations rounded as I16Rows' bounded ones: row r's value i at
    // `x + i * k_stride + r * row_stride` (attention's keys: k_stride 1; its values, a row per
    // channel and k the keys: row_stride 1); values i >= k_valid are zeros (padding).
    void pack(const float* x, int64_t k_stride, int64_t row_stride, int64_t n, int64_t k, int64_t k_valid);
    int64_t rows() const { return n_; }
    int64_t k() const { return k_; }
    int64_t groups() const { return (n_ + 15) / 16; }
    const int16_t* group(int64_t g) const { return values_.data() + g * 16 * k_; }  // on a cache line
    const float* group_scales(int64_t g) const { return scales_.data() + g * 16 * (k_ / 32); }

private:
    AlignedBuffer<int16_t> values_;
    std::vector<float> scales_;
    int64_t n_ = 0, k_ = 0;
};

// Both operands' int16 blocks of a bounded product stay within this Euclidean norm, so by
// Cauchy-Schwarz every partial int32 sum of a block is below 46300^2 (with rounding) < 2^31.
constexpr float kNormBound = 46300.0f;

// C[i][j] = sum_k A[i][k] B[j][k] for i < a.rows(), j < b.rows(), row i of C at C + i * ldc.
// A and B must have the same k. Runs on the calling thread.
void vnni_gemm(const I16Rows& a, const I16Weight& b, float* C, int64_t ldc);

}  // namespace cbs
