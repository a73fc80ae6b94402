#include "cpu/products.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/backend.h"
#include "core/model_file.h"
#include "cpu/amx_gemm.h"
#include "cpu/blas.h"
#include "cpu/op_helpers.h"
#include "cpu/q4_matmul.h"
#include "cpu/q8_gemm.h"
#include "cpu/vnni_gemm.h"

namespace cbs {

CpuProducts products_for(ggml_backend_t backend, const ggml_tensor* weight) {
    if (!backend_is_cpu(backend)) return CpuProducts::ggml;
    return weight->type == GGML_TYPE_F32 ? CpuProducts::exact : CpuProducts::fast;
}

CpuProducts s3gen_products(const ModelFile& mf, ggml_backend_t backend) {
    // Its type from the metadata: the weight's data may not be loaded (a model decoded by
    // another file's S3Gen leaves its own lazy, and the S3Tokenizer asks here too).
    const auto& all = mf.tensors();
    if (auto w = all.find("s3gen.enc.encoders.0.feed_forward.w_1.weight"); w != all.end()) return products_for(backend, w->second);
    return CpuProducts(backend_is_cpu(backend));
}

#ifdef CBS_HAVE_BLAS

// dst = a x b as ggml_mul_mat: C[N x M] = B[N x K] A[M x K]^T per batch of b, row-major.
// Work units: b's batches, each cut into enough row blocks for every thread to have one.
static void blas_matmul(ggml_tensor* dst, int ith, int nth, void* amx) {
    openblas_one_thread();
    const ggml_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t K = a->ne[0], M = a->ne[1], N = b->ne[1], batches = b->ne[2] * b->ne[3];
    const int64_t chunks = batches >= nth ? 1 : (nth + batches - 1) / batches, rows = (N + chunks - 1) / chunks;
    const int lda = static_cast<int>(a->nb[1] / sizeof(float)), ldb = static_cast<int>(b->nb[1] / sizeof(float));
    const int ldc = static_cast<int>(dst->nb[1] / sizeof(float));
    thread_local AmxPackedB ap;
    thread_local AmxSplitA bs;
    const float* packed = nullptr;  // the batch of a that ap holds
    for (int64_t u = ith; u < batches * chunks; u += nth) {
        const int64_t r0 = (u % chunks) * rows, i2 = (u / chunks) % b->ne[2], i3 = (u / chunks) / b->ne[2];
        const int64_t n = std::min(rows, N - r0);
        if (n <= 0) continue;
        const float* A = row_at(a, 0, i2 / (b->ne[2] / a->ne[2]), i3 / (b->ne[3] / a->ne[3]));
        float* C = const_cast<float*>(row_at(dst, r0, i2, i3));
        if (amx) {
            if (A != packed) ap.pack(A, lda, M, K), packed = A;
            bs.split(row_at(b, r0, i2, i3), ldb, n, K);
            amx_gemm(bs, ap, C, ldc);
            continue;
        }
        scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(M),
                          static_cast<int>(K), 1.0f, row_at(b, r0, i2, i3), ldb, A, lda, 0.0f, C, ldc);
    }
}
#endif

#ifdef CBS_HAVE_BLAS
// Rows m0 .. m0+m-1 of a 2-D weight as f32: its own rows when f32 (ld from its stride), else
// converted into `buf` (ld = K).
static const float* weight_rows_f32(const ggml_tensor* a, int64_t m0, int64_t m, std::vector<float>& buf, int64_t& ld) {
    const int64_t K = a->ne[0];
    if (a->type == GGML_TYPE_F32) {
        ld = a->nb[1] / sizeof(float);
        return reinterpret_cast<const float*>(static_cast<const char*>(a->data) + m0 * a->nb[1]);
    }
    buf.resize(static_cast<size_t>(m * K));
    if (q4_is_packed(a)) {
        q4_unpack_rows(a, m0, m, buf.data());
    } else if (a->type == GGML_TYPE_Q4_0) {
        q4_0_rows_to_f32(a, m0, m, buf.data());
    } else {
        const ggml_to_float_t to_float = ggml_get_type_traits(a->type)->to_float;
        for (int64_t i = 0; i < m; ++i) to_float(static_cast<const char*>(a->data) + (m0 + i) * a->nb[1], buf.data() + i * K, K);
    }
    ld = K;
    return buf.data();
}

