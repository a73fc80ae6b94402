#include "cpu/attention.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <vector>

#include "core/graph_helpers.h"
#include "cpu/amx_gemm.h"
#include "cpu/blas.h"
#include "cpu/op_helpers.h"
#include "cpu/softmax.h"
#include "cpu/vnni_gemm.h"

namespace cbs {

#ifdef CBS_HAVE_BLAS

// Rows of one query block (its scores are kBlockQ x T_k floats per thread). Each block packs
// the head's K and V again inside sgemm, so larger blocks pack less, while a block's scores
// grow with it: 256 rows was best or near it at every length measured (docs/CPU.md).
static constexpr int64_t kBlockQ = 256;

static void amx_attention(ggml_tensor* dst, int ith, int nth);
static void vnni_attention(ggml_tensor* dst, int ith, int nth);

// The userdata of an attention whose products run in int16 (vnni_attention).
static int vnni_attention_tag;

static void blas_attention(ggml_tensor* dst, int ith, int nth, void* amx) {
    if (amx == &vnni_attention_tag) return vnni_attention(dst, ith, nth);
    if (amx) return amx_attention(dst, ith, nth);
    openblas_one_thread();
    const ggml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2];
    const int64_t D = q->ne[0], Tq = q->ne[1], Tk = k->ne[1], H = q->ne[2], B = q->ne[3];
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const int64_t blocks = (Tq + kBlockQ - 1) / kBlockQ, jobs = blocks * H * B;
    thread_local std::vector<float> scores;
    scores.resize(static_cast<size_t>(kBlockQ * Tk));
    float* S = scores.data();
    for (int64_t job = ith; job < jobs; job += nth) {
        const int64_t blk = job % blocks, h = (job / blocks) % H, b = job / (blocks * H);
        const int64_t t0 = blk * kBlockQ, n = std::min(kBlockQ, Tq - t0);
        const float *Q = row_at(q, t0, h, b), *K = row_at(k, 0, h, b), *V = row_at(v, 0, h, b);
        float* O = reinterpret_cast<float*>(static_cast<char*>(dst->data) + h * dst->nb[1] + t0 * dst->nb[2] + b * dst->nb[3]);
        const int ldq = static_cast<int>(q->nb[1] / sizeof(float)), ldk = static_cast<int>(k->nb[1] / sizeof(float));
        const int ldv = static_cast<int>(v->nb[1] / sizeof(float)), ldo = static_cast<int>(dst->nb[2] / sizeof(float));
        // S = scale * Q K^T  [n x Tk]
        scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(Tk),
                          static_cast<int>(D), scale, Q, ldq, K, ldk, 0.0f, S, static_cast<int>(Tk));
        float inv_sum[kBlockQ];
        for (int64_t i = 0; i < n; ++i) inv_sum[i] = 1.0f / exp_shifted_row(S + i * Tk, Tk);
        // O = softmax(S) V  [n x D], normalised after the product (D multiplies a row, not Tk).
        scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(D),
                          static_cast<int>(Tk), 1.0f, S, static_cast<int>(Tk), V, ldv, 0.0f, O, ldo);
        for (int64_t i = 0; i < n; ++i)
            for (int64_t d = 0; d < D; ++d) O[i * ldo + d] *= inv_sum[i];
    }
}

