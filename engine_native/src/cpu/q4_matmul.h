// T3's Q4_0 matrix products on the CPU through a kernel of our own (AVX-512 VNNI, or AVX2).
//
// Decoding one token reads every T3 weight once, so a step is bound by how fast the
// weights stream from memory. ggml's repacked Q4_0 gemv (8 rows interleaved) and a kernel
// over plain rows (each row its own stream) both fall well short of the memory's rate;
// read as one stream per 8 rows, 64 bytes (4 blocks) per step, the weights come several
// times faster (docs/CPU.md). A CPU without AVX-512 runs the same layout through an AVX2
// form (maddubs for dpbusd, 32 bytes a step), also far faster than ggml's kernels (which
// also leave the step unfused: t3/decode_step.h).
//
// The packed layout has the size of ggml's Q4_0 and is written over the tensor's own data
// at load (ModelFile): for a weight ne [K, N], rows in groups of 8 (the last group: the
// rest), each group one stream of chunks of 16 blocks (the last: the rest), a chunk the
// group's fp16 scales [rows][blocks] then its 16-byte nibble groups in quads of 4 blocks,
// [rows][4 x 16 bytes] each (q4_matmul.cpp, PackedBlock). Only this file's code reads it
// (q4_matmul, and q4_unpack_rows for cpu/products.cpp's matmul): ggml's own operations must
// never see such a tensor.
// The activations are quantised the way ggml's Q8_0 does it (per 32 values, scale
// max|x| / 127 rounded to fp16, values rounded to nearest), so the integer dot products
// are ggml's; only the order of the float sums differs.
#pragma once

#include <cstdint>

#include "ggml.h"

namespace cbs {

class I8Weight;

// Whether this CPU runs the kernel (AVX-512 F/BW/VL/VNNI, else AVX2 with FMA and F16C) and
// CBS_Q4_MATMUL is not 0.
bool q4_packed_available();
// The instruction set the kernel runs with here: "AVX-512 VNNI", "AVX2", or "" when it does
// not run (q4_packed_available() is false).
const char* q4_kernel_isa();

// Rewrites `src` (n_rows rows of ggml block_q4_0, K values each) into the packed layout at
// `dst` (the same number of bytes; src and dst must not overlap).
void q4_pack(const void* src, void* dst, int64_t n_rows, int64_t K);

// Rows r0 .. r0+n-1 of a packed weight as f32 (n x K values at out).
void q4_unpack_rows(const ggml_tensor* w, int64_t r0, int64_t n, float* out);

// Rows r0 .. r0+n-1 (r0 a multiple of 8) of a packed weight into the int8 tile's layout
// (cpu/q8_gemm.h), where the CPU has the tile.
void q4_unpack_rows_i8(const ggml_tensor* w, int64_t r0, int64_t n, I8Weight& out);

// Rows r0 .. r0+n-1 of a Q4_0 weight in ggml's own layout (not packed) as f32 into `out`
// (n x ne[0]): ggml's dequantize_row_q4_0, vectorised (ggml's is a scalar loop in ggml-base,
// and the AMX products convert every weight at every evaluation).
void q4_0_rows_to_f32(const ggml_tensor* w, int64_t r0, int64_t n, float* out);

// Block b (32 values) of row r of a Q4_0 weight w as f32 into out: a source for AmxPackedB::pack
// (q4_block_to_f32(w) chooses the layout's; nullptr when w is not Q4_0).
using Q4BlockToF32 = void (*)(const void* w, int64_t r, int64_t b, float* out);
Q4BlockToF32 q4_block_to_f32(const ggml_tensor* w);

// Marks a tensor as holding the packed layout (ModelFile, after writing it), or not.
void q4_mark_packed(const ggml_tensor* t, bool packed);
bool q4_is_packed(const ggml_tensor* t);

// w x for a packed weight w ne [K, N] and f32 x ne [K, ...] -> f32 [N, ...]: the product
// split over ggml's threads by rows; its activations quantised by every thread itself (a
// few columns) or in a graph node of their own before it.
ggml_tensor* q4_matmul(ggml_context* ctx, ggml_tensor* w, ggml_tensor* x);

// A decoding step's product in pieces, for operations that fuse more around it
// (t3/decode_step.h): one activation column quantised by the calling thread, then that
// thread's share of the rows. The same arithmetic as q4_matmul's.
size_t q4_column_bytes(int64_t K);                                // bytes of one quantised column
void q4_quantize_column(const float* x, int64_t K, uint8_t* col);  // K floats -> col
// Thread ith's rows [r0, r1) of N (whole groups of 8, as q4_matmul splits them).
void q4_thread_rows(int64_t N, int ith, int nth, int64_t& r0, int64_t& r1);
// y[c * y_stride + r - r0] = (w x_c)[r] for rows r0 .. r1-1 of a packed w and M columns from
// q4_quantize_column (column c at cols + c * col_stride), the weights read once for all.
void q4_product_rows(const ggml_tensor* w, const uint8_t* cols, int64_t M, size_t col_stride, int64_t r0, int64_t r1,
                     float* y, int64_t y_stride);

}  // namespace cbs
