// T3Llama::step_batch: one decoding step of B Multilingual generations in one graph.
//
// Each session brings its rows (1, or 2 with guidance: conditional and unconditional) as
// columns of x [n_embd, sum of rows]; the RMSNorms, every product (q, k, v, o, gate, up,
// down, head) and RoPE (each column at its own session's position) run over all columns at
// once. Each session's attention runs alone over its own two-row cache, as its solo step()
// does (the same padded, masked view), and its alignment heads (row 0) are left in its cache
// for its analyzer. What differs from B solo steps is only the products' kernels over more
// columns (rounding; on a GPU an f32 weight's products run in groups of
// kGpuF32VectorColumns, each column as in a solo step: below), as in t3_gpt2_batch.cpp.
#include <algorithm>
#include <cmath>
#include <string>

#include "core/backend.h"
#include "core/graph_helpers.h"
#include "cpu/products.h"
#include "t3/t3_llama.h"

namespace cbs {

std::vector<std::vector<float>> T3Llama::step_batch(const std::vector<T3Cache*>& caches,
                                                    const std::vector<int32_t>& tokens) {
    check_batch(caches, tokens, hp_);
    if (caches.empty()) return {};
    if (caches.size() == 1) return {step(*caches[0], tokens[0])};
    const size_t B = caches.size();
    for (const T3Cache* c : caches)
        if (c->n_speech >= speech_pos_len_)
            throw EngineError("T3's speech position table is full (" + std::to_string(speech_pos_len_) + " tokens)");
    const int E = hp_.n_embd, H = hp_.n_head, D = hp_.head_dim();
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    std::lock_guard<std::mutex> lock(mutex_);
    // Session b's rows are columns first[b] .. first[b] + rows of x.
    std::vector<int> first(B);
    int cols = 0;
    for (size_t b = 0; b < B; ++b) {
        first[b] = cols;
        cols += caches[b]->n_rows;
    }
    const size_t nodes = std::max<size_t>(16384, static_cast<size_t>(hp_.n_layer) * (24 * B + 64) + 256);
    if (!batch_runner_ || nodes > batch_nodes_) {
        batch_nodes_ = nodes;
        batch_runner_ = std::make_unique<GraphRunner>(backend_, batch_nodes_);
    }
    ggml_context* ctx = batch_runner_->begin();
    ggml_cgraph* gf = batch_runner_->graph();
    GraphInputs in;

    // Inputs: each column's speech token and learned speech position; RoPE's cos / sin at
    // its session's KV position.
    std::vector<int32_t> ids(cols), spos(cols);
    std::vector<float> cos, sin, session_cos, session_sin;
    for (size_t b = 0; b < B; ++b) {
        rope_tables(caches[b]->n_past, 1, session_cos, session_sin);
        for (int r = 0; r < caches[b]->n_rows; ++r) {
            const int c = first[b] + r;
            ids[c] = tokens[b];
            spos[c] = caches[b]->n_speech;
            cos.insert(cos.end(), session_cos.begin(), session_cos.end());
            sin.insert(sin.end(), session_sin.begin(), session_sin.end());
        }
    }
    ggml_tensor* x = ggml_add(ctx, ggml_get_rows(ctx, speech_emb_, in.ids(ctx, ids)),
                              ggml_get_rows(ctx, speech_pos_, in.ids(ctx, spos)));
    ggml_tensor* rc = ggml_reshape_4d(ctx, in.f32(ctx, std::move(cos), D, cols), D, 1, cols, 1);
    ggml_tensor* rs = ggml_reshape_4d(ctx, in.f32(ctx, std::move(sin), D, cols), D, 1, cols, 1);

    // Each session's attention mask over its padded view (as step() reads it).
    std::vector<ggml_tensor*> masks(B), kv_rows(B);
    std::vector<int> n_kvs(B);
    for (size_t b = 0; b < B; ++b) {
        const T3Cache& cache = *caches[b];
        n_kvs[b] = cache.step_view(kStepKvPad);
        masks[b] = in.f16_mask(ctx, cache.step_mask(n_kvs[b]), n_kvs[b], 1);
        kv_rows[b] = in.ids(ctx, {cache.n_past});
    }
    const bool grouped = !backend_is_cpu(backend_);
    auto product = [&](ggml_tensor* w, ggml_tensor* a) -> ggml_tensor* {
        const int64_t n = a->ne[1];
        if (!grouped || w->type != GGML_TYPE_F32 || n <= kGpuF32VectorColumns) return mul_mat_weight(ctx, w, a);
        const int64_t groups = (n + kGpuF32VectorColumns - 1) / kGpuF32VectorColumns;
        ggml_tensor* padded = ggml_pad(ctx, a, 0, static_cast<int>(groups * kGpuF32VectorColumns - n), 0, 0);
        ggml_tensor* y = mul_mat_weight(ctx, w, ggml_reshape_3d(ctx, padded, a->ne[0], kGpuF32VectorColumns, groups));
        return ggml_view_2d(ctx, y, w->ne[1], n, y->nb[1], 0);  // [M, 3 x groups] -> the first n columns
    };
    std::vector<std::vector<ggml_tensor*>> taps(B, std::vector<ggml_tensor*>(align_.size()));
    for (int il = 0; il < hp_.n_layer; ++il) {
        const Layer& L = layers_[il];
        ggml_tensor* h = ggml_mul(ctx, ggml_rms_norm(ctx, x, hp_.ln_eps), L.attn_norm);
        ggml_tensor *q, *k, *v;  // [D, H, cols, 1]
        attention_inputs(ctx, L, h, cols, 1, rc, rs, product, true, &q, &k, &v);
        std::vector<ggml_tensor*> att(B);
        for (size_t b = 0; b < B; ++b) {
            T3Cache& cache = *caches[b];
            const int rows = cache.n_rows, n_kv = n_kvs[b];
            // This session's columns as [D, H, 1, rows], then [D, 1, H, rows] for the cache.
            auto mine = [&](ggml_tensor* t) {
                return ggml_view_4d(ctx, t, D, H, 1, rows, t->nb[1], t->nb[2], t->nb[2], first[b] * t->nb[2]);
            };
            ggml_tensor* a = step_attention(ctx, gf, cache, il, mine(q), mine(k), mine(v), kv_rows[b], n_kv, rows, masks[b]);
            att[b] = ggml_reshape_2d(ctx, a, E, rows);
            // Row 0's alignment heads over the text (the eager attention the analyzer reads).
            for (size_t ah = 0; ah < align_.size(); ++ah) {
                if (align_[ah].layer != il) continue;
                const int hd = align_[ah].head;
                ggml_tensor* qh = ggml_view_2d(ctx, q, D, 1, q->nb[2], hd * q->nb[1] + first[b] * q->nb[2]);
                ggml_tensor* kh = ggml_view_2d(ctx, cache.k(il), D, n_kv, cache.k(il)->nb[1], hd * cache.k(il)->nb[2]);
                ggml_tensor* p = ggml_soft_max_ext(ctx, ggml_mul_mat(ctx, kh, qh), masks[b], scale, 0.0f);
                p = ggml_view_2d(ctx, p, cache.align_cols, 1, p->nb[1], cache.align_col0 * p->nb[0]);
                taps[b][ah] = ggml_cont(ctx, p);
            }
        }
        x = ggml_add(ctx, x, product(L.wo, concat_columns(ctx, att)));
        h = ggml_mul(ctx, ggml_rms_norm(ctx, x, hp_.ln_eps), L.ffn_norm);
        h = ffn_hidden(ctx, L, h, product, true);
        x = ggml_add(ctx, x, product(L.down, h));
    }
    ggml_tensor* logits = product(head_w_, ggml_mul(ctx, ggml_rms_norm(ctx, x, hp_.ln_eps), norm_));
    std::vector<ggml_tensor*> outs{logits};
    for (size_t b = 0; b < B; ++b) outs.insert(outs.end(), taps[b].begin(), taps[b].end());
    std::vector<std::vector<float>> r = batch_runner_->compute(outs, in);

    const size_t V = static_cast<size_t>(hp_.speech_vocab), n_align = align_.size();
    std::vector<std::vector<float>> result(B);
    for (size_t b = 0; b < B; ++b) {
        T3Cache& cache = *caches[b];
        result[b].assign(r[0].begin() + first[b] * V, r[0].begin() + (first[b] + cache.n_rows) * V);
        cache.align.clear();
        for (size_t ah = 0; ah < n_align; ++ah) {
            const std::vector<float>& t = r[1 + b * n_align + ah];
            cache.align.insert(cache.align.end(), t.begin(), t.end());
        }
        cache.align_rows = 1;
        cache.n_past += 1;
        cache.n_speech += 1;
    }
    return result;
}

}  // namespace cbs