static void amx_weight_matmul(ggml_tensor* dst, int nth);

// blas_matmul for a 2-D weight `a` stored quantised or f16 (a Q4_0 model's S3Gen): each thread
// converts its share of a's rows to f32 (ggml's to_float) into a buffer of its own, then
// multiplies every row of b by them. Converting costs M*K per product against sgemm's M*K*N,
// and the activations stay f32 (ggml's own kernel rounds them to 8 bits). Faster than ggml's
// Q4_0 kernel and nearly as fast as f32 weights, without the memory of dequantising at load.
// An f32 weight comes here in exact mode where it has more rows than b (matmul); on AMX
// (userdata set) any 2-D weight, f32 too, goes to amx_weight_matmul below.
static void weight_matmul(ggml_tensor* dst, int ith, int nth, void* amx) {
    if (amx) return amx_weight_matmul(dst, nth);
    openblas_one_thread();
    const ggml_tensor *a = dst->src[0], *b = dst->src[1];
    const int64_t K = a->ne[0], M = a->ne[1], N = b->ne[1];
    const int64_t per = ((M + nth - 1) / nth + 15) / 16 * 16, m0 = std::min(M, ith * per), m = std::min(per, M - m0);
    if (m <= 0) return;
    thread_local std::vector<float> w;
    int64_t ldw = K;
    const float* W = weight_rows_f32(a, m0, m, w, ldw);
    const int ldb = static_cast<int>(b->nb[1] / sizeof(float)), ldc = static_cast<int>(dst->nb[1] / sizeof(float));
    for (int64_t i3 = 0; i3 < b->ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < b->ne[2]; ++i2)
            scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(N), static_cast<int>(m),
                              static_cast<int>(K), 1.0f, row_at(b, 0, i2, i3), ldb, W, static_cast<int>(ldw), 0.0f,
                              const_cast<float*>(row_at(dst, 0, i2, i3)) + m0, ldc);
}

// The split tensor (amx_split's output): a cache line holding the product's work counter, then
// the split of each batch of b (b's batches in order). amx_split zeroes the counter itself, so
// a product needs no work_counter node (and no barrier) of its own.
static constexpr int64_t kSplitHeader = 64;
static std::atomic<int64_t>* split_counter(const ggml_tensor* split) {
    return static_cast<std::atomic<int64_t>*>(split->data);
}
// Batch (i2, i3) of b in a split tensor whose batches take `bytes` each (AMX's or int16's form).
template <class F>
static void for_each_batch(const ggml_tensor* b, F&& f) {  // f(i2, i3) for each of b's ne[2] x ne[3] batches
    for (int64_t i3 = 0; i3 < b->ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < b->ne[2]; ++i2) f(i2, i3);
}

static void* split_batch(const ggml_tensor* split, const ggml_tensor* b, int64_t i2, int64_t i3, size_t bytes) {
    return static_cast<char*>(split->data) + kSplitHeader + (i3 * b->ne[2] + i2) * bytes;
}
static void* split_batch(const ggml_tensor* split, const ggml_tensor* b, int64_t i2, int64_t i3) {
    return split_batch(split, b, i2, i3, AmxSplitA::bytes(b->ne[1], b->ne[0]));
}

