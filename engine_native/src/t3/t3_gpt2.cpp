#include "t3/t3_gpt2.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/backend.h"
#include "core/graph_helpers.h"
#include "cpu/activations.h"
#include "t3/decode_attention.h"
#include "t3/decode_step.h"

namespace cbs {

T3Gpt2::T3Gpt2(const ModelFile& mf, ggml_backend_t backend)
    : hp_(T3Hparams::from(mf)), backend_(backend), on_cpu_(backend_is_cpu(backend)), runner_(backend) {
    const int64_t E = hp_.n_embd, F = hp_.n_ff;
    auto t = [&](const std::string& name, std::vector<int64_t> ne) { return mf.tensor("t3." + name, ne); };
    text_emb_ = t("text_emb.weight", {E, hp_.text_vocab});
    speech_emb_ = t("speech_emb.weight", {E, hp_.speech_vocab});
    wpe_ = t("wpe.weight", {E, -1});
    if (wpe_->ne[1] < hp_.n_ctx) throw ModelError(mf.path() + ": t3.wpe.weight has fewer positions than chatterbox.t3.n_ctx");
    ln_f_w_ = t("ln_f.weight", {E});
    ln_f_b_ = t("ln_f.bias", {E});
    spkr_w_ = t("cond_enc.spkr_enc.weight", {hp_.speaker_embed_size, E});
    spkr_b_ = t("cond_enc.spkr_enc.bias", {E});
    head_w_ = t("speech_head.weight", {E, hp_.speech_vocab});
    head_b_ = t("speech_head.bias", {hp_.speech_vocab});
    for (int il = 0; il < hp_.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        layers_.push_back({t(p + "ln_1.weight", {E}), t(p + "ln_1.bias", {E}), t(p + "attn.c_attn.weight", {E, 3 * E}),
                           t(p + "attn.c_attn.bias", {3 * E}), t(p + "attn.c_proj.weight", {E, E}),
                           t(p + "attn.c_proj.bias", {E}), t(p + "ln_2.weight", {E}), t(p + "ln_2.bias", {E}),
                           t(p + "mlp.c_fc.weight", {E, F}), t(p + "mlp.c_fc.bias", {F}),
                           t(p + "mlp.c_proj.weight", {F, E}), t(p + "mlp.c_proj.bias", {E})});
    }
    cache_type_ = layers_[0].attn_w->type == GGML_TYPE_F32 ? GGML_TYPE_F32 : GGML_TYPE_F16;
}

std::unique_ptr<T3Cache> T3Gpt2::new_cache() const { return std::make_unique<T3Cache>(hp_, backend_, cache_type_); }

// GPT-2 blocks over x [n_embd, n_new] at positions cache.n_past .. cache.n_past + n_new - 1,
// attending to the first n_kv cache positions through `mask` (positions past the new
// ones are masked out: a step attends to a padded n_kv so its graph stays the same from
// one token to the next, and the device can replay it).
ggml_tensor* T3Gpt2::transformer(ggml_context* ctx, ggml_cgraph* gf, T3Cache& cache, ggml_tensor* x, int n_new,
                                  int n_kv, ggml_tensor* mask, ggml_tensor* kv_rows) {
    const float* eps = &hp_.ln_eps;
    for (int il = 0; il < hp_.n_layer; ++il) {
        const Layer& L = layers_[il];
        // A step's layer norms, biases and residual adds ride in its products (t3/decode_step.h).
        ggml_tensor* qkv = step_norm_linear(ctx, x, L.ln1_w, L.ln1_b, eps, L.attn_w, L.attn_b);  // [3E, n_new]
        x = layer_tail(ctx, L, attention(ctx, gf, cache, il, qkv, n_new, n_kv, mask, kv_rows), x);
    }
    return x;
}

ggml_tensor* T3Gpt2::attention(ggml_context* ctx, ggml_cgraph* gf, T3Cache& cache, int il, ggml_tensor* qkv, int n_new,
                               int n_kv, ggml_tensor* mask, ggml_tensor* kv_rows) {
    const int E = hp_.n_embd, H = hp_.n_head, D = hp_.head_dim();
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    ggml_tensor* q = ggml_view_3d(ctx, qkv, D, H, n_new, D * sizeof(float), qkv->nb[1], 0);
    ggml_tensor* k = ggml_view_3d(ctx, qkv, D, H, n_new, D * sizeof(float), qkv->nb[1], E * sizeof(float));
    ggml_tensor* v = ggml_view_3d(ctx, qkv, D, H, n_new, D * sizeof(float), qkv->nb[1], 2 * E * sizeof(float));

    // This call's keys and values go to the rows `kv_rows` (positions n_past ..): the
    // cache is [D, n_cache, H] per layer, so the first n_kv positions of every head are a
    // strided view the attention reads.
    auto cache_view = [&](ggml_tensor* cache, int first, int n) {
        return ggml_view_3d(ctx, cache, D, n, H, cache->nb[1], cache->nb[2], first * cache->nb[1]);
    };
    ggml_tensor *k_all = cache_view(cache.k(il), 0, n_kv), *v_all = cache_view(cache.v(il), 0, n_kv);
    const bool own_attention = decode_attention_applies(cache.k(il), n_new, on_cpu_);
    ggml_tensor* att;
    if (own_attention && n_new == 1 && step_fusion_enabled()) {
        att = decode_attention(ctx, q, k_all, v_all, mask, k, v, kv_rows);  // writes the new row itself
    } else {
        // set_rows reads strided rows: the views into qkv go in as they are (no copies).
        ggml_tensor* k_new = ggml_permute(ctx, k, 0, 2, 1, 3);  // [D, n_new, H]
        ggml_tensor* v_new = ggml_permute(ctx, v, 0, 2, 1, 3);
        ggml_build_forward_expand(gf, ggml_set_rows(ctx, cache.k(il), k_new, kv_rows));
        ggml_build_forward_expand(gf, ggml_set_rows(ctx, cache.v(il), v_new, kv_rows));
        if (own_attention) {
            att = decode_attention(ctx, q, k_all, v_all, mask);
        } else {
            ggml_tensor* Q = ggml_permute(ctx, q, 0, 2, 1, 3);  // [D, n_new, H]
            att = ggml_flash_attn_ext(ctx, Q, k_all, v_all, mask, scale, 0.0f, 0.0f);
            ggml_flash_attn_ext_set_prec(att, GGML_PREC_F32);
        }
    }
    return ggml_reshape_2d(ctx, att, E, n_new);  // result is [D, H, n_new]
}

ggml_tensor* T3Gpt2::layer_tail(ggml_context* ctx, const Layer& L, ggml_tensor* att, ggml_tensor* x) {
    x = step_linear_residual(ctx, att, L.proj_w, L.proj_b, x);
    ggml_tensor* h = step_norm_linear(ctx, x, L.ln2_w, L.ln2_b, &hp_.ln_eps, L.fc_w, L.fc_b);
    return step_linear_residual(ctx, gelu_tanh(ctx, h, on_cpu_), L.fc_proj_w, L.fc_proj_b, x);
}

// Keys and values of [speaker, prompt speech] at positions 0 .. n_cond - 1.
void T3Gpt2::run_prefix(T3Cache& cache, const T3Conditioning& cond) {
    const int n_cond = 1 + static_cast<int>(cond.prompt_tokens.size());
    cache.n_past = 0;
    cache.clear_prefix();
    ggml_context* ctx = runner_.begin();
    ggml_cgraph* gf = runner_.graph();
    GraphInputs in;
    ggml_tensor* spk = linear(ctx, in.f32(ctx, cond.speaker_emb, hp_.speaker_embed_size), spkr_w_, spkr_b_);  // [E, 1]
    ggml_tensor* x = ggml_reshape_2d(ctx, spk, hp_.n_embd, 1);
    if (!cond.prompt_tokens.empty()) x = ggml_concat(ctx, x, ggml_get_rows(ctx, speech_emb_, in.ids(ctx, cond.prompt_tokens)), 1);
    std::vector<int32_t> pos(n_cond);
    for (int i = 0; i < n_cond; ++i) pos[i] = i;
    ggml_tensor* rows = in.ids(ctx, pos);
    x = ggml_add(ctx, x, ggml_get_rows(ctx, wpe_, rows));
    x = transformer(ctx, gf, cache, x, n_cond, n_cond, causal_mask(ctx, in, n_cond, n_cond), rows);
    runner_.compute(ggml_view_1d(ctx, x, 1, 0), in);  // the graph's point is the cache writes
    cache.set_prefix(cond, n_cond);
}

std::vector<float> T3Gpt2::prompt(T3Cache& cache, const T3Conditioning& cond, const std::vector<int32_t>& text,
                                  const std::vector<int32_t>& speech, int n_out, int reserve_tokens) {
    if (static_cast<int>(cond.speaker_emb.size()) != hp_.speaker_embed_size)
        throw VoiceError("speaker embedding has " + std::to_string(cond.speaker_emb.size()) + " values; T3 expects " +
                         std::to_string(hp_.speaker_embed_size));
    check_token_ids(cond.prompt_tokens, hp_.speech_vocab, "prompt speech");
    check_token_ids(text, hp_.text_vocab, "text");
    check_token_ids(speech, hp_.speech_vocab, "speech");
    const int n_tok = 1 + static_cast<int>(cond.prompt_tokens.size() + text.size() + speech.size());
    if (n_out < 1 || n_out > static_cast<int>(speech.size())) throw EngineError("n_out must be within the speech tokens");
    std::lock_guard<std::mutex> lock(mutex_);
    cache.reserve(n_tok + std::max(0, reserve_tokens));
    const int n_cond = 1 + static_cast<int>(cond.prompt_tokens.size());
    if (!cache.holds_prefix(cond)) run_prefix(cache, cond);

    // [text, speech] at positions n_cond .. n_tok - 1, attending to the cached prefix.
    cache.n_past = n_cond;
    const int n_new = n_tok - n_cond;
    ggml_context* ctx = runner_.begin();
    ggml_cgraph* gf = runner_.graph();
    GraphInputs in;
    ggml_tensor* x = ggml_get_rows(ctx, speech_emb_, in.ids(ctx, speech));
    if (!text.empty()) x = ggml_concat(ctx, ggml_get_rows(ctx, text_emb_, in.ids(ctx, text)), x, 1);
    std::vector<int32_t> pos(n_new);
    for (int i = 0; i < n_new; ++i) pos[i] = n_cond + i;
    ggml_tensor* rows = in.ids(ctx, pos);
    x = ggml_add(ctx, x, ggml_get_rows(ctx, wpe_, rows));
    x = transformer(ctx, gf, cache, x, n_new, n_tok, causal_mask(ctx, in, n_tok, n_new), rows);
    x = ggml_view_2d(ctx, x, hp_.n_embd, n_out, x->nb[1], (n_new - n_out) * x->nb[1]);
    ggml_tensor* logits = step_norm_linear(ctx, x, ln_f_w_, ln_f_b_, &hp_.ln_eps, head_w_, head_b_);
    std::vector<float> out = runner_.compute(logits, in);
    cache.n_past = n_tok;
    return out;
}

std::vector<float> T3Gpt2::step(T3Cache& cache, int32_t speech_token) {
    check_token_ids({speech_token}, hp_.speech_vocab, "speech");
    std::lock_guard<std::mutex> lock(mutex_);
    if (cache.n_past == 0) throw EngineError("T3 step() before prompt()");
    if (cache.n_past + 1 > cache.size())
        throw EngineError("T3 context is full (" + std::to_string(cache.size()) + " positions)");
    // The new token sees every cached one and itself; the view it reads is padded to
    // kStepKvPad positions (masked) so the graph is the same for that many tokens.
    const int n_kv = cache.step_view(kStepKvPad);
    std::vector<ggml_fp16_t> mask = cache.step_mask(n_kv);
    std::vector<float> out;
    if (step_.logits && step_.generation == runner_.generation() && step_.cache_serial == cache.serial() &&
        step_.n_kv == n_kv) {
        GraphInputs in;
        in.ints.emplace_back(step_.token, std::vector<int32_t>{speech_token});
        in.ints.emplace_back(step_.pos, std::vector<int32_t>{cache.n_past});
        in.halves.emplace_back(step_.mask, std::move(mask));
        out = runner_.rerun(step_.logits, in);
    } else {
        step_ = {};
        ggml_context* ctx = runner_.begin();
        ggml_cgraph* gf = runner_.graph();
        GraphInputs in;
        ggml_tensor* token = in.ids(ctx, {speech_token});
        ggml_tensor* x = ggml_get_rows(ctx, speech_emb_, token);
        ggml_tensor* pos = in.ids(ctx, {cache.n_past});
        x = ggml_add(ctx, x, ggml_get_rows(ctx, wpe_, pos));
        ggml_tensor* mask_t = in.f16_mask(ctx, std::move(mask), n_kv, 1);
        x = transformer(ctx, gf, cache, x, 1, n_kv, mask_t, pos);
        ggml_tensor* logits = step_norm_linear(ctx, x, ln_f_w_, ln_f_b_, &hp_.ln_eps, head_w_, head_b_);
        out = runner_.compute(logits, in);
        step_ = {runner_.generation(), cache.serial(), n_kv, token, pos, mask_t, logits};
    }
    cache.n_past += 1;
    return out;
}

}  // namespace cbs
