// Small ggml building blocks shared by every model component, written once.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

namespace cbs {

// Layer norm over ne0 (channels when a tensor is [C, T]) with affine w, b.
ggml_tensor* layer_norm(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, float eps);

// How a graph's f32 matrix products run on the CPU (the `blas` argument below). From a bool,
// the callers' on_cpu flag: true is `exact`, false `ggml`.
struct CpuProducts {
    enum Kind {
        ggml,   // ggml's own kernels (any backend; the only choice off the CPU)
        exact,  // OpenBLAS sgemm: f32 arithmetic, the reference mode (f32 models, parity)
        fast,   // AMX tiles in bf16x3 (core/amx_gemm.h: within ~1e-5 of f32) where the CPU has
                // them; else, on AVX512-VNNI, Q4_0 weights' products and attention in int16
                // (core/vnni_gemm.h: ~2e-5 and ~7e-5); else as exact. For a model whose
                // matrices are quantised or f16 anyway
    };
    Kind kind;
    CpuProducts(bool blas) : kind(blas ? exact : ggml) {}  // NOLINT(google-explicit-constructor)
    CpuProducts(Kind k) : kind(k) {}                       // NOLINT(google-explicit-constructor)
    bool blas() const { return kind != ggml; }
};

// The products for a component whose matrices include `weight`: ggml off the CPU, exact for an
// f32 weight, fast for a quantised or f16 one.
CpuProducts products_for(ggml_backend_t backend, const ggml_tensor* weight);

// ggml_mul_mat(a, b) ([K, M, ...] x [K, N, ...] -> [M, N, ...], a broadcast over b's
// batches). With `blas` (a CPU backend's graph) and OpenBLAS built in, f32 operands whose
// rows are contiguous (views allowed) go through single-threaded sgemm on ggml's threads,
// each taking a share of the rows: about twice ggml's tinyBLAS on this model's shapes.
// A 2-D `a` stored quantised or f16 (a quantised model's S3Gen weights) takes the same path:
// each thread converts its share of a's rows to f32 first (CBS_BLAS_QUANT=0: ggml's kernel).
// `fast` with AMX: the same splits, each product on AMX tiles (a 2-D `a` split by its rows
// between the threads, whatever its type); without AMX, on AVX512-VNNI, a Q4_0 `a`'s products
// in int16 (b's rows rounded once per product, a's rows unpacked by pieces).
ggml_tensor* matmul(ggml_context* ctx, ggml_tensor* a, ggml_tensor* b, CpuProducts blas);

// ggml_mul_mat(w, x) for a model weight w, at ggml's default precision; matmul's path for
// T3's packed Q4_0 weights on the CPU (core/q4_matmul.h).
ggml_tensor* mul_mat_weight(ggml_context* ctx, ggml_tensor* w, ggml_tensor* x);

// x [in, n] -> [out, n] through a PyTorch-layout Linear weight (ne [in, out]); b may be null.
ggml_tensor* linear(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, CpuProducts blas = false);

// 1-D convolution in full f32 (ggml_conv_1d rounds through an f16 im2col):
// x [L, C_in] (time fastest), w ne [K, C_in, C_out] -> [L_out, C_out]; b [C_out] may be null.
ggml_tensor* conv1d(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, int stride = 1, int pad = 0,
                    int dilation = 1, CpuProducts blas = false);

// GELU with the exact erf, x * (1 + erf(x / sqrt 2)) / 2, and Mish, x * tanh(softplus(x)).
// On the CPU (on_cpu, f32) one fused pass each in vectorised f32 arithmetic (ggml's CPU ops
// call libm's scalar erff / expf / tanhf per element), as accurate as erff; elsewhere ggml's ops.
ggml_tensor* gelu_erf(ggml_context* ctx, ggml_tensor* x, bool on_cpu);
ggml_tensor* mish(ggml_context* ctx, ggml_tensor* x, bool on_cpu);
// GPT-2's tanh GELU (ggml_gelu with patches/0001), the same way on the CPU (libm's tanhf
// per element was ~5% of a T3 step).
ggml_tensor* gelu_tanh(ggml_context* ctx, ggml_tensor* x, bool on_cpu);

struct GraphInputs;

// Attention written as two matrix products around ggml_soft_max_ext (the S3Gen encoder's
// relative-position attention). Without OpenBLAS the products take ggml's tinyBLAS, which
// accepts a contraction length that is a multiple of 16 only (else ggml's much slower
// dot-product loop), so for probabilities x values the keys are padded with zeros to one
// and this mask [padded n_kv, n_q] gives the padded keys -inf (exactly zero weight).
// nullptr when no padding is needed, !on_cpu, or OpenBLAS (matmul) takes any length.
ggml_tensor* key_pad_mask(ggml_context* ctx, GraphInputs& in, int64_t n_kv, int64_t n_q, bool on_cpu);

// softmax(scale * scores + mask) x v. scores [n_kv', T_q, H, B] contiguous, n_kv' the
// mask's width (n_kv without a mask); v [D, n_kv, H, B] (a view is fine) -> [D, H, T_q, B].
ggml_tensor* attend(ggml_context* ctx, ggml_tensor* scores, ggml_tensor* v, ggml_tensor* mask, float scale,
                    CpuProducts blas);

// Full-context softmax attention in f32 with scale 1/sqrt(D): q, k, v [D, T, H, B] (views
// whose rows are contiguous) -> [D, H, T_q, B]. On the CPU with OpenBLAS (CBS_HAVE_BLAS) one
// fused operation: per head and block of queries, scores, softmax and values through
// single-threaded sgemm on ggml's threads (about twice tinyBLAS on these shapes, and no
// T x T tensor per head). On a GPU two f32 products around ggml's softmax (the device's
// flash attention rounds K and V to f16). On the CPU without OpenBLAS ggml_flash_attn_ext
// (f32 precision), measured faster there than two tinyBLAS products around the softmax.
// `fast` with AMX: both products of a block on AMX tiles (K and V packed once per head); without
// AMX, on AVX512-VNNI (D a multiple of 32), both in int16 the same way.
ggml_tensor* attention(ggml_context* ctx, ggml_tensor* q, ggml_tensor* k, ggml_tensor* v, CpuProducts on_cpu);

// row[j] = e^(row[j] - max(row)) (within about one ulp, vectorised); returns their sum.
float exp_shifted_row(float* row, int64_t n);

// Whether the build links OpenBLAS (matmul's and attention's CPU path).
bool have_blas();
// The kernel set OpenBLAS chose for this CPU ("SkylakeX", "Haswell", ...), "" without OpenBLAS.
std::string blas_core();

// Host values for a graph's input tensors, uploaded once the graph is allocated.
struct GraphInputs {
    std::vector<std::pair<ggml_tensor*, std::vector<int32_t>>> ints;
    std::vector<std::pair<ggml_tensor*, std::vector<float>>> floats;
    std::vector<std::pair<ggml_tensor*, std::vector<ggml_fp16_t>>> halves;