// The same on AMX tiles: pieces of weight rows, each taken by whichever thread is free (the
// split's counter), packed into tiles and multiplied by all of b; so a core slowed by other
// work on the machine holds up no other. Pieces of up to 256 rows (one panel of amx_gemm's),
// and no smaller than a thread's share needs: the activations' split is read from L3 once per
// piece and C written in strips a piece wide, so wider is faster up to a panel. Packing each
// weight once for all threads (a node of its own) and splitting b's rows instead loses to the
// packed weight's round trip through memory (docs/CPU_MULTILINGUAL.md has both measured).
static constexpr int64_t kAmxMaxPieceRows = 256;
// b's shape is dst's (rows N = ne[1], its batches) and a's (K = ne[0]): src 1 may be another
// tensor (causal_conv_product's input, whose split its own node made).
static void amx_weight_matmul(ggml_tensor* dst, int nth) {
    const ggml_tensor *a = dst->src[0], *split = dst->src[2];
    const int64_t K = a->ne[0], M = a->ne[1], N = dst->ne[1];
    const int64_t ldc = dst->nb[1] / sizeof(float);
    const int64_t piece = std::min(kAmxMaxPieceRows, ((M + nth - 1) / nth + 15) / 16 * 16);
    thread_local std::vector<float> w;
    thread_local AmxPackedB wp;
    const Q4BlockToF32 q4_blocks = q4_block_to_f32(a);
    AmxSplitA bs;
    for (int64_t m0; (m0 = split_counter(split)->fetch_add(piece)) < M;) {
        const int64_t m = std::min(piece, M - m0);
        if (q4_blocks) {  // Q4_0 blocks go to the tiles through L1
            wp.pack(q4_blocks, a, m0, m, K);
        } else {
            int64_t ldw = K;
            wp.pack(weight_rows_f32(a, m0, m, w, ldw), ldw, m, K);
        }
        for_each_batch(dst, [&](int64_t i2, int64_t i3) {
            bs.view(split_batch(split, dst, i2, i3, AmxSplitA::bytes(N, K)), N, K);
            amx_gemm(bs, wp, const_cast<float*>(row_at(dst, 0, i2, i3)) + m0, ldc);
        });
    }
}

// b's rows split for AMX (AmxSplitA) into dst, one row of dst per batch of b, each thread a
// share of the row blocks: done once per product, not by every thread that multiplies them.
static void amx_split(ggml_tensor* dst, int ith, int nth, void*) {
    const ggml_tensor* b = dst->src[0];
    const int64_t K = b->ne[0], N = b->ne[1];
    if (ith == 0) split_counter(dst)->store(0);  // the graph's barrier publishes it before the product
    AmxSplitA split;
    for_each_batch(b, [&](int64_t i2, int64_t i3) {
        split.view(split_batch(dst, b, i2, i3), N, K);
        const int64_t blocks = split.row_blocks();
        split.split_blocks(row_at(b, 0, i2, i3), b->nb[1] / sizeof(float), blocks * ith / nth, blocks * (ith + 1) / nth);
    });
}

// A causal convolution's im2col matrix split for AMX straight from its input x [C, T, B]
// (frames of C values in a row), kernel k (userdata: k as intptr_t; -k: x's first k - 1
// frames are the left context, no zeros): row t is the k frames t-k+1 .. t, in that order,
// zeros before the first frame; so rows from frame k-1 on are x's own frames read in place
// (rows k frames long, one frame apart), and only the first row block is assembled with its
// zeros. Each thread takes a share of the row blocks.
static void amx_conv_split(ggml_tensor* dst, int ith, int nth, void* userdata) {
    const ggml_tensor* x = dst->src[0];
    const int64_t code = reinterpret_cast<intptr_t>(userdata), k = code < 0 ? -code : code, C = x->ne[0], K = k * C;
    const int64_t T = code < 0 ? x->ne[1] - (k - 1) : x->ne[1];
    const int64_t ld = x->nb[1] / sizeof(float);
    if (ith == 0) split_counter(dst)->store(0);  // the graph's barrier publishes it before the product
    thread_local std::vector<float> first;  // the first row block's frames, after k - 1 zero frames
    AmxSplitA split;
    for (int64_t i3 = 0; i3 < x->ne[3]; ++i3)
        for (int64_t i2 = 0; i2 < x->ne[2]; ++i2) {
            split.view(split_batch(dst, x, i2, i3, AmxSplitA::bytes(T, K)), T, K);
            const int64_t blocks = split.row_blocks(), b0 = blocks * ith / nth, b1 = blocks * (ith + 1) / nth;
            const float* frames = row_at(x, 0, i2, i3);
            for (int64_t rb = b0; rb < b1; ++rb) {
                if (code < 0 || rb > 0) {
                    split.split_blocks(code < 0 ? frames : frames - (k - 1) * ld, ld, rb, rb + 1);
                    continue;
                }
                const int64_t n = std::min<int64_t>(16, T);
                first.assign(static_cast<size_t>((16 + k - 1) * C), 0.0f);
                for (int64_t t = 0; t < n; ++t)
                    std::memcpy(first.data() + (t + k - 1) * C, frames + t * ld, sizeof(float) * C);
                split.split_blocks(first.data(), C, 0, 1);
            }
        }
}

