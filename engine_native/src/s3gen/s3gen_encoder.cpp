#include "s3gen/s3gen_encoder.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/backend.h"
#include "core/graph_helpers.h"
#include "cpu/attention.h"

namespace cbs {

// One conformer block's weights, every shape checked: d_model D, n_head H, and the
// feed-forward width F of the first block (every block must have the same).
S3GenEncoder::Block S3GenEncoder::load_block(const ModelFile& mf, const std::string& p, int64_t& F) const {
    const int64_t D = d_model_, H = n_head_;
    if (F < 0) F = mf.tensor(p + "feed_forward.w_1.weight", {D, -1})->ne[1];
    auto t = [&](const std::string& n, std::vector<int64_t> ne) { return mf.tensor(p + n, ne); };
    return {t("norm_mha.weight", {D}), t("norm_mha.bias", {D}), t("self_attn.linear_q.weight", {D, D}),
            t("self_attn.linear_q.bias", {D}), t("self_attn.linear_k.weight", {D, D}), t("self_attn.linear_k.bias", {D}),
            t("self_attn.linear_v.weight", {D, D}), t("self_attn.linear_v.bias", {D}),
            t("self_attn.linear_out.weight", {D, D}), t("self_attn.linear_out.bias", {D}),
            t("self_attn.linear_pos.weight", {D, D}), t("self_attn.pos_bias_u", {D / H, H}),
            t("self_attn.pos_bias_v", {D / H, H}), t("norm_ff.weight", {D}), t("norm_ff.bias", {D}),
            t("feed_forward.w_1.weight", {D, F}), t("feed_forward.w_1.bias", {F}), t("feed_forward.w_2.weight", {F, D}),
            t("feed_forward.w_2.bias", {D})};
}

S3GenEncoder::S3GenEncoder(const ModelFile& mf, ggml_backend_t backend)
    : runner_(backend), on_cpu_(backend_is_cpu(backend)) {
    auto i = [&](const char* k) { return static_cast<int>(mf.get_int(std::string("chatterbox.") + k)); };
    auto f = [&](const char* k) { return static_cast<float>(mf.get_float(std::string("chatterbox.") + k)); };
    d_model_ = i("s3gen.enc.d_model");
    n_head_ = i("s3gen.enc.n_head");
    vocab_ = i("s3gen.speech_vocab");
    n_mels_ = i("s3gen.n_mels");
    lookahead_ = i("s3gen.enc.pre_lookahead_len");
    up_stride_ = i("s3gen.enc.up_stride");
    layer_eps_ = f("s3gen.enc.layer_eps");
    embed_eps_ = f("s3gen.enc.embed_eps");
    after_eps_ = f("s3gen.enc.after_norm_eps");
    lookahead_slope_ = f("s3gen.enc.lookahead_lrelu_slope");
    if (n_head_ <= 0 || d_model_ % n_head_ != 0) throw ModelError(mf.path() + ": inconsistent S3Gen encoder dimensions");

    if (vocab_ <= 0 || n_mels_ <= 0 || lookahead_ < 0 || up_stride_ < 1)
        throw ModelError(mf.path() + ": inconsistent S3Gen encoder metadata");
    const int64_t D = d_model_;
    auto t = [&](const std::string& n, std::vector<int64_t> ne) { return mf.tensor("s3gen." + n, ne); };
    tok_emb_ = t("flow.input_embedding.weight", {-1, vocab_});
    const int64_t in = tok_emb_->ne[0];
    embed_ = {t("enc.embed.out.0.weight", {in, D}), t("enc.embed.out.0.bias", {D}), t("enc.embed.out.1.weight", {D}),
              t("enc.embed.out.1.bias", {D})};
    up_embed_ = {t("enc.up_embed.out.0.weight", {D, D}), t("enc.up_embed.out.0.bias", {D}),
                 t("enc.up_embed.out.1.weight", {D}), t("enc.up_embed.out.1.bias", {D})};
    la_conv1_w_ = t("enc.pre_lookahead_layer.conv1.weight", {lookahead_ + 1, D, D});
    la_conv1_b_ = t("enc.pre_lookahead_layer.conv1.bias", {D});
    la_conv2_w_ = t("enc.pre_lookahead_layer.conv2.weight", {-1, D, D});
    la_conv2_b_ = t("enc.pre_lookahead_layer.conv2.bias", {D});
    up_w_ = t("enc.up_layer.conv.weight", {-1, D, D});
    up_b_ = t("enc.up_layer.conv.bias", {D});
    after_w_ = t("enc.after_norm.weight", {D});
    after_b_ = t("enc.after_norm.bias", {D});
    proj_w_ = t("flow.encoder_proj.weight", {D, n_mels_});
    proj_b_ = t("flow.encoder_proj.bias", {n_mels_});
    int64_t F = -1;
    for (int b = 0; b < i("s3gen.enc.n_blocks"); ++b)
        blocks_.push_back(load_block(mf, "s3gen.enc.encoders." + std::to_string(b) + ".", F));
    for (int b = 0; b < i("s3gen.enc.n_up_blocks"); ++b)
        up_blocks_.push_back(load_block(mf, "s3gen.enc.up_encoders." + std::to_string(b) + ".", F));
    products_ = products_for(backend, blocks_.empty() ? proj_w_ : blocks_[0].ff1_w);
}

// ESPnet relative positional encoding rows for relative positions n_keys-1 down to
// -(n_queries-1), computed in float32 step by step as EspnetRelPositionalEncoding.extend_pe does.
std::vector<float> S3GenEncoder::rel_positions(int n_keys, int n_queries) {
    if (n_queries < 0) n_queries = n_keys;
    const int d = d_model_, n = std::max(n_keys, n_queries);
    if (n > n_table_) {
        const int N = std::max(n, 2 * n_table_);  // grown geometrically: a stream's inputs grow chunk by chunk
        table_.assign(static_cast<size_t>(2 * N - 1) * d, 0.0f);
        const float scale = static_cast<float>(-(std::log(10000.0) / d));
        std::vector<float> div(d / 2);
        for (int k = 0; k < d / 2; ++k) div[k] = std::exp(static_cast<float>(2 * k) * scale);
        for (int row = 0; row < 2 * N - 1; ++row) {
            const int rel = N - 1 - row;  // positive: pe_positive flipped; negative: pe_negative
            const float pos = static_cast<float>(std::abs(rel));
            const float sign = rel >= 0 ? 1.0f : -1.0f;
            float* out = table_.data() + static_cast<size_t>(row) * d;
            for (int k = 0; k < d / 2; ++k) {
                const float arg = sign * (pos * div[k]);
                out[2 * k] = std::sin(arg);
                out[2 * k + 1] = std::cos(arg);
            }
        }
        n_table_ = N;
    }
    // Relative position n_keys-1 is row N-n_keys of the table.
    const auto first = table_.begin() + static_cast<ptrdiff_t>(n_table_ - n_keys) * d;
    return std::vector<float>(first, first + static_cast<ptrdiff_t>(n_keys + n_queries - 1) * d);
}

ggml_tensor* S3GenEncoder::embed(ggml_context* ctx, ggml_tensor* x, const Embed& e) const {
    x = layer_norm(ctx, linear(ctx, x, e.w, e.b, products_), e.ln_w, e.ln_b, &embed_eps_, on_cpu_);
    return ggml_scale(ctx, x, std::sqrt(static_cast<float>(d_model_)));
}

// Pre-norm conformer block (no macaron FFN, no conv module): rel-pos MHSA, then FFN (SiLU).
ggml_tensor* S3GenEncoder::block(ggml_context* ctx, GraphInputs& in, ggml_tensor* x, ggml_tensor* pos,
                                 ggml_tensor* mask, const Block& b, PrefixUse* prefix) const {
    const int64_t T = x->ne[1], H = n_head_, D = d_model_ / n_head_;
    ggml_tensor* h = layer_norm(ctx, x, b.norm_mha_w, b.norm_mha_b, &layer_eps_, on_cpu_);
    ggml_tensor* k2 = linear(ctx, h, b.k_w, b.k_b, products_);  // [A, T]
    ggml_tensor* v2 = linear(ctx, h, b.v_w, b.v_b, products_);
    if (prefix && !prefix->cached) {
        prefix->recorded.push_back(k2);
        prefix->recorded.push_back(v2);
    } else if (prefix) {  // the prompt's keys and values first
        const Prefix& c = *prefix->cached;
        const size_t i = prefix->block++;
        const int64_t P = static_cast<int64_t>(c.keys.at(i).size()) / (D * H);
        k2 = ggml_concat(ctx, in.f32(ctx, c.keys[i], D * H, P), k2, 1);
        v2 = ggml_concat(ctx, in.f32(ctx, c.values[i], D * H, P), v2, 1);
    }
    const int64_t Tk = k2->ne[1], L = pos->ne[1];  // keys; relative positions Tk-1 .. -(T-1)
    ggml_tensor* q = ggml_reshape_3d(ctx, linear(ctx, h, b.q_w, b.q_b, products_), D, H, T);
    ggml_tensor* k = ggml_reshape_3d(ctx, k2, D, H, Tk);
    ggml_tensor* v = ggml_reshape_3d(ctx, v2, D, H, Tk);
    ggml_tensor* p = ggml_reshape_3d(ctx, linear(ctx, pos, b.pos_w, nullptr, products_), D, H, L);

    // Contiguous queries (and without OpenBLAS padded keys, mask): the sgemm paths (cpu/products.cpp).
    ggml_tensor* q_u = ggml_cont(ctx, ggml_permute(ctx, ggml_add(ctx, q, ggml_reshape_3d(ctx, b.pos_bias_u, D, H, 1)), 0, 2, 1, 3));
    ggml_tensor* q_v = ggml_cont(ctx, ggml_permute(ctx, ggml_add(ctx, q, ggml_reshape_3d(ctx, b.pos_bias_v, D, H, 1)), 0, 2, 1, 3));
    // On the CPU one fused operation (cpu/attention.h): no [L, T, H] product, shift and
    // softmax through memory.
    ggml_tensor* o = rel_position_attention(ctx, q_u, q_v, ggml_permute(ctx, k, 0, 2, 1, 3),
                                            ggml_permute(ctx, p, 0, 2, 1, 3), ggml_permute(ctx, v, 0, 2, 1, 3), products_);
    if (!o) {
        ggml_tensor* ac = matmul(ctx, ggml_permute(ctx, k, 0, 2, 1, 3), q_u, products_);  // [T_k, T_q, H]
        ggml_tensor* bd = matmul(ctx, ggml_permute(ctx, p, 0, 2, 1, 3), q_v, products_);  // [L, T_q, H]
        // rel_shift: query i (position Tk-T+i) and key j take relative position Tk-T+i-j, column
        // T-1-i+j of bd: a view stepping L-1 per query row (2T-2 without a prefix).
        bd = ggml_view_3d(ctx, bd, Tk, T, H, (L - 1) * sizeof(float), bd->nb[2], (T - 1) * sizeof(float));
        ggml_tensor* scores = ggml_add(ctx, ac, bd);
        if (mask) scores = ggml_pad(ctx, scores, static_cast<int>(mask->ne[0] - Tk), 0, 0, 0);
        o = attend(ctx, scores, ggml_permute(ctx, v, 0, 2, 1, 3), mask, 1.0f / std::sqrt(static_cast<float>(D)),
                   products_);
    }
    o = ggml_reshape_2d(ctx, o, D * H, T);  // [D, H, T]
    x = ggml_add(ctx, x, linear(ctx, o, b.out_w, b.out_b, products_));

    h = layer_norm(ctx, x, b.norm_ff_w, b.norm_ff_b, &layer_eps_, on_cpu_);
    h = linear(ctx, ggml_silu(ctx, linear(ctx, h, b.ff1_w, b.ff1_b, products_)), b.ff2_w, b.ff2_b, products_);
    return ggml_add(ctx, x, h);
}

void S3GenEncoder::check_tokens(const std::vector<int32_t>& tokens) const {
    if (tokens.empty()) throw EngineError("S3Gen needs at least one speech token");
    for (int32_t id : tokens)
        if (id < 0 || id >= vocab_)
            throw EngineError("speech token " + std::to_string(id) + " is outside [0, " + std::to_string(vocab_) + ")");
}

std::vector<float> S3GenEncoder::encode(const std::vector<int32_t>& tokens) {
    check_tokens(tokens);
    ggml_context* ctx = runner_.begin();
    GraphInputs in;
    ggml_tensor* mu = build(ctx, in, tokens);
    return runner_.compute(mu, in);
}

size_t S3GenEncoder::reserve(int n_tokens) {
    if (n_tokens < 1) throw EngineError("S3Gen needs at least one speech token");
    rel_positions(n_tokens * up_stride_);
    ggml_context* ctx = runner_.begin();
    GraphInputs in;
    return runner_.reserve(build(ctx, in, std::vector<int32_t>(static_cast<size_t>(n_tokens), 0)));
}

// The prompt needs as many frames as the convolutions' left context.
static constexpr int kMinPrefixTokens = 4;

std::shared_ptr<S3GenEncoder::Prefix> S3GenEncoder::make_prefix(const std::vector<int32_t>& prompt) {
    check_tokens(prompt);
    if (static_cast<int>(prompt.size()) < kMinPrefixTokens)
        throw EngineError("a cached stream prefix needs at least " + std::to_string(kMinPrefixTokens) + " prompt tokens");
    ggml_context* ctx = runner_.begin();
    GraphInputs in;
    PrefixUse rec{nullptr};
    std::vector<ggml_tensor*> outs{build(ctx, in, prompt, &rec), rec.lookahead_tail, rec.up_tail};
    outs.insert(outs.end(), rec.recorded.begin(), rec.recorded.end());
    std::vector<std::vector<float>> got = runner_.compute(outs, in);
    auto p = std::make_shared<Prefix>();
    p->tokens = static_cast<int>(prompt.size());
    p->n_mels = n_mels_;
    p->mu = std::move(got[0]);
    p->lookahead_tail = std::move(got[1]);
    p->up_tail = std::move(got[2]);
    for (size_t i = 3; i + 1 < got.size(); i += 2) {
        p->keys.push_back(std::move(got[i]));
        p->values.push_back(std::move(got[i + 1]));
    }
    return p;
}

std::vector<float> S3GenEncoder::encode_after_prefix(const Prefix& prefix, const std::vector<int32_t>& tokens) {
    check_tokens(tokens);
    if (prefix.keys.size() != blocks_.size() + up_blocks_.size())
        throw EngineError("the stream prefix is not this encoder's");
    ggml_context* ctx = runner_.begin();
    GraphInputs in;
    PrefixUse use{&prefix};
    ggml_tensor* mu = build(ctx, in, tokens, &use);
    return runner_.compute(mu, in);
}

ggml_tensor* S3GenEncoder::left_context(ggml_context* ctx, GraphInputs& in, ggml_tensor* x, int k,
                                        const std::vector<float>& cached, ggml_tensor** record) const {
    if (!record && !cached.empty()) return ggml_concat(ctx, in.f32(ctx, cached, k, x->ne[1]), x, 0);
    if (record) *record = ggml_cont(ctx, ggml_view_2d(ctx, x, k, x->ne[1], x->nb[1], (x->ne[0] - k) * sizeof(float)));
    return ggml_pad_ext(ctx, x, k, 0, 0, 0, 0, 0, 0, 0);
}

ggml_tensor* S3GenEncoder::build(ggml_context* ctx, GraphInputs& in, const std::vector<int32_t>& tokens,
                                 PrefixUse* prefix) {
    const Prefix* cached = prefix ? prefix->cached : nullptr;
    const bool record = prefix && !cached;
    const int T = static_cast<int>(tokens.size()), T2 = T * up_stride_;
    const int Tk = T + (cached ? cached->tokens : 0), Tk2 = Tk * up_stride_;  // keys: the prompt's first
    ggml_tensor* x = ggml_get_rows(ctx, tok_emb_, in.ids(ctx, tokens));  // [C, T]
    x = embed(ctx, x, embed_);
    ggml_tensor* pos = in.f32(ctx, rel_positions(Tk, T), d_model_, Tk + T - 1);

    // Pre-lookahead: conv over the next `lookahead` frames, leaky ReLU, causal conv, residual.
    ggml_tensor* xt = ggml_cont(ctx, ggml_transpose(ctx, x));  // [T, C]
    ggml_tensor* la = conv1d(ctx, ggml_pad_ext(ctx, xt, 0, lookahead_, 0, 0, 0, 0, 0, 0), la_conv1_w_, la_conv1_b_, 1, 0, 1, products_);
    la = ggml_leaky_relu(ctx, la, lookahead_slope_, false);
    const int k2 = static_cast<int>(la_conv2_w_->ne[0]);
    static const std::vector<float> none;
    la = conv1d(ctx, left_context(ctx, in, la, k2 - 1, cached ? cached->lookahead_tail : none,
                                  record ? &prefix->lookahead_tail : nullptr),
                la_conv2_w_, la_conv2_b_, 1, 0, 1, products_);
    x = ggml_add(ctx, x, ggml_cont(ctx, ggml_transpose(ctx, la)));
    ggml_tensor* mask = key_pad_mask(ctx, in, Tk, T, on_cpu_);
    for (const Block& b : blocks_) x = block(ctx, in, x, pos, mask, b, prefix);

    // Upsample1D: nearest repeat by `up_stride` along time, left pad, conv.
    xt = ggml_cont(ctx, ggml_transpose(ctx, x));  // [T, C]
    xt = ggml_reshape_3d(ctx, xt, 1, T, d_model_);
    ggml_tensor* rep = xt;
    for (int s = 1; s < up_stride_; ++s) rep = ggml_concat(ctx, rep, xt, 0);
    rep = ggml_reshape_2d(ctx, rep, T2, d_model_);
    const int ku = static_cast<int>(up_w_->ne[0]);
    rep = conv1d(ctx, left_context(ctx, in, rep, ku - 1, cached ? cached->up_tail : none, record ? &prefix->up_tail : nullptr),
                 up_w_, up_b_, 1, 0, 1, products_);
    x = ggml_cont(ctx, ggml_transpose(ctx, rep));  // [C, 2T]

    x = embed(ctx, x, up_embed_);
    ggml_tensor* pos2 = in.f32(ctx, rel_positions(Tk2, T2), d_model_, Tk2 + T2 - 1);
    ggml_tensor* mask2 = key_pad_mask(ctx, in, Tk2, T2, on_cpu_);
    for (const Block& b : up_blocks_) x = block(ctx, in, x, pos2, mask2, b, prefix);
    x = layer_norm(ctx, x, after_w_, after_b_, &after_eps_, on_cpu_);
    return ggml_cont(ctx, ggml_transpose(ctx, linear(ctx, x, proj_w_, proj_b_, products_)));  // [2T, n_mels]
}

}  // namespace cbs
