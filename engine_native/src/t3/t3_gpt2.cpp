#include "t3/t3_gpt2.h"

#include <cmath>
#include <string>

#include "ggml-cpu.h"

namespace cbs {

T3Hparams T3Hparams::from(const ModelFile& mf) {
    auto i = [&](const char* k) { return static_cast<int>(mf.get_int(std::string("chatterbox.t3.") + k)); };
    T3Hparams hp;
    hp.n_layer = i("n_layer");
    hp.n_embd = i("n_embd");
    hp.n_head = i("n_head");
    hp.n_ff = i("n_ff");
    hp.n_ctx = i("n_ctx");
    hp.text_vocab = i("text_vocab");
    hp.speech_vocab = i("speech_vocab");
    hp.speaker_embed_size = i("speaker_embed_size");
    hp.start_speech_token = i("start_speech_token");
    hp.stop_speech_token = i("stop_speech_token");
    hp.ln_eps = static_cast<float>(mf.get_float("chatterbox.t3.ln_eps"));
    if (hp.n_layer <= 0 || hp.n_head <= 0 || hp.n_embd % hp.n_head != 0)
        throw EngineError(mf.path() + ": inconsistent T3 dimensions");
    return hp;
}

// [n, n] causal mask for a prompt from an empty cache: 0 on and below the diagonal.
static ggml_tensor* causal_mask(ggml_context* ctx, GraphInputs& in, int n) {
    std::vector<ggml_fp16_t> m(static_cast<size_t>(n) * n);
    for (int i = 0; i < n; ++i)
        for (int j = 0; j < n; ++j) m[static_cast<size_t>(i) * n + j] = ggml_fp32_to_fp16(j <= i ? 0.0f : -INFINITY);
    return in.f16_mask(ctx, std::move(m), n, n);
}

T3Gpt2::T3Gpt2(const ModelFile& mf, ggml_backend_t backend)
    : hp_(T3Hparams::from(mf)), backend_(backend), runner_(backend) {
    auto t = [&](const std::string& name) { return mf.tensor("t3." + name); };
    text_emb_ = t("text_emb.weight");
    speech_emb_ = t("speech_emb.weight");
    wpe_ = t("wpe.weight");
    ln_f_w_ = t("ln_f.weight");
    ln_f_b_ = t("ln_f.bias");
    spkr_w_ = t("cond_enc.spkr_enc.weight");
    spkr_b_ = t("cond_enc.spkr_enc.bias");
    head_w_ = t("speech_head.weight");
    head_b_ = t("speech_head.bias");
    for (int il = 0; il < hp_.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        layers_.push_back({t(p + "ln_1.weight"), t(p + "ln_1.bias"), t(p + "attn.c_attn.weight"), t(p + "attn.c_attn.bias"),
                           t(p + "attn.c_proj.weight"), t(p + "attn.c_proj.bias"), t(p + "ln_2.weight"), t(p + "ln_2.bias"),
                           t(p + "mlp.c_fc.weight"), t(p + "mlp.c_fc.bias"), t(p + "mlp.c_proj.weight"), t(p + "mlp.c_proj.bias")});
    }
    if (text_emb_->ne[0] != hp_.n_embd || speech_emb_->ne[1] != hp_.speech_vocab || head_w_->ne[1] != hp_.speech_vocab)
        throw EngineError(mf.path() + ": T3 tensor shapes disagree with its metadata");
    // F32 weights keep an F32 cache (exact parity); reduced-precision models use F16.
    cache_type_ = layers_[0].attn_w->type == GGML_TYPE_F32 ? GGML_TYPE_F32 : GGML_TYPE_F16;
}

T3Gpt2::~T3Gpt2() {
    if (cache_buf_) ggml_backend_buffer_free(cache_buf_);
    if (cache_ctx_) ggml_free(cache_ctx_);
}

void T3Gpt2::reserve_cache(int n_tokens) {
    if (n_tokens > hp_.n_ctx)
        throw EngineError("T3 context is " + std::to_string(hp_.n_ctx) + " positions; this request needs " +
                          std::to_string(n_tokens) + " (shorten the text)");
    if (n_tokens <= n_cache_) return;
    // A bigger cache keeps the voice's prefix: its rows move over (per layer and head,
    // the first n_prefix_ positions), so growing never costs a new prefix pass.
    const int n_keep = n_prefix_;
    std::vector<std::vector<uint8_t>> kept;
    for (size_t i = 0; n_keep > 0 && i < k_cache_.size(); ++i)
        for (ggml_tensor* t : {k_cache_[i], v_cache_[i]})
            for (int64_t h = 0; h < t->ne[2]; ++h) {
                kept.emplace_back(n_keep * t->nb[1]);
                ggml_backend_tensor_get(t, kept.back().data(), h * t->nb[2], kept.back().size());
            }
    if (cache_buf_) ggml_backend_buffer_free(cache_buf_);
    if (cache_ctx_) ggml_free(cache_ctx_);
    ggml_init_params params{ggml_tensor_overhead() * (2 * hp_.n_layer + 1), nullptr, true};
    cache_ctx_ = ggml_init(params);
    k_cache_.clear();
    v_cache_.clear();
    for (int il = 0; il < hp_.n_layer; ++il) {
        const int D = hp_.n_embd / hp_.n_head;
        k_cache_.push_back(ggml_new_tensor_3d(cache_ctx_, cache_type_, D, n_tokens, hp_.n_head));
        v_cache_.push_back(ggml_new_tensor_3d(cache_ctx_, cache_type_, D, n_tokens, hp_.n_head));
    }
    n_prefix_ = 0;
    cache_buf_ = ggml_backend_alloc_ctx_tensors(cache_ctx_, backend_);
    if (!cache_buf_) throw EngineError("not enough memory for the T3 KV cache");
    n_cache_ = n_tokens;
    size_t next = 0;
    for (size_t i = 0; n_keep > 0 && i < k_cache_.size(); ++i)
        for (ggml_tensor* t : {k_cache_[i], v_cache_[i]})
            for (int64_t h = 0; h < t->ne[2]; ++h, ++next)
                ggml_backend_tensor_set(t, kept[next].data(), h * t->nb[2], kept[next].size());
    n_prefix_ = n_keep;
}

// GPT-2 blocks over x [n_embd, n_new] at positions n_past_ .. n_past_ + n_new - 1.
ggml_tensor* T3Gpt2::transformer(ggml_context* ctx, ggml_cgraph* gf, ggml_tensor* x, int n_new, ggml_tensor* mask) {
    const int E = hp_.n_embd, H = hp_.n_head, D = E / H;
    const int n_kv = n_past_ + n_new;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    for (int il = 0; il < hp_.n_layer; ++il) {
        const Layer& L = layers_[il];
        ggml_tensor* h = layer_norm(ctx, x, L.ln1_w, L.ln1_b, hp_.ln_eps);
        ggml_tensor* qkv = linear(ctx, h, L.attn_w, L.attn_b);  // [3E, n_new]
        ggml_tensor* q = ggml_view_3d(ctx, qkv, D, H, n_new, D * sizeof(float), qkv->nb[1], 0);
        ggml_tensor* k = ggml_view_2d(ctx, qkv, E, n_new, qkv->nb[1], E * sizeof(float));
        ggml_tensor* v = ggml_view_2d(ctx, qkv, E, n_new, qkv->nb[1], 2 * E * sizeof(float));

        // Append this call's keys and values: the cache is [D, n_cache, H] per layer, so
        // the first n_kv positions of every head are a strided view flash attention reads.
        auto cache_view = [&](ggml_tensor* cache, int first, int n) {
            return ggml_view_3d(ctx, cache, D, n, H, cache->nb[1], cache->nb[2], first * cache->nb[1]);
        };
        ggml_tensor* k_new = ggml_permute(ctx, ggml_reshape_3d(ctx, ggml_cont(ctx, k), D, H, n_new), 0, 2, 1, 3);
        ggml_tensor* v_new = ggml_permute(ctx, ggml_reshape_3d(ctx, ggml_cont(ctx, v), D, H, n_new), 0, 2, 1, 3);
        ggml_build_forward_expand(gf, ggml_cpy(ctx, k_new, cache_view(k_cache_[il], n_past_, n_new)));
        ggml_build_forward_expand(gf, ggml_cpy(ctx, v_new, cache_view(v_cache_[il], n_past_, n_new)));

        ggml_tensor* Q = ggml_permute(ctx, q, 0, 2, 1, 3);  // [D, n_new, H]
        ggml_tensor* att = ggml_flash_attn_ext(ctx, Q, cache_view(k_cache_[il], 0, n_kv), cache_view(v_cache_[il], 0, n_kv),
                                               mask, scale, 0.0f, 0.0f);
        ggml_flash_attn_ext_set_prec(att, GGML_PREC_F32);
        att = ggml_reshape_2d(ctx, att, E, n_new);  // result is [D, H, n_new]
        x = ggml_add(ctx, x, linear(ctx, att, L.proj_w, L.proj_b));

        h = layer_norm(ctx, x, L.ln2_w, L.ln2_b, hp_.ln_eps);
        h = ggml_gelu(ctx, linear(ctx, h, L.fc_w, L.fc_b));
        x = ggml_add(ctx, x, linear(ctx, h, L.fc_proj_w, L.fc_proj_b));
    }
    return x;
}

static void check_ids(const std::vector<int32_t>& ids, int vocab, const char* what) {
    for (int32_t id : ids)
        if (id < 0 || id >= vocab)
            throw EngineError(std::string(what) + " token id " + std::to_string(id) + " is outside [0, " + std::to_string(vocab) + ")");
}

// Keys and values of [speaker, prompt speech] at positions 0 .. n_cond - 1.
void T3Gpt2::run_prefix(const T3Conditioning& cond) {
    const int n_cond = 1 + static_cast<int>(cond.prompt_tokens.size());
    n_past_ = 0;
    n_prefix_ = 0;
    ggml_context* ctx = runner_.begin();
    ggml_cgraph* gf = runner_.graph();
    GraphInputs in;
    ggml_tensor* spk = linear(ctx, in.f32(ctx, cond.speaker_emb, hp_.speaker_embed_size), spkr_w_, spkr_b_);  // [E, 1]
    ggml_tensor* x = ggml_reshape_2d(ctx, spk, hp_.n_embd, 1);
    if (!cond.prompt_tokens.empty()) x = ggml_concat(ctx, x, ggml_get_rows(ctx, speech_emb_, in.ids(ctx, cond.prompt_tokens)), 1);
    std::vector<int32_t> pos(n_cond);
    for (int i = 0; i < n_cond; ++i) pos[i] = i;
    x = ggml_add(ctx, x, ggml_get_rows(ctx, wpe_, in.ids(ctx, pos)));
    x = transformer(ctx, gf, x, n_cond, causal_mask(ctx, in, n_cond));
    runner_.compute(ggml_view_1d(ctx, x, 1, 0), in);  // the graph's point is the cache writes
    prefix_cond_ = cond;
    n_prefix_ = n_cond;
}

std::vector<float> T3Gpt2::prompt(const T3Conditioning& cond, const std::vector<int32_t>& text,
                                  const std::vector<int32_t>& speech, int n_out, int reserve_tokens) {
    if (static_cast<int>(cond.speaker_emb.size()) != hp_.speaker_embed_size)
        throw EngineError("speaker embedding has " + std::to_string(cond.speaker_emb.size()) + " values; T3 expects " +
                          std::to_string(hp_.speaker_embed_size));
    check_ids(cond.prompt_tokens, hp_.speech_vocab, "prompt speech");
    check_ids(text, hp_.text_vocab, "text");
    check_ids(speech, hp_.speech_vocab, "speech");
    const int n_tok = 1 + static_cast<int>(cond.prompt_tokens.size() + text.size() + speech.size());
    if (n_out < 1 || n_out > static_cast<int>(speech.size())) throw EngineError("n_out must be within the speech tokens");
    reserve_cache(n_tok + std::max(0, reserve_tokens));
    const int n_cond = 1 + static_cast<int>(cond.prompt_tokens.size());
    if (n_prefix_ != n_cond || prefix_cond_.prompt_tokens != cond.prompt_tokens ||
        prefix_cond_.speaker_emb != cond.speaker_emb)
        run_prefix(cond);

    // [text, speech] at positions n_cond .. n_tok - 1, attending to the cached prefix.
    n_past_ = n_cond;
    const int n_new = n_tok - n_cond;
    ggml_context* ctx = runner_.begin();
    ggml_cgraph* gf = runner_.graph();
    GraphInputs in;
    ggml_tensor* x = ggml_get_rows(ctx, speech_emb_, in.ids(ctx, speech));
    if (!text.empty()) x = ggml_concat(ctx, ggml_get_rows(ctx, text_emb_, in.ids(ctx, text)), x, 1);
    std::vector<int32_t> pos(n_new);
    for (int i = 0; i < n_new; ++i) pos[i] = n_cond + i;
    x = ggml_add(ctx, x, ggml_get_rows(ctx, wpe_, in.ids(ctx, pos)));
    std::vector<ggml_fp16_t> mask(static_cast<size_t>(n_tok) * n_new);
    for (int i = 0; i < n_new; ++i)
        for (int j = 0; j < n_tok; ++j)
            mask[static_cast<size_t>(i) * n_tok + j] = ggml_fp32_to_fp16(j <= n_cond + i ? 0.0f : -INFINITY);
    x = transformer(ctx, gf, x, n_new, in.f16_mask(ctx, std::move(mask), n_tok, n_new));
    x = ggml_view_2d(ctx, x, hp_.n_embd, n_out, x->nb[1], (n_new - n_out) * x->nb[1]);
    x = layer_norm(ctx, x, ln_f_w_, ln_f_b_, hp_.ln_eps);
    ggml_tensor* logits = linear(ctx, x, head_w_, head_b_);
    std::vector<float> out = runner_.compute(logits, in);
    n_past_ = n_tok;
    return out;
}

std::vector<float> T3Gpt2::step(int32_t speech_token) {
    check_ids({speech_token}, hp_.speech_vocab, "speech");
    if (n_past_ == 0) throw EngineError("T3 step() before prompt()");
    if (n_past_ + 1 > n_cache_)
        throw EngineError("T3 context is full (" + std::to_string(n_cache_) + " positions)");
    ggml_context* ctx = runner_.begin();
    ggml_cgraph* gf = runner_.graph();
    GraphInputs in;
    ggml_tensor* x = ggml_get_rows(ctx, speech_emb_, in.ids(ctx, {speech_token}));
    x = ggml_add(ctx, x, ggml_get_rows(ctx, wpe_, in.ids(ctx, {n_past_})));
    x = transformer(ctx, gf, x, 1, nullptr);  // one new token sees every cached one
    x = layer_norm(ctx, x, ln_f_w_, ln_f_b_, hp_.ln_eps);
    ggml_tensor* logits = linear(ctx, x, head_w_, head_b_);
    std::vector<float> out = runner_.compute(logits, in);
    n_past_ += 1;
    return out;
}

}  // namespace cbs