// AMX's query blocks, far smaller than sgemm's: a block's scores then stay in L2 beside the
// head's packed keys and values through the softmax, its split and the second product
// (the smallest block tried was the fastest).
static constexpr int64_t kAmxBlockQ = 32;
// The same on AMX tiles (cpu/amx_gemm.h), a head at a time (its keys and values packed once),
// each head taken by whichever thread is free (the counter, the op's fourth source).
static void amx_attention(ggml_tensor* dst, int, int) {
    const ggml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2];
    auto* next = static_cast<std::atomic<int64_t>*>(dst->src[3]->data);
    const int64_t D = q->ne[0], Tq = q->ne[1], Tk = k->ne[1], H = q->ne[2], B = q->ne[3];
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    thread_local std::vector<float> scores;
    thread_local AmxSplitA qs, ps;
    thread_local AmxPackedB kp, vp;
    scores.resize(static_cast<size_t>(kAmxBlockQ * Tk));
    float* S = scores.data();
    const int64_t ldq = q->nb[1] / sizeof(float), ldk = k->nb[1] / sizeof(float), ldv = v->nb[1] / sizeof(float);
    const int64_t ldo = dst->nb[2] / sizeof(float);
    for (int64_t hb; (hb = next->fetch_add(1)) < H * B;) {
        const int64_t h = hb % H, b = hb / H;
        kp.pack(row_at(k, 0, h, b), ldk, Tk, D);
        vp.pack_transposed(row_at(v, 0, h, b), ldv, D, Tk);
        for (int64_t t0 = 0; t0 < Tq; t0 += kAmxBlockQ) {
            const int64_t n = std::min(kAmxBlockQ, Tq - t0);
            qs.split(row_at(q, t0, h, b), ldq, n, D, scale);
            amx_gemm(qs, kp, S, Tk);  // S = scale Q K^T  [n x Tk]
            float inv_sum[kAmxBlockQ];
            for (int64_t i = 0; i < n; ++i) inv_sum[i] = 1.0f / exp_shifted_row(S + i * Tk, Tk);
            float* O = reinterpret_cast<float*>(static_cast<char*>(dst->data) + h * dst->nb[1] + t0 * dst->nb[2] +
                                                b * dst->nb[3]);
            ps.split(S, Tk, n, Tk);
            amx_gemm(ps, vp, O, ldo);  // O = softmax(S) V  [n x D], normalised after the product
            for (int64_t i = 0; i < n; ++i)
                for (int64_t d = 0; d < D; ++d) O[i * ldo + d] *= inv_sum[i];
        }
    }
}

// The same with both products in int16 on AVX512-VNNI (cpu/vnni_gemm.h, bounded rounding):
// blas_attention's blocks, a contiguous share per thread, a head's keys and values packed once
// by each thread that takes a block of it; the scores' rows padded to whole blocks
// of 32 keys (zero weight).
static void vnni_attention(ggml_tensor* dst, int ith, int nth) {
    const ggml_tensor *q = dst->src[0], *k = dst->src[1], *v = dst->src[2];
    const int64_t D = q->ne[0], Tq = q->ne[1], Tk = k->ne[1], H = q->ne[2], B = q->ne[3];
    const int64_t Tkp = (Tk + 31) / 32 * 32;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const int64_t blocks = (Tq + kBlockQ - 1) / kBlockQ, jobs = blocks * H * B;
    thread_local std::vector<float> scores;
    thread_local I16Rows qs, ps;
    thread_local I16Weight kp, vp;
    scores.resize(static_cast<size_t>(kBlockQ * Tkp));
    float* S = scores.data();
    const int64_t ldq = q->nb[1] / sizeof(float), ldk = k->nb[1] / sizeof(float), ldv = v->nb[1] / sizeof(float);
    const int64_t ldo = dst->nb[2] / sizeof(float);
    const float* packed = nullptr;  // the head whose keys and values kp, vp hold (this call: a graph's data moves)
    // A contiguous range of jobs per thread, so that each packs about H * B / nth heads, not all.
    for (int64_t job = jobs * ith / nth; job < jobs * (ith + 1) / nth; ++job) {
        const int64_t blk = job % blocks, h = (job / blocks) % H, b = job / (blocks * H);
        const int64_t t0 = blk * kBlockQ, n = std::min(kBlockQ, Tq - t0);
        const float *Q = row_at(q, t0, h, b), *K = row_at(k, 0, h, b);
        if (K != packed) {
            kp.pack(K, 1, ldk, Tk, D, D);                   // a row per key
            vp.pack(row_at(v, 0, h, b), ldv, 1, D, Tkp, Tk);   // a row per channel, over the keys
            packed = K;
        }
        qs.own(n, D);
        qs.quantize(Q, ldq, 0, n, true, scale);
        vnni_gemm(qs, kp, S, Tkp);  // S = scale Q K^T  [n x Tk]
        float inv_sum[kBlockQ];
        for (int64_t i = 0; i < n; ++i) {
            inv_sum[i] = 1.0f / exp_shifted_row(S + i * Tkp, Tk);
            std::fill(S + i * Tkp + Tk, S + (i + 1) * Tkp, 0.0f);
        }
        ps.own(n, Tkp);
        ps.quantize(S, Tkp, 0, n, true);
        float* O = reinterpret_cast<float*>(static_cast<char*>(dst->data) + h * dst->nb[1] + t0 * dst->nb[2] + b * dst->nb[3]);
        vnni_gemm(ps, vp, O, ldo);  // O = softmax(S) V  [n x D], normalised after the product
        for (int64_t i = 0; i < n; ++i)
            for (int64_t d = 0; d < D; ++d) O[i * ldo + d] *= inv_sum[i];
    }
}

