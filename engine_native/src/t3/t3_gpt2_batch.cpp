// T3Gpt2::step_batch: one decoding step of B generations in one graph.
//
// A step is bound by reading the weights; B sessions stepped together read them once. The
// token and position embeddings, every product (qkv, proj, MLP, head) and the layer norms
// run on x [n_embd, B]; each session's attention runs alone, on its column of qkv, over its
// own cache (its new key and value written at its own n_past), exactly as its solo step
// does (T3Gpt2::attention); the results are joined into [n_embd, B] again for the products.
// What differs from B solo steps is only the products' kernels: a product of B columns may
// round differently from the single-column one (on the CPU the fused kernel of
// t3/decode_step.h takes one column only; on a GPU the matrix-vector kernel).
#include <algorithm>
#include <cmath>
#include <string>

#include "core/backend.h"
#include "core/graph_helpers.h"
#include "t3/decode_step.h"
#include "t3/t3_gpt2.h"

namespace cbs {

namespace {

// Graph nodes a batch of B sessions needs: per layer and session the attention's views,
// cache writes and joins (about 16), per layer the products around them, plus the head.
size_t batch_graph_nodes(int n_layer, size_t B) {
    return std::max<size_t>(16384, static_cast<size_t>(n_layer) * (16 * B + 64) + 256);
}

}  // namespace

std::vector<std::vector<float>> T3Gpt2::step_batch(const std::vector<T3Cache*>& caches,
                                                   const std::vector<int32_t>& tokens) {
    check_batch(caches, tokens, hp_);
    if (caches.empty()) return {};
    if (caches.size() == 1) return {step(*caches[0], tokens[0])};  // the solo graph, replayed
    const size_t B = caches.size();
    std::lock_guard<std::mutex> lock(mutex_);
    // Each session attends to its whole cache, the positions past its new token masked, so
    // the graph is the same from one step to the next while the same caches step together.
    std::vector<int32_t> pos(B);
    std::vector<uint64_t> serials(B);
    std::vector<size_t> first(B);
    size_t n_mask = 0;
    for (size_t b = 0; b < B; ++b) {
        pos[b] = caches[b]->n_past;
        serials[b] = caches[b]->serial();
        first[b] = n_mask;
        n_mask += static_cast<size_t>(caches[b]->size());
    }
    std::vector<ggml_fp16_t> mask(n_mask);
    const ggml_fp16_t zero = ggml_fp32_to_fp16(0.0f), minus_inf = ggml_fp32_to_fp16(-INFINITY);
    for (size_t b = 0; b < B; ++b)
        for (int j = 0; j < caches[b]->size(); ++j) mask[first[b] + j] = j <= pos[b] ? zero : minus_inf;

    if (!batch_runner_ || batch_graph_nodes(hp_.n_layer, B) > batch_nodes_) {
        batch_ = {};
        batch_nodes_ = batch_graph_nodes(hp_.n_layer, B);
        batch_runner_ = std::make_unique<GraphRunner>(backend_, batch_nodes_);
    }
    std::vector<float> out;
    if (batch_.logits && batch_.generation == batch_runner_->generation() && batch_.cache_serials == serials) {
        GraphInputs in;
        in.ints.emplace_back(batch_.tokens, tokens);
        in.ints.emplace_back(batch_.pos, pos);
        in.halves.emplace_back(batch_.mask, std::move(mask));
        out = batch_runner_->rerun(batch_.logits, in);
    } else {
        batch_ = {};
        ggml_context* ctx = batch_runner_->begin();
        ggml_cgraph* gf = batch_runner_->graph();
        GraphInputs in;
        ggml_tensor* token_t = in.ids(ctx, tokens);
        ggml_tensor* pos_t = in.ids(ctx, pos);
        ggml_tensor* mask_t = in.f16_mask(ctx, std::move(mask), static_cast<int64_t>(n_mask), 1);
        ggml_tensor* x = ggml_add(ctx, ggml_get_rows(ctx, speech_emb_, token_t), ggml_get_rows(ctx, wpe_, pos_t));
        const int E = hp_.n_embd;
        for (int il = 0; il < hp_.n_layer; ++il) {
            const Layer& L = layers_[il];
            ggml_tensor* qkv = step_norm_linear(ctx, x, L.ln1_w, L.ln1_b, &hp_.ln_eps, L.attn_w, L.attn_b);  // [3E, B]
            std::vector<ggml_tensor*> att(B);
            for (size_t b = 0; b < B; ++b) {
                T3Cache& cache = *caches[b];
                ggml_tensor* col = ggml_view_2d(ctx, qkv, 3 * E, 1, qkv->nb[1], b * qkv->nb[1]);
                ggml_tensor* row = ggml_view_1d(ctx, pos_t, 1, b * sizeof(int32_t));
                ggml_tensor* m = ggml_view_2d(ctx, mask_t, cache.size(), 1, cache.size() * sizeof(ggml_fp16_t),
                                              first[b] * sizeof(ggml_fp16_t));
                att[b] = attention(ctx, gf, cache, il, col, 1, cache.size(), m, row);
            }
            x = layer_tail(ctx, L, concat_columns(ctx, att), x);
        }
        ggml_tensor* logits = step_norm_linear(ctx, x, ln_f_w_, ln_f_b_, &hp_.ln_eps, head_w_, head_b_);  // [V, B]
        out = batch_runner_->compute(logits, in);
        batch_ = {batch_runner_->generation(), serials, token_t, pos_t, mask_t, logits};
    }
    const size_t V = static_cast<size_t>(hp_.speech_vocab);
    std::vector<std::vector<float>> result(B);
    for (size_t b = 0; b < B; ++b) {
        result[b].assign(out.begin() + b * V, out.begin() + (b + 1) * V);
        caches[b]->n_past += 1;
    }
    return result;
}

}  // namespace cbs