namespace cbs {

SpeechTokenStream::SpeechTokenStream(T3Gpt2& t3, const T3Conditioning& cond, const std::vector<int32_t>& text,
                                     const SamplingParams& params, int max_tokens, uint64_t seed)
    : t3_(t3), params_(params), max_tokens_(max_tokens), sampler_(seed) {
    params_.validate();
    if (max_tokens < 1) throw EngineError("max_tokens must be at least 1");
    const int start = t3.hp().start_speech_token;
    logits_ = t3.prompt(cond, text, {start}, 1, max_tokens);
    process_logits(logits_, {start}, params_);  // the reference's first input_ids are the start token
}

std::vector<int32_t> SpeechTokenStream::next(int n) {
    std::vector<int32_t> out;
    const int stop = t3_.hp().stop_speech_token;
    while (!done_ && static_cast<int>(out.size()) < n) {
        const int32_t token = sampler_.draw(logits_);
        if (token < 0) {  // every logit filtered: the reference stops here too
            done_ = true;
            break;
        }
        tokens_.push_back(token);
        out.push_back(token);
        if (token == stop || static_cast<int>(tokens_.size()) >= max_tokens_) {
            done_ = true;
            break;
        }
        logits_ = t3_.step(token);
        process_logits(logits_, tokens_, params_);
    }
    return out;
}

std::vector<int32_t> generate_speech_tokens(T3Gpt2& t3, const T3Conditioning& cond, const std::vector<int32_t>& text,
                                            const SamplingParams& params, int max_tokens, uint64_t seed) {
    SpeechTokenStream stream(t3, cond, text, params, max_tokens, seed);
    return stream.next(max_tokens);
}

}  // namespace cbs