// Relative-position attention (rel_position_attention): query i's scores with the keys, plus
// those with the p rows its relative positions take, T - 1 - i + j for key j (the rows a
// block of queries reaches: Tk + n - 1 of L), times the scale, softmax, values.
static void rel_scores(float* S, int64_t lds, const float* band, int64_t ldb, int64_t band_row0, int64_t t0,
                       int64_t n, int64_t T, int64_t Tk, float scale, float* inv_sum) {
    for (int64_t r = 0; r < n; ++r) {
        float* s = S + r * lds;
        const float* b = band + r * ldb + (T - 1 - (t0 + r) - band_row0);
        for (int64_t j = 0; j < Tk; ++j) s[j] = (s[j] + b[j]) * scale;
        inv_sum[r] = 1.0f / exp_shifted_row(s, Tk);
    }
}

// src: q_u, q_v [D, T, H], k, v [D, Tk, H], p [D, L, H] (rows contiguous), then on AMX the
// heads' counter. Without AMX: blas_attention's blocks of queries, sgemm.
static void rel_attention_op(ggml_tensor* dst, int ith, int nth, void* amx) {
    const ggml_tensor *qu = dst->src[0], *qv = dst->src[1], *k = dst->src[2], *p = dst->src[3], *v = dst->src[4];
    const int64_t D = qu->ne[0], T = qu->ne[1], H = qu->ne[2], Tk = k->ne[1], L = p->ne[1];
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const int64_t ldu = qu->nb[1] / sizeof(float), ldv_q = qv->nb[1] / sizeof(float), ldk = k->nb[1] / sizeof(float);
    const int64_t ldp = p->nb[1] / sizeof(float), ldv = v->nb[1] / sizeof(float), ldo = dst->nb[2] / sizeof(float);
    auto out_rows = [&](int64_t t0, int64_t h) {
        return reinterpret_cast<float*>(static_cast<char*>(dst->data) + h * dst->nb[1] + t0 * dst->nb[2]);
    };
    thread_local std::vector<float> scores, band;
    if (amx) {
        auto* next = static_cast<std::atomic<int64_t>*>(dst->src[5]->data);
        thread_local AmxSplitA qs, ps;
        thread_local AmxPackedB kp, vp, pp;
        const int64_t ldb = Tk + kAmxBlockQ + 32;  // a block's p rows from the start of their first 16
        scores.resize(static_cast<size_t>(kAmxBlockQ * Tk));
        band.resize(static_cast<size_t>(kAmxBlockQ * ldb));
        for (int64_t h; (h = next->fetch_add(1)) < H;) {
            kp.pack(row_at(k, 0, h, 0), ldk, Tk, D);
            vp.pack_transposed(row_at(v, 0, h, 0), ldv, D, Tk);
            pp.pack(row_at(p, 0, h, 0), ldp, L, D);
            for (int64_t t0 = 0; t0 < T; t0 += kAmxBlockQ) {
                const int64_t n = std::min(kAmxBlockQ, T - t0), first = (T - t0 - n) / 16;  // p's 16-row block
                qs.split(row_at(qu, t0, h, 0), ldu, n, D);
                amx_gemm(qs, kp, scores.data(), Tk);
                qs.split(row_at(qv, t0, h, 0), ldv_q, n, D);
                amx_gemm_blocks(qs, pp, first, (T - 1 - t0 + Tk + 15) / 16, band.data(), ldb);
                float inv_sum[kAmxBlockQ];
                rel_scores(scores.data(), Tk, band.data(), ldb, 16 * first, t0, n, T, Tk, scale, inv_sum);
                float* O = out_rows(t0, h);
                ps.split(scores.data(), Tk, n, Tk);
                amx_gemm(ps, vp, O, ldo);
                for (int64_t i = 0; i < n; ++i)
                    for (int64_t d = 0; d < D; ++d) O[i * ldo + d] *= inv_sum[i];
            }
        }
        return;
    }
    openblas_one_thread();
    const int64_t blocks = (T + kBlockQ - 1) / kBlockQ, ldb = Tk + kBlockQ - 1;
    scores.resize(static_cast<size_t>(kBlockQ * Tk));
    band.resize(static_cast<size_t>(kBlockQ * ldb));
    for (int64_t job = ith; job < blocks * H; job += nth) {
        const int64_t t0 = (job % blocks) * kBlockQ, h = job / blocks, n = std::min(kBlockQ, T - t0);
        const int64_t first = T - t0 - n, rows = Tk + n - 1;  // the p rows the block's queries take
        float* S = scores.data();
        scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(Tk),
                          static_cast<int>(D), 1.0f, row_at(qu, t0, h, 0), static_cast<int>(ldu), row_at(k, 0, h, 0),
                          static_cast<int>(ldk), 0.0f, S, static_cast<int>(Tk));
        scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(n), static_cast<int>(rows),
                          static_cast<int>(D), 1.0f, row_at(qv, t0, h, 0), static_cast<int>(ldv_q),
                          row_at(p, first, h, 0), static_cast<int>(ldp), 0.0f, band.data(), static_cast<int>(ldb));
        float inv_sum[kBlockQ];
        rel_scores(S, Tk, band.data(), ldb, first, t0, n, T, Tk, scale, inv_sum);
        float* O = out_rows(t0, h);
        scipy_cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(n), static_cast<int>(D),
                          static_cast<int>(Tk), 1.0f, S, static_cast<int>(Tk), row_at(v, 0, h, 0),
                          static_cast<int>(ldv), 0.0f, O, static_cast<int>(ldo));
        for (int64_t i = 0; i < n; ++i)
            for (int64_t d = 0; d < D; ++d) O[i * ldo + d] *= inv_sum[i];
    }
}