// The same convolution through sgemm where there are no AMX tiles: BLAS takes no rows that
// overlap, so one product per tap j (the frames t - k + 1 + j of every output t, x's own rows
// one frame apart, against the weight's columns of that tap), summed into the output: the last
// tap first over every row, then the earlier ones over the rows whose frame for them is in x
// (none reach before its first; with `left_context` all do). No im2col matrix, no padded copy.
// Each thread takes a share of each batch's rows.
static void sgemm_conv(ggml_tensor* dst, int ith, int nth, void* userdata) {
    openblas_one_thread();
    const ggml_tensor *w = dst->src[0], *x = dst->src[1];
    const int64_t code = reinterpret_cast<intptr_t>(userdata), k = code < 0 ? -code : code;
    const int64_t C = x->ne[0], M = w->ne[1], T = dst->ne[1], shift = code < 0 ? 0 : k - 1;
    const int64_t batches = x->ne[2] * x->ne[3];
    const int64_t chunks = batches >= nth ? 1 : (nth + batches - 1) / batches, rows = (T + chunks - 1) / chunks;
    const int ldx = static_cast<int>(x->nb[1] / sizeof(float)), ldw = static_cast<int>(w->nb[1] / sizeof(float));
    const int ldc = static_cast<int>(dst->nb[1] / sizeof(float));
    for (int64_t u = ith; u < batches * chunks; u += nth) {
        const int64_t r0 = (u % chunks) * rows, r1 = std::min(T, r0 + rows), i2 = (u / chunks) % x->ne[2], i3 = (u / chunks) / x->ne[2];
        const float* frames = row_at(x, 0, i2, i3);
        float* out = const_cast<float*>(row_at(dst, 0, i2, i3));
        for (int64_t n = 0; n < k; ++n) {
            const int64_t j = (n + k - 1) % k, t0 = std::max(r0, shift - j);  // taps k-1, 0, 1, ..
            if (t0 >= r1) continue;
            scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(r1 - t0), static_cast<int>(M),
                              static_cast<int>(C), 1.0f, frames + (t0 - shift + j) * ldx, ldx,
                              static_cast<const float*>(w->data) + j * C, ldw, n == 0 ? 0.0f : 1.0f, out + t0 * ldc, ldc);
        }
    }
}

ggml_tensor* causal_conv_product(ggml_context* ctx, ggml_tensor* w, ggml_tensor* x, int64_t k, CpuProducts how,
                                 bool left_context) {
    const int64_t T = left_context ? x->ne[1] - (k - 1) : x->ne[1];
    if (how.kind != CpuProducts::fast || x->type != GGML_TYPE_F32 || x->nb[0] != sizeof(float) ||
        x->nb[1] % sizeof(float) != 0 || w->ne[0] != k * x->ne[0] || ggml_n_dims(w) != 2 ||
        (w->type != GGML_TYPE_F32 && !ggml_get_type_traits(w->type)->to_float) || q4_is_packed(w) || T < 1)
        return nullptr;
    const intptr_t code = left_context ? -k : k;
    if (!amx_tag(how)) {
        if (w->type != GGML_TYPE_F32 || !ggml_is_contiguous(w)) return nullptr;
        ggml_tensor* args[2] = {w, x};
        return ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[1], T, x->ne[2], x->ne[3], args, 2, sgemm_conv, GGML_N_TASKS_MAX,
                              reinterpret_cast<void*>(code));
    }
    const int64_t bytes = kSplitHeader + static_cast<int64_t>(AmxSplitA::bytes(T, w->ne[0])) * x->ne[2] * x->ne[3];
    ggml_tensor* args[3] = {w, x, ggml_custom_4d(ctx, GGML_TYPE_I8, bytes, 1, 1, 1, &x, 1, amx_conv_split, GGML_N_TASKS_MAX,
                                                 reinterpret_cast<void*>(code))};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, w->ne[1], T, x->ne[2], x->ne[3], args, 3, weight_matmul, GGML_N_TASKS_MAX,
                          amx_tag(how));
}

