// A graph's matrix products and how each runs on the CPU: ggml's own kernels, OpenBLAS's sgemm
// (exact f32), AMX tiles in bf16x3 or int16 on AVX512-VNNI (fast), or T3's packed Q4_0 kernel.
// matmul() picks the kernel; the kernels are custom graph operations on ggml's threads.
#pragma once

#include "ggml-backend.h"
#include "ggml.h"

namespace cbs {

class ModelFile;

// How a graph's f32 matrix products run on the CPU (the `blas` argument below). From a bool,
// the callers' on_cpu flag: true is `exact`, false `ggml`.
struct CpuProducts {
    enum Kind {
        ggml,   // ggml's own kernels (any backend; the only choice off the CPU)
        exact,  // OpenBLAS sgemm: f32 arithmetic, the reference mode (f32 models, parity)
        fast,   // AMX tiles in bf16x3 (cpu/amx_gemm.h: within ~1e-5 of f32) where the CPU has
                // them; else, on AVX512-VNNI, Q4_0 weights' products and attention in int16
                // (cpu/vnni_gemm.h: ~2e-5 and ~7e-5); else as exact. For a model whose
                // matrices are quantised or f16 anyway
        device_default,  // ggml's kernels at the device's default precision (TF32 on CUDA), not
                         // at f32: a GPU's CFM attention for a model whose matrices are quantised
                         // or f16, whose weight products run so already (mul_mat_weight)
    };
    Kind kind;
    CpuProducts(bool blas) : kind(blas ? exact : ggml) {}  // NOLINT(google-explicit-constructor)
    CpuProducts(Kind k) : kind(k) {}                       // NOLINT(google-explicit-constructor)
    bool blas() const { return kind == exact || kind == fast; }
};

// The products for a component whose matrices include `weight`: ggml off the CPU, exact for an
// f32 weight, fast for a quantised or f16 one.
CpuProducts products_for(ggml_backend_t backend, const ggml_tensor* weight);
// The products a model's S3Gen takes (products_for its encoder's first weight), which the CPU
// components beside it follow (the S3Tokenizer, HiFT): fast for a quantised model, whose
// matrices are approximate by far more already. A file without S3Gen: exact on the CPU.
CpuProducts s3gen_products(const ModelFile& mf, ggml_backend_t backend);

// ggml_mul_mat(a, b) ([K, M, ...] x [K, N, ...] -> [M, N, ...], a broadcast over b's
// batches). With `blas` (a CPU backend's graph) and OpenBLAS built in, f32 operands whose
// rows are contiguous (views allowed) go through single-threaded sgemm on ggml's threads,
// each taking a share of the rows: faster than ggml's tinyBLAS on this model's shapes.
// A 2-D `a` stored quantised or f16 (a quantised model's S3Gen weights) takes the same path:
// each thread converts its share of a's rows to f32 first (CBS_BLAS_QUANT=0: ggml's kernel).
// `fast` with AMX: the same splits, each product on AMX tiles (a 2-D `a` split by its rows
// between the threads, whatever its type); without AMX, on AVX512-VNNI, a Q4_0 `a`'s products
// in int16 (b's rows rounded once per product, a's rows unpacked by pieces).
// `columns` (T3's packed Q4_0 weights only): choose the kernel as for a product of that many
// columns, not b's own (a prompt's rows computed apart give the same values as together).
ggml_tensor* matmul(ggml_context* ctx, ggml_tensor* a, ggml_tensor* b, CpuProducts blas, int64_t columns = 0);

// A causal convolution's product in the fast products: w [k * C_in, C_out] with k frames'
// values in order of time (all of a frame's channels, then the next frame's: not PyTorch's
// order, which has each channel's k taps together) times the columns of x [C_in, T, B] (frames
// in rows) with k - 1 zero frames before the first -> [C_out, T, B]; `left_context`: x's first
// k - 1 frames are the context before the first output, no zeros (-> T - k + 1 frames). The
// im2col matrix is never made: its rows are x's frames read in place, on AMX tiles where the
// CPU has them, else by sgemm a tap at a time (an f32 w). nullptr where this does not apply
// (exact products, or shapes it does not take).
ggml_tensor* causal_conv_product(ggml_context* ctx, ggml_tensor* w, ggml_tensor* x, int64_t k, CpuProducts how,
                                 bool left_context = false);

// The most columns ggml-cuda multiplies by an f32 weight in its f32 vector kernel, each column
// as alone (Ampere and later; more on older GPUs): over 4 to 16 it takes TF32 tensor-core
// kernels (~1e-3), unless the product asks for f32 (patches/0002: cuBLAS, other sums).
constexpr int64_t kGpuF32VectorColumns = 3;

// ggml_mul_mat(w, x) for a model weight w (at f32 for an f32 w over more than
// kGpuF32VectorColumns columns,
// ggml's default precision otherwise); matmul's path for T3's packed Q4_0 weights on the CPU
// (cpu/q4_matmul.h).
ggml_tensor* mul_mat_weight(ggml_context* ctx, ggml_tensor* w, ggml_tensor* x, int64_t columns = 0);

// The columns from which a product of T3's packed Q4_0 weights leaves our kernel (cpu/q4_matmul.h)
// for AMX or sgemm on the converted weights (a prompt's many columns): 64 with AMX, 128 on
// the kernel's AVX-512 form, 256 on its AVX2 form.
int64_t q4_kernel_max_columns();

}  // namespace cbs