// A work counter (one cache line) zeroed by a node of its own, for an op that takes it as a
// source and hands its pieces to whichever thread asks next.
static void zero_counter(ggml_tensor* dst, int, int, void*) {
    static_cast<std::atomic<int64_t>*>(dst->data)->store(0);
}
static ggml_tensor* work_counter(ggml_context* ctx) {
    return ggml_custom_4d(ctx, GGML_TYPE_I8, 64, 1, 1, 1, nullptr, 0, zero_counter, 1, nullptr);
}
#endif

ggml_tensor* attention(ggml_context* ctx, ggml_tensor* q, ggml_tensor* k, ggml_tensor* v, CpuProducts how) {
    const bool on_cpu = how.blas();
#ifdef CBS_HAVE_BLAS
    if (on_cpu) {
        void* amx = amx_tag(how);
        const bool vnni = !amx && how.kind == CpuProducts::fast && int16_products_available() && q->ne[0] % 32 == 0;
        ggml_tensor* args[4] = {q, k, v, amx ? work_counter(ctx) : nullptr};
        return ggml_custom_4d(ctx, GGML_TYPE_F32, q->ne[0], q->ne[2], q->ne[1], q->ne[3], args, amx ? 4 : 3,
                              blas_attention, GGML_N_TASKS_MAX, amx ? amx : vnni ? &vnni_attention_tag : nullptr);
    }
#endif
    const float scale = 1.0f / std::sqrt(static_cast<float>(q->ne[0]));
    if (!on_cpu) {
        // A GPU: two products around a softmax, at f32 unless `how` is device_default.
        // ggml-cuda's flash attention rounds K and V to f16, too coarse for an f32 model's CFM
        // mel (docs/GPU.md). The views go to the product as they are (cuBLAS takes the
        // strides; Vulkan copies inside).
        ggml_tensor* scores = matmul(ctx, k, q, how);  // [T_k, T_q, H, B]
        return attend(ctx, scores, v, nullptr, scale, how);
    }
    ggml_tensor* o = ggml_flash_attn_ext(ctx, q, k, v, nullptr, scale, 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(o, GGML_PREC_F32);
    return o;
}

ggml_tensor* rel_position_attention(ggml_context* ctx, ggml_tensor* q_u, ggml_tensor* q_v, ggml_tensor* k,
                                   ggml_tensor* p, ggml_tensor* v, CpuProducts how) {
#ifdef CBS_HAVE_BLAS
    if (how.blas()) {
        void* amx = amx_tag(how);
        ggml_tensor* args[6] = {q_u, q_v, k, p, v, amx ? work_counter(ctx) : nullptr};
        return ggml_custom_4d(ctx, GGML_TYPE_F32, q_u->ne[0], q_u->ne[2], q_u->ne[1], 1, args, amx ? 6 : 5,
                              rel_attention_op, GGML_N_TASKS_MAX, amx);
    }
#endif
    (void)ctx, (void)q_u, (void)q_v, (void)k, (void)p, (void)v;
    return nullptr;
}

}  // namespace cbs