static bool blas_quant_enabled() {  // CBS_BLAS_QUANT=0: ggml's own kernel (benchmarks/bench_s3gen_quant.py)
    const char* v = std::getenv("CBS_BLAS_QUANT");
    return !v || std::strcmp(v, "0") != 0;
}
#else
// A build without OpenBLAS (the GPU machine's): the caller's im2col path takes every convolution.
ggml_tensor* causal_conv_product(ggml_context*, ggml_tensor*, ggml_tensor*, int64_t, CpuProducts, bool) { return nullptr; }
#endif

int64_t q4_kernel_max_columns() {
    // With AMX the tiles win from 64 columns; without, the int8 tile (cpu/q8_gemm.h) from ~50
    // on AVX-512 VNNI, ~60 in its AVX2 form (below, unpacking every weight for it costs more
    // than the kernel's slower products save: docs/CPU_STAGES.md). Without the tile
    // (CBS_Q8_TILE=0), the kernel's int8 products beat sgemm on the converted weights to ~300
    // columns in the AVX2 form, ~100-150 on AVX-512 (docs/CPU_AVX2.md).
    if (amx_available()) return 64;
    if (int8_tile_available()) return std::strcmp(int8_tile_isa(), "AVX2") == 0 ? 64 : 48;
    return std::strcmp(q4_kernel_isa(), "AVX2") == 0 ? 256 : 128;
}

#ifdef CBS_HAVE_BLAS
// Weight rows a piece of the integer products (below): 3 groups of 16, one tile wide
// (cpu/vnni_gemm.cpp, cpu/q8_gemm.cpp); pieces taken as amx_weight_matmul's are.
static constexpr int64_t kVnniRows = 48;

// The integer products' two nodes, for Rows and Weight of cpu/vnni_gemm.h (int16) or
// cpu/q8_gemm.h (int8): b's rows rounded by every thread a share (the split), then pieces of
// kVnniRows weight rows taken by whichever thread is free, each unpacked by `unpack` and
// multiplied by all of b by `gemm`.
template <class Rows>
static void* rows_batch(const ggml_tensor* split, const ggml_tensor* b, int64_t i2, int64_t i3) {
    return split_batch(split, b, i2, i3, Rows::bytes(b->ne[1], b->ne[0]));
}

template <class Rows>
static void rows_split(ggml_tensor* dst, int ith, int nth, void*) {
    const ggml_tensor* b = dst->src[0];
    const int64_t K = b->ne[0], N = b->ne[1];
    if (ith == 0) split_counter(dst)->store(0);  // the graph's barrier publishes it before the product
    Rows rows;
    for_each_batch(b, [&](int64_t i2, int64_t i3) {
        rows.view(rows_batch<Rows>(dst, b, i2, i3), N, K);
        rows.quantize(row_at(b, 0, i2, i3), b->nb[1] / sizeof(float), N * ith / nth, N * (ith + 1) / nth);
    });
}

template <class Rows, class Weight, void (*unpack)(const ggml_tensor*, int64_t, int64_t, Weight&),
          void (*gemm)(const Rows&, const Weight&, float*, int64_t)>
static void integer_weight_matmul(ggml_tensor* dst, int, int, void*) {
    const ggml_tensor *a = dst->src[0], *b = dst->src[1], *split = dst->src[2];
    const int64_t K = a->ne[0], M = a->ne[1], N = b->ne[1];
    const int64_t ldc = dst->nb[1] / sizeof(float);
    thread_local Weight wp;
    Rows rows;
    for (int64_t m0; (m0 = split_counter(split)->fetch_add(kVnniRows)) < M;) {
        unpack(a, m0, std::min(kVnniRows, M - m0), wp);
        for_each_batch(b, [&](int64_t i2, int64_t i3) {
            rows.view(rows_batch<Rows>(split, b, i2, i3), N, K);
            gemm(rows, wp, const_cast<float*>(row_at(dst, 0, i2, i3)) + m0, ldc);
        });
    }
}