    ggml_tensor* ids(ggml_context* ctx, std::vector<int32_t> v);
    ggml_tensor* f32(ggml_context* ctx, std::vector<float> v, int64_t ne0, int64_t ne1 = 1);
    ggml_tensor* f16_mask(ggml_context* ctx, std::vector<ggml_fp16_t> v, int64_t ne0, int64_t ne1);
    void upload() const;
};

// Builds and runs one graph at a time on a backend, reusing its allocator. On a device
// other than the CPU the graph goes through ggml_backend_sched with a CPU backend of its
// own behind the device: an operation the device lacks runs on the CPU (inputs are
// uploaded, the output read back, nothing else crosses to the host).
class GraphRunner {
public:
    explicit GraphRunner(ggml_backend_t backend, size_t max_nodes = 16384);
    ~GraphRunner();
    GraphRunner(const GraphRunner&) = delete;
    GraphRunner& operator=(const GraphRunner&) = delete;

    // A fresh (metadata-only) context and graph for the next computation.
    ggml_context* begin();
    ggml_cgraph* graph() const { return graph_; }
    // Allocates, uploads `in`, computes and reads `out` back as float32.
    std::vector<float> compute(ggml_tensor* out, const GraphInputs& in);
    // The same for several outputs of one graph, in the order given.
    std::vector<std::vector<float>> compute(const std::vector<ggml_tensor*>& outs, const GraphInputs& in);
    // Allocates, uploads `in` and computes graph() (its outputs stay on the device).
    void run(const GraphInputs& in);
    // A device: sizes the compute buffers for graph() with `out` (built, not computed), so
    // that later graphs up to that size allocate nothing. Returns the device buffer's
    // bytes (0 on the CPU, whose large buffers are freed after use anyway).
    size_t reserve(ggml_tensor* out);
    // Computes the last graph again as it was allocated (no rebuild, no re-allocation:
    // a device replays it as it stands), with new values for its inputs `in`, and reads
    // `out` back. Only while generation() is unchanged since that graph was computed.
    std::vector<float> rerun(ggml_tensor* out, const GraphInputs& in);
    // Counts begin() calls: a graph kept for rerun() is stale once this has moved on.
    uint64_t generation() const { return generation_; }
    ggml_backend_t backend() const { return backend_; }

private:
    // On the CPU: frees a compute buffer above kKeepComputeBytes (ggml_ops.cpp) after use.
    void release_large_buffer();
    // The scheduler told to run on the CPU the ops the device accepts but aborts on.
    void assign_lacking_ops();
    // CBS_PROFILE_OPS=1: the graph computed, then computed again node by node, timed by kind.
    ggml_status profiled_compute(const GraphInputs& in);

    ggml_backend_t backend_;
    size_t max_nodes_;
    ggml_gallocr_t alloc_ = nullptr;        // the CPU: one backend, no scheduler
    ggml_backend_t cpu_ = nullptr;          // another device: its CPU fallback ...
    ggml_backend_sched_t sched_ = nullptr;  // ... and the scheduler over both
    std::vector<uint8_t> meta_;
    ggml_context* ctx_ = nullptr;
    ggml_cgraph* graph_ = nullptr;
    uint64_t generation_ = 0;
};

}  // namespace cbs