// The graph's nodes for a's products with b through integer_weight_matmul.
template <class Rows, class Weight, void (*unpack)(const ggml_tensor*, int64_t, int64_t, Weight&),
          void (*gemm)(const Rows&, const Weight&, float*, int64_t)>
static ggml_tensor* integer_product(ggml_context* ctx, ggml_tensor* a, ggml_tensor* b) {
    const int64_t bytes = kSplitHeader + static_cast<int64_t>(Rows::bytes(b->ne[1], b->ne[0])) * b->ne[2] * b->ne[3];
    ggml_tensor* args[3] = {a, b, ggml_custom_4d(ctx, GGML_TYPE_I8, bytes, 1, 1, 1, &b, 1, rows_split<Rows>,
                                                 GGML_N_TASKS_MAX, nullptr)};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, a->ne[1], b->ne[1], b->ne[2], b->ne[3], args, 3,
                          integer_weight_matmul<Rows, Weight, unpack, gemm>, GGML_N_TASKS_MAX, nullptr);
}

// `fast` without AMX: a ggml Q4_0 weight's products in int16 on AVX512-VNNI (cpu/vnni_gemm.h);
// its rows unpacked for them.
static void unpack_i16(const ggml_tensor* a, int64_t m0, int64_t m, I16Weight& w) {
    w.unpack_q4_0(static_cast<const char*>(a->data) + m0 * a->nb[1], a->nb[1], m, a->ne[0]);
}

// T3's packed Q4_0 weights over a prompt's columns, without AMX (AVX-512 VNNI or AVX2): the
// decoding kernel's int8 products as a register tile (cpu/q8_gemm.h), b's rows rounded to Q8_0.
static ggml_tensor* q8_product(ggml_context* ctx, ggml_tensor* a, ggml_tensor* b) {
    return integer_product<I8Rows, I8Weight, q4_unpack_rows_i8, q8_gemm>(ctx, a, b);
}

// Whether a's products with b go to the int16 products.
static bool vnni_weight(const ggml_tensor* a, CpuProducts how) {
    return how.kind == CpuProducts::fast && !amx_available() && int16_products_available() && a->type == GGML_TYPE_Q4_0 &&
           !q4_is_packed(a) && a->ne[0] % 32 == 0;
}

// Whether T3's packed weight a takes the int8 tile over many columns of b (there is no AMX).
static bool q8_tile(const ggml_tensor* a, const ggml_tensor* b) {
    return !amx_available() && int8_tile_available() && b->type == GGML_TYPE_F32 && b->nb[0] == sizeof(float) &&
           ggml_is_contiguous(a) && a->ne[2] == 1 && a->ne[3] == 1 && a->ne[0] == b->ne[0] && a->ne[0] % 32 == 0;
}
#endif

ggml_tensor* matmul(ggml_context* ctx, ggml_tensor* a, ggml_tensor* b, CpuProducts how, int64_t columns) {
    // T3's Q4_0 weights on the CPU (cpu/q4_matmul.h): a long prompt's many columns through
    // the int8 tile (without AMX), or the AMX tiles or sgemm below (the weights unpacked or
    // converted per product), a decoding step and a short prompt (a sentence's text) through
    // our kernel, which reads the weights once for all its columns, where unpacking every
    // weight per product costs more than it saves.
    const bool packed = q4_is_packed(a);
    (void)columns;
#ifdef CBS_HAVE_BLAS
    if (packed) {
        if (columns <= 0) columns = b->ne[1];
        const bool many = columns >= q4_kernel_max_columns();
        if (q8_tile(a, b)) return many ? q8_product(ctx, a, b) : q4_matmul(ctx, a, b);
        how = b->type == GGML_TYPE_F32 && b->nb[0] == sizeof(float) && many ? CpuProducts::fast : CpuProducts::ggml;
    }
    const bool blas = how.blas();
    const bool weight_like = ggml_is_contiguous(a) && a->ne[2] == 1 && a->ne[3] == 1 && b->type == GGML_TYPE_F32 &&
                             b->nb[0] == sizeof(float) && (b->ne[1] >= 16 || (packed && how.blas())) && a->ne[1] >= 16 &&
                             a->ne[0] == b->ne[0];
    // Exact products of an f32 weight with more rows than b has (the S3Tokenizer's 1280 x 5120
    // matrices over a few hundred frames): split by the weight's rows too, so that each thread
    // packs only its share of the weight, where blas_matmul's split of b's rows has every
    // thread pack all of it. The same sgemm on the same rows: the same numbers.
    // `fast` without AMX is exact for an f32 weight: the same split, so the same sums.
    const bool wide_f32_weight = (how.kind == CpuProducts::exact || (how.kind == CpuProducts::fast && !amx_tag(how))) &&
                                 a->type == GGML_TYPE_F32 && a->ne[1] > b->ne[1] * b->ne[2] * b->ne[3];
    // Quantised or f16 weights; with AMX any 2-D weight (split by its rows: each thread packs its own).
    if (blas && weight_like && ((a->type != GGML_TYPE_F32 && ggml_get_type_traits(a->type)->to_float &&
                                 blas_quant_enabled()) ||
                                (a->type == GGML_TYPE_F32 && (amx_tag(how) || wide_f32_weight)))) {
        if (vnni_weight(a, how)) return integer_product<I16Rows, I16Weight, unpack_i16, vnni_gemm>(ctx, a, b);
        void* amx = amx_tag(how);
        ggml_tensor* args[3] = {a, b, nullptr};
        if (amx) {
            const int64_t bytes = kSplitHeader + static_cast<int64_t>(AmxSplitA::bytes(b->ne[1], b->ne[0])) *
                                                     b->ne[2] * b->ne[3];
            args[2] = ggml_custom_4d(ctx, GGML_TYPE_I8, bytes, 1, 1, 1, &b, 1, amx_split, GGML_N_TASKS_MAX, nullptr);
        }
        return ggml_custom_4d(ctx, GGML_TYPE_F32, a->ne[1], b->ne[1], b->ne[2], b->ne[3], args, amx ? 3 : 2,
                              weight_matmul, GGML_N_TASKS_MAX, amx);
    }
    // Small products (a time embedding's one row) stay with ggml: sgemm's setup would dominate.
    if (blas && a->type == GGML_TYPE_F32 && b->type == GGML_TYPE_F32 && a->nb[0] == sizeof(float) &&
        b->nb[0] == sizeof(float) && b->ne[1] >= 16 && a->ne[1] >= 16 && a->ne[0] == b->ne[0] &&
        b->ne[2] % a->ne[2] == 0 && b->ne[3] % a->ne[3] == 0) {
        ggml_tensor* args[2] = {a, b};
        return ggml_custom_4d(ctx, GGML_TYPE_F32, a->ne[1], b->ne[1], b->ne[2], b->ne[3], args, 2, blas_matmul,
                              GGML_N_TASKS_MAX, amx_tag(how));
    }
#endif
    if (packed) return q4_matmul(ctx, a, b);  // ggml's kernels must not see the packed layout
    // Asked for at f32: on CUDA an f32 x f32 product otherwise runs through TF32 (patches/0002).
    ggml_tensor* r = ggml_mul_mat(ctx, a, b);
    if (how.kind != CpuProducts::device_default) ggml_mul_mat_set_prec(r, GGML_PREC_F32);
    return r;
}

ggml_tensor* mul_mat_weight(ggml_context* ctx, ggml_tensor* w, ggml_tensor* x, int64_t columns) {
    if (q4_is_packed(w)) return matmul(ctx, w, x, false, columns);
    ggml_tensor* r = ggml_mul_mat(ctx, w, x);
    // An f32 weight over more columns than the vector kernel takes (a prompt) at f32, as matmul
    // asks, not TF32; a step's few columns are f32 arithmetic there already, which the f32 path
    // (cuBLAS) would replace by other sums.
    if (w->type == GGML_TYPE_F32 && x->ne[1] > kGpuF32VectorColumns) ggml_mul_mat_set_prec(r, GGML_PREC_F32);
    return r;
}

}  // namespace cbs
