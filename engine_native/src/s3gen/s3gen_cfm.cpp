#include "s3gen/s3gen_cfm.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/backend.h"

namespace cbs {

ggml_tensor* causal_conv1d_ct(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, CpuProducts blas,
                              ggml_tensor* left) {
    const int K = static_cast<int>(w->ne[0]);
    if (left) x = ggml_concat(ctx, left, x, 1);
    ggml_tensor* xt = ggml_cont(ctx, ggml_transpose(ctx, x));  // [T, C_in]
    if (K > 1 && !left) xt = ggml_pad_ext(ctx, xt, K - 1, 0, 0, 0, 0, 0, 0, 0);
    ggml_tensor* cols = ggml_im2col(ctx, w, xt, 1, 0, 0, 0, 1, 0, false, GGML_TYPE_F32);         // [K*C_in, T]
    ggml_tensor* y = matmul(ctx, ggml_reshape_2d(ctx, w, w->ne[0] * w->ne[1], w->ne[2]), cols, blas);  // [C_out, T]
    return b ? ggml_add(ctx, y, b) : y;
}

// ---------------------------------------------------------------------------
// Estimator
// ---------------------------------------------------------------------------

// Every weight's shape is checked: channels C, input channels cin of the level, the
// time embedding width time_dim_, attention width n_head * head_dim and the
// feed-forward width of the first transformer (ff_ once known).
CfmEstimator::Resnet CfmEstimator::load_resnet(const ModelFile& mf, const std::string& p, int64_t cin) const {
    const int64_t C = channels_;
    auto t = [&](const std::string& n, std::vector<int64_t> ne) { return mf.tensor(p + n, ne); };
    return {t("block1.block.0.weight", {-1, cin, C}), t("block1.block.0.bias", {C}), t("block1.block.2.weight", {C}),
            t("block1.block.2.bias", {C}),           t("block2.block.0.weight", {-1, C, C}), t("block2.block.0.bias", {C}),
            t("block2.block.2.weight", {C}),          t("block2.block.2.bias", {C}),  t("mlp.1.weight", {time_dim_, C}),
            t("mlp.1.bias", {C}),                     t("res_conv.weight", {1, cin, C}), t("res_conv.bias", {C})};
}

CfmEstimator::Stage CfmEstimator::load_stage(const ModelFile& mf, const std::string& p, int64_t cin, bool with_conv) {
    const int64_t C = channels_, A = int64_t{n_head_} * head_dim_;
    Stage s;
    s.res = load_resnet(mf, p + "0.", cin);
    for (int j = 0;; ++j) {
        const std::string q = p + "1." + std::to_string(j) + ".";
        if (!mf.find_tensor(q + "norm1.weight")) break;
        if (ff_ < 0) ff_ = mf.tensor(q + "ff.net.0.proj.weight", {C, -1})->ne[1];
        const int64_t F = ff_;
        auto t = [&](const std::string& n, std::vector<int64_t> ne) { return mf.tensor(q + n, ne); };
        s.tfm.push_back({t("norm1.weight", {C}), t("norm1.bias", {C}), t("attn1.to_q.weight", {C, A}),
                         t("attn1.to_k.weight", {C, A}), t("attn1.to_v.weight", {C, A}),
                         t("attn1.to_out.0.weight", {A, C}), t("attn1.to_out.0.bias", {C}), t("norm3.weight", {C}),
                         t("norm3.bias", {C}), t("ff.net.0.proj.weight", {C, F}), t("ff.net.0.proj.bias", {F}),
                         t("ff.net.2.weight", {F, C}), t("ff.net.2.bias", {C})});
    }
    if (with_conv) {
        s.conv_w = mf.tensor(p + "2.weight", {-1, C, C});
        s.conv_b = mf.tensor(p + "2.bias", {C});
    }
    return s;
}

CfmEstimator::CfmEstimator(const ModelFile& mf, ggml_backend_t backend)
    : runner_(backend), on_cpu_(backend_is_cpu(backend)) {
    auto i = [&](const char* k) { return static_cast<int>(mf.get_int(std::string("chatterbox.s3gen.cfm.") + k)); };
    in_channels_ = i("in_channels");
    out_channels_ = i("out_channels");
    channels_ = i("channels");
    n_head_ = i("n_head");
    head_dim_ = i("head_dim");
    meanflow_ = mf.get_bool("chatterbox.s3gen.cfm.meanflow");
    const int n_blocks = i("n_blocks"), n_mid = i("n_mid_blocks");
    if (in_channels_ <= 0 || in_channels_ % 2 != 0 || n_head_ <= 0 || head_dim_ <= 0 || n_mid < 0 || channels_ <= 0 ||
        in_channels_ != 4 * out_channels_)
        throw ModelError(mf.path() + ": inconsistent S3Gen CFM dimensions");
    const int64_t C = channels_;

    auto t = [&](const std::string& n, std::vector<int64_t> ne) { return mf.tensor("s3gen.cfm." + n, ne); };
    t_l2_w_ = t("time_mlp.linear_2.weight", {-1, -1});
    time_dim_ = static_cast<int>(t_l2_w_->ne[1]);
    t_l2_w_ = t("time_mlp.linear_2.weight", {time_dim_, time_dim_});
    t_l2_b_ = t("time_mlp.linear_2.bias", {time_dim_});
    t_l1_w_ = t("time_mlp.linear_1.weight", {in_channels_, time_dim_});
    t_l1_b_ = t("time_mlp.linear_1.bias", {time_dim_});
    if (meanflow_) mixer_w_ = t("time_embed_mixer.weight", {2 * time_dim_, time_dim_});
    down_ = load_stage(mf, "s3gen.cfm.down_blocks.0.", in_channels_, true);
    for (int m = 0; m < n_mid; ++m)
        mid_.push_back(load_stage(mf, "s3gen.cfm.mid_blocks." + std::to_string(m) + ".", C, false));
    up_ = load_stage(mf, "s3gen.cfm.up_blocks.0.", 2 * C, true);
    if (mf.find_tensor("s3gen.cfm.down_blocks.1.0.block1.block.0.weight"))
        throw ModelError(mf.path() + ": S3Gen CFM with more than one U-Net level is not supported");
    for (const Stage* s : {&down_, &up_})
        if (static_cast<int>(s->tfm.size()) != n_blocks)
            throw ModelError(mf.path() + ": S3Gen CFM transformer count differs from s3gen.cfm.n_blocks");
    final_c_w_ = t("final_block.block.0.weight", {-1, C, C});
    final_c_b_ = t("final_block.block.0.bias", {C});
    final_ln_w_ = t("final_block.block.2.weight", {C});
    final_ln_b_ = t("final_block.block.2.bias", {C});
    proj_w_ = t("final_proj.weight", {1, C, out_channels_});
    proj_b_ = t("final_proj.bias", {out_channels_});
    products_ = products_for(backend, mid_.empty() ? down_.tfm.at(0).q_w : mid_[0].tfm.at(0).q_w);
    const char* fuse = std::getenv("CBS_CFM_QKV");  // "0": the three products (a comparison)
    if (!on_cpu_ && !(fuse && std::string(fuse) == "0")) fuse_qkv(mf, backend);
}

CfmEstimator::~CfmEstimator() {
    if (qkv_buf_) ggml_backend_buffer_free(qkv_buf_);
    if (qkv_ctx_) ggml_free(qkv_ctx_);
}

void CfmEstimator::fuse_qkv(const ModelFile& mf, ggml_backend_t backend) {
    std::vector<Transformer*> blocks;
    for (Stage* s : {&down_, &up_}) for (Transformer& b : s->tfm) blocks.push_back(&b);
    for (Stage& s : mid_) for (Transformer& b : s.tfm) blocks.push_back(&b);
    std::vector<Transformer*> fused;
    for (Transformer* b : blocks)
        if (b->q_w->type == b->k_w->type && b->q_w->type == b->v_w->type && ggml_are_same_shape(b->q_w, b->k_w) &&
            ggml_are_same_shape(b->q_w, b->v_w) && ggml_is_contiguous(b->q_w) && ggml_is_contiguous(b->k_w) &&
            ggml_is_contiguous(b->v_w))
            fused.push_back(b);
    if (fused.empty()) return;
    qkv_ctx_ = ggml_init({ggml_tensor_overhead() * fused.size(), nullptr, /*no_alloc=*/true});
    std::vector<ggml_tensor*> ws;
    for (Transformer* b : fused)
        ws.push_back(ggml_new_tensor_2d(qkv_ctx_, b->q_w->type, b->q_w->ne[0], 3 * b->q_w->ne[1]));
    qkv_buf_ = ggml_backend_alloc_ctx_tensors(qkv_ctx_, backend);
    if (!qkv_buf_) return;  // no room: the three products stay
    for (size_t i = 0; i < fused.size(); ++i) {
        // Rows (output channels) are contiguous in every type: [q; k; v] is their bytes in turn.
        size_t at = 0;
        for (ggml_tensor* w : {fused[i]->q_w, fused[i]->k_w, fused[i]->v_w}) {
            const std::vector<uint8_t> raw = mf.read_raw(w);
            ggml_backend_tensor_set(ws[i], raw.data(), at, raw.size());
            at += raw.size();
        }
        fused[i]->qkv_w = ws[i];
    }
}

// SinusoidalPosEmb(dim=in_channels)(t, scale=1000), in float32 as torch computes it.
std::vector<float> CfmEstimator::time_sinusoid(float t) const {
    const int half = in_channels_ / 2;
    std::vector<float> e(in_channels_);
    const float step = static_cast<float>(std::log(10000.0) / (half - 1));
    const float st = 1000.0f * t;
    for (int k = 0; k < half; ++k) {
        const float f = std::exp(static_cast<float>(k) * -step);
        const float a = st * f;
        e[k] = std::sin(a);
        e[half + k] = std::cos(a);
    }
    return e;
}

// TimestepEmbedding: linear_1 -> SiLU -> linear_2. s [in_channels] -> [time_dim].
ggml_tensor* CfmEstimator::time_mlp(ggml_context* ctx, ggml_tensor* s) const {
    return linear(ctx, ggml_silu(ctx, linear(ctx, s, t_l1_w_, t_l1_b_)), t_l2_w_, t_l2_b_);
}

// CausalBlock1D: causal conv (k3) -> LayerNorm over channels -> Mish. [C_in, T] -> [C_out, T].
ggml_tensor* CfmEstimator::block1d(ggml_context* ctx, ggml_tensor* x, ggml_tensor* cw, ggml_tensor* cb, ggml_tensor* lw,
                                   ggml_tensor* lb) const {
    return mish(ctx, layer_norm(ctx, causal_conv(ctx, x, cw, cb), lw, lb, ln_eps_), on_cpu_);
}

ggml_tensor* CfmEstimator::causal_conv(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b) const {
    const int k = static_cast<int>(w->ne[0]) - 1;
    return causal_conv1d_ct(ctx, x, w, b, products_, tap_ && k > 0 ? tap_conv_left(ctx, x, k) : nullptr);
}

// CausalResnetBlock1D: block1, + mlp(Mish(temb)), block2, + res_conv(x). [C_in, T] -> [C_out, T].
ggml_tensor* CfmEstimator::resnet(ggml_context* ctx, ggml_tensor* x, ggml_tensor* temb, const Resnet& r) const {
    ggml_tensor* h = block1d(ctx, x, r.c1_w, r.c1_b, r.ln1_w, r.ln1_b);
    h = ggml_add(ctx, h, linear(ctx, mish(ctx, temb, on_cpu_), r.mlp_w, r.mlp_b));
    h = block1d(ctx, h, r.c2_w, r.c2_b, r.ln2_w, r.ln2_b);
    ggml_tensor* res = linear(ctx, x, ggml_reshape_2d(ctx, r.res_w, r.res_w->ne[1], r.res_w->ne[2]), r.res_b, products_);
    return ggml_add(ctx, h, res);
}

// BasicTransformerBlock: pre-norm self-attention (full context, no qkv bias), pre-norm
// FFN with exact (erf) GELU. x [C, T].
ggml_tensor* CfmEstimator::transformer(ggml_context* ctx, ggml_tensor* x, const Transformer& b) const {
    const int64_t T = x->ne[1], B = x->ne[2], H = n_head_, D = head_dim_, A = H * D;
    ggml_tensor* h = layer_norm(ctx, x, b.n1_w, b.n1_b, ln_eps_);
    ggml_tensor *q, *k, *v;  // [A, T, B], rows contiguous
    if (b.qkv_w) {
        ggml_tensor* qkv = matmul(ctx, b.qkv_w, h, false);  // [3A, T, B]
        auto part = [&](int i) { return ggml_view_3d(ctx, qkv, A, T, B, qkv->nb[1], qkv->nb[2], i * A * sizeof(float)); };
        q = part(0), k = part(1), v = part(2);
    } else {
        q = linear(ctx, h, b.q_w, nullptr, products_);
        k = linear(ctx, h, b.k_w, nullptr, products_);
        v = linear(ctx, h, b.v_w, nullptr, products_);
    }
    if (tap_) k = tap_keys_values(ctx, k), v = tap_keys_values(ctx, v);
    auto heads = [&](ggml_tensor* t) {  // [D, T, H, B]
        return ggml_view_4d(ctx, t, D, t->ne[1], H, B, t->nb[1], D * sizeof(float), t->nb[2], 0);
    };
    // Full-context attention (the reference's mask is all ones: static_chunk_size 0).
    ggml_tensor* o = attention(ctx, heads(q), heads(k), heads(v), products_);
    o = ggml_reshape_3d(ctx, o, D * H, T, B);  // result is [D, H, T, B]
    x = ggml_add(ctx, x, linear(ctx, o, b.o_w, b.o_b, products_));

    h = layer_norm(ctx, x, b.n3_w, b.n3_b, ln_eps_);
    h = linear(ctx, gelu_erf(ctx, linear(ctx, h, b.ff1_w, b.ff1_b, products_), on_cpu_), b.ff2_w, b.ff2_b, products_);
    return ggml_add(ctx, x, h);
}

ggml_tensor* CfmEstimator::run_stage(ggml_context* ctx, ggml_tensor* x, ggml_tensor* temb, const Stage& s) const {
    x = resnet(ctx, x, temb, s.res);
    for (const Transformer& b : s.tfm) x = transformer(ctx, x, b);
    return x;
}

void CfmEstimator::check_inputs(size_t x, size_t mu, size_t spks, size_t cond, int T) const {
    const size_t n = static_cast<size_t>(out_channels_) * T;
    if (T <= 0 || x != n || mu != n || cond != n || spks != static_cast<size_t>(out_channels_))
        throw EngineError("CFM estimator inputs must be [" + std::to_string(out_channels_) + ", T] with spks [" +
                          std::to_string(out_channels_) + "]");
}

// Time embedding (meanflow: t and r each through the MLP, concatenated, mixed).
ggml_tensor* CfmEstimator::time_embedding(ggml_context* ctx, GraphInputs& in, float t, float r) const {
    ggml_tensor* temb = time_mlp(ctx, in.f32(ctx, time_sinusoid(t), in_channels_));
    if (meanflow_) {
        ggml_tensor* remb = time_mlp(ctx, in.f32(ctx, time_sinusoid(r), in_channels_));
        temb = linear(ctx, ggml_concat(ctx, temb, remb, 0), mixer_w_, nullptr);
    }
    return temb;
}

ggml_tensor* CfmEstimator::estimate(ggml_context* ctx, GraphInputs& in, ggml_tensor* h, float t, float r) const {
    const int M = out_channels_;
    ggml_tensor* temb = time_embedding(ctx, in, t, r);
    h = ggml_cont(ctx, ggml_transpose(ctx, h));  // [4M, T, B]
    h = run_stage(ctx, h, temb, down_);
    ggml_tensor* skip = h;
    h = causal_conv(ctx, h, down_.conv_w, down_.conv_b);
    for (const Stage& s : mid_) h = run_stage(ctx, h, temb, s);
    h = ggml_concat(ctx, h, skip, 0);  // [2C, T, B]
    h = run_stage(ctx, h, temb, up_);
    h = causal_conv(ctx, h, up_.conv_w, up_.conv_b);
    h = block1d(ctx, h, final_c_w_, final_c_b_, final_ln_w_, final_ln_b_);
    // final_proj (1x1 conv), produced time-fastest: [T, M, B]. mul_mat broadcasts only its
    // first operand over the batch, so a batch goes weights-first and is transposed after.
    ggml_tensor* pw = ggml_reshape_2d(ctx, proj_w_, proj_w_->ne[1], proj_w_->ne[2]);
    ggml_tensor* out = h->ne[2] == 1 ? matmul(ctx, h, pw, false) : ggml_cont(ctx, ggml_transpose(ctx, matmul(ctx, pw, h, false)));
    return ggml_add(ctx, out, ggml_reshape_2d(ctx, proj_b_, 1, M));
}

ggml_tensor* CfmEstimator::velocity(ggml_context* ctx, GraphInputs& in, ggml_tensor* x, ggml_tensor* mu,
                                    ggml_tensor* spks, ggml_tensor* cond, float t, float r) const {
    // Input: [x; mu; spks repeated over time; cond] along channels, [T, 4 * n_mels].
    ggml_tensor* sp = ggml_repeat(ctx, spks, mu);
    ggml_tensor* h = ggml_concat(ctx, ggml_concat(ctx, ggml_concat(ctx, x, mu, 1), sp, 1), cond, 1);
    return estimate(ctx, in, h, t, r);
}

std::vector<float> CfmEstimator::forward(const std::vector<float>& x, const std::vector<float>& mu,
                                         const std::vector<float>& spks, const std::vector<float>& cond, int T, float t,
                                         float r) {
    check_inputs(x.size(), mu.size(), spks.size(), cond.size(), T);
    const int M = out_channels_;
    ggml_context* ctx = runner_.begin();
    GraphInputs in;
    ggml_tensor* v = velocity(ctx, in, in.f32(ctx, x, T, M), in.f32(ctx, mu, T, M), in.f32(ctx, spks, 1, M),
                              in.f32(ctx, cond, T, M), t, r);
    return runner_.compute(v, in);
}

std::vector<float> CfmEstimator::euler(std::vector<float> x, int T, const std::vector<float>& ts,
                                       const std::function<StepVelocity(ggml_context*, GraphInputs&)>& inputs) {
    const int M = out_channels_;
    const int n_steps = static_cast<int>(ts.size()) - 1;
    int nodes_per_step = 0;
    for (int s = 0; s < n_steps;) {
        ggml_context* ctx = runner_.begin();
        ggml_cgraph* gf = runner_.graph();
        GraphInputs in;
        ggml_tensor* xt = in.f32(ctx, x, T, M);
        const StepVelocity velocity_at = inputs(ctx, in);
        // As many steps as the graph holds (all of them for the usual few): x += (r - t) v.
        do {
            const int before = ggml_graph_n_nodes(gf);
            const float t = ts[s], r = ts[s + 1];
            xt = ggml_add(ctx, xt, ggml_scale(ctx, velocity_at(xt, t, r), r - t));
            ggml_build_forward_expand(gf, xt);
            nodes_per_step = std::max(nodes_per_step, ggml_graph_n_nodes(gf) - before);
            ++s;
        } while (s < n_steps && ggml_graph_n_nodes(gf) + 2 * nodes_per_step < ggml_graph_size(gf));
        x = runner_.compute(xt, in);
    }
    return x;
}

std::vector<float> CfmEstimator::integrate(const std::vector<float>& x0, const std::vector<float>& mu,
                                           const std::vector<float>& spks, const std::vector<float>& cond, int T,
                                           const std::vector<float>& ts) {
    check_inputs(x0.size(), mu.size(), spks.size(), cond.size(), T);
    return euler(x0, T, ts, conditioned(mu, spks, cond, T));
}

// ---------------------------------------------------------------------------
// A stream's cached prefix
// ---------------------------------------------------------------------------

// Enough frames for every convolution's left context (kernels of 3 here).
static constexpr int kMinPrefixFrames = 8;

CfmPrefix::~CfmPrefix() {
    if (buf_) ggml_backend_buffer_free(buf_);
    if (ctx_) ggml_free(ctx_);
}

size_t CfmPrefix::bytes() const { return buf_ ? ggml_backend_buffer_get_size(buf_) : 0; }

namespace {
// dst [A, P + T] f32: the cached prefix's P rows (src 0, Q8_0 or f16) as f32, then the T rows
// of kv (src 1, f32 [A, T], rows contiguous, a view's stride), each thread its own rows: the
// prefix's keys or values and a pass's own in one pass over memory (get_rows, then
// ggml_concat's element-by-element loop: a fifth of a 10-token pass's CFM time).
void prefix_then_rows(ggml_tensor* dst, int ith, int nth, void*) {
    const ggml_tensor *cached = dst->src[0], *kv = dst->src[1];
    const int64_t A = dst->ne[0], P = cached->ne[1], rows = dst->ne[1];
    const ggml_to_float_t to_float = ggml_get_type_traits(cached->type)->to_float;
    for (int64_t r = rows * ith / nth; r < rows * (ith + 1) / nth; ++r) {
        auto* out = reinterpret_cast<float*>(static_cast<char*>(dst->data) + r * dst->nb[1]);
        if (r < P)
            to_float(static_cast<const char*>(cached->data) + r * cached->nb[1], out, A);
        else
            std::memcpy(out, static_cast<const char*>(kv->data) + (r - P) * kv->nb[1], A * sizeof(float));
    }
}
}  // namespace

ggml_tensor* CfmEstimator::PrefixTap::take(ggml_type type, int64_t ne0, int64_t ne1) {
    std::vector<ggml_tensor*>& tensors = prefix->steps_.at(step);
    if (mode == Mode::Collect) {
        tensors.push_back(ggml_new_tensor_2d(prefix->ctx_, type, ne0, ne1));
        return tensors.back();
    }
    if (next >= tensors.size()) throw EngineError("the CFM's cached prefix does not match this graph");
    ggml_tensor* t = tensors[next++];
    if (t->type != type || t->ne[0] != ne0 || (mode == Mode::Record && t->ne[1] != ne1))
        throw EngineError("the CFM's cached prefix does not match this graph");
    return t;
}

ggml_tensor* CfmEstimator::tap_keys_values(ggml_context* ctx, ggml_tensor* kv) const {
    // Q8_0 (blocks of 32 along the channels) where the width allows, else f16.
    const ggml_type type = kv->ne[0] % ggml_blck_size(GGML_TYPE_Q8_0) == 0 ? GGML_TYPE_Q8_0 : GGML_TYPE_F16;
    ggml_tensor* cached = tap_->take(type, kv->ne[0], kv->ne[1]);
    switch (tap_->mode) {
        case PrefixTap::Mode::Collect: return kv;
        case PrefixTap::Mode::Record: ggml_build_forward_expand(tap_->graph, ggml_cpy(ctx, kv, cached)); return kv;
        case PrefixTap::Mode::Use: break;
    }
    ggml_tensor* args[2] = {cached, kv};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, kv->ne[0], cached->ne[1] + kv->ne[1], 1, 1, args, 2, prefix_then_rows,
                          GGML_N_TASKS_MAX, nullptr);
}

ggml_tensor* CfmEstimator::tap_conv_left(ggml_context* ctx, ggml_tensor* x, int k) const {
    ggml_tensor* cached = tap_->take(GGML_TYPE_F32, x->ne[0], k);
    switch (tap_->mode) {
        case PrefixTap::Mode::Collect: return nullptr;
        case PrefixTap::Mode::Record: {
            ggml_tensor* tail = ggml_view_2d(ctx, x, x->ne[0], k, x->nb[1], (x->ne[1] - k) * x->nb[1]);
            ggml_build_forward_expand(tap_->graph, ggml_cpy(ctx, tail, cached));
            return nullptr;
        }
        case PrefixTap::Mode::Use: break;
    }
    return cached;
}

namespace {
// tap_ set for one estimator evaluation's construction (cleared however it ends).
template <class Tap>
struct TapScope {
    Tap*& slot;
    TapScope(Tap*& s, Tap* t) : slot(s) { slot = t; }
    ~TapScope() { slot = nullptr; }
};
}  // namespace

std::vector<float> CfmEstimator::euler_tapped(CfmPrefix& prefix, std::vector<float> x, int T, PrefixTap::Mode mode,
                                              const std::function<StepVelocity(ggml_context*, GraphInputs&)>& inputs) {
    size_t step = 0;
    return euler(std::move(x), T, prefix.ts_, [&](ggml_context* ctx, GraphInputs& in) -> StepVelocity {
        StepVelocity velocity_at = inputs(ctx, in);
        return [this, velocity_at, &step, &prefix, mode](ggml_tensor* xt, float t, float r) {
            PrefixTap tap{mode, &prefix, step++, 0, runner_.graph()};
            TapScope<PrefixTap> scope(tap_, &tap);
            return velocity_at(xt, t, r);
        };
    });
}

std::function<CfmEstimator::StepVelocity(ggml_context*, GraphInputs&)> CfmEstimator::conditioned(
    const std::vector<float>& mu, const std::vector<float>& spks, const std::vector<float>& cond, int T) const {
    const int M = out_channels_;
    return [this, &mu, &spks, &cond, T, M](ggml_context* ctx, GraphInputs& in) -> StepVelocity {
        ggml_tensor *mut = in.f32(ctx, mu, T, M), *spt = in.f32(ctx, spks, 1, M), *condt = in.f32(ctx, cond, T, M);
        return [this, ctx, &in, mut, spt, condt](ggml_tensor* x, float t, float r) {
            return velocity(ctx, in, x, mut, spt, condt, t, r);
        };
    };
}

std::shared_ptr<CfmPrefix> CfmEstimator::record_prefix(const std::vector<float>& x0, const std::vector<float>& mu,
                                                       const std::vector<float>& spks, const std::vector<float>& cond,
                                                       int P, const std::vector<float>& ts) {
    // (a pass reads the prefix through a CPU custom op: prefix_then_rows)
    if (!backend_is_cpu(runner_.backend())) throw EngineError("a cached stream prefix runs on the CPU only");
    if (!meanflow_) throw EngineError("a cached stream prefix needs a meanflow CFM (this model's is guided)");
    check_inputs(x0.size(), mu.size(), spks.size(), cond.size(), P);
    const int n_steps = static_cast<int>(ts.size()) - 1;
    if (P < kMinPrefixFrames) throw EngineError("a cached stream prefix needs at least " + std::to_string(kMinPrefixFrames) + " frames");
    if (n_steps < 1 || n_steps > kMaxPrefixSteps)
        throw EngineError("a cached stream prefix takes 1 to " + std::to_string(kMaxPrefixSteps) + " CFM steps");
    const int M = out_channels_;
    auto prefix = std::make_shared<CfmPrefix>();
    prefix->ts_ = ts;
    prefix->ctx_ = ggml_init({ggml_tensor_overhead() * 1024 * static_cast<size_t>(n_steps), nullptr, /*no_alloc=*/true});
    prefix->steps_.assign(n_steps, {});
    {  // The tensors one evaluation meets (a graph built and dropped), then as many for every step.
        ggml_context* ctx = runner_.begin();
        GraphInputs in;
        PrefixTap tap{PrefixTap::Mode::Collect, prefix.get(), 0};
        TapScope<PrefixTap> scope(tap_, &tap);
        velocity(ctx, in, in.f32(ctx, x0, P, M), in.f32(ctx, mu, P, M), in.f32(ctx, spks, 1, M), in.f32(ctx, cond, P, M),
                 ts[0], ts[1]);
    }
    for (int s = 1; s < n_steps; ++s)
        for (ggml_tensor* t : prefix->steps_[0]) prefix->steps_[s].push_back(ggml_dup_tensor(prefix->ctx_, t));
    prefix->buf_ = ggml_backend_alloc_ctx_tensors(prefix->ctx_, runner_.backend());
    if (!prefix->buf_) throw EngineError("not enough memory for the stream's cached prefix");
    euler_tapped(*prefix, x0, P, PrefixTap::Mode::Record, conditioned(mu, spks, cond, P));
    prefix->frames_ = P;
    return prefix;
}

std::vector<float> CfmEstimator::integrate_after_prefix(const CfmPrefix& prefix, const std::vector<float>& x0,
                                                        const std::vector<float>& mu, const std::vector<float>& spks,
                                                        int T) {
    if (prefix.frames_ == 0) throw EngineError("the stream prefix was never completed");
    check_inputs(x0.size(), mu.size(), spks.size(), mu.size(), T);
    const std::vector<float> cond(mu.size(), 0.0f);  // after the prompt
    // Use only reads the prefix (its tensors and times).
    return euler_tapped(const_cast<CfmPrefix&>(prefix), x0, T, PrefixTap::Mode::Use, conditioned(mu, spks, cond, T));
}

// Guidance as solve_euler computes it, in float32: the rows' weights are the float32 values
// of the Python floats (1.0 + inference_cfg_rate) and inference_cfg_rate.
std::vector<float> CfmEstimator::integrate_guided(const std::vector<float>& x0, const std::vector<float>& mu,
                                                  const std::vector<float>& spks, const std::vector<float>& cond,
                                                  int T, const std::vector<float>& ts, double rate, bool batched) {
    check_inputs(x0.size(), mu.size(), spks.size(), cond.size(), T);
    const int M = out_channels_;
    const float w_cond = static_cast<float>(1.0 + rate), w_uncond = static_cast<float>(rate);
    return euler(x0, T, ts, [&](ggml_context* ctx, GraphInputs& in) -> StepVelocity {
        // The rows' conditioning [mu; spks; cond] (channels 1..3 of the input) and the
        // unconditional row's zeros in their place.
        ggml_tensor* mut = in.f32(ctx, mu, T, M);
        ggml_tensor* c_cond = ggml_concat(ctx, ggml_concat(ctx, mut, ggml_repeat(ctx, in.f32(ctx, spks, 1, M), mut), 1),
                                          in.f32(ctx, cond, T, M), 1);
        ggml_tensor* c_uncond = in.f32(ctx, std::vector<float>(static_cast<size_t>(3) * M * T, 0.0f), T, 3 * M);
        return [this, ctx, &in, c_cond, c_uncond, batched, T, M, w_cond, w_uncond](ggml_tensor* x, float t, float r) {
            ggml_tensor* h_cond = ggml_concat(ctx, x, c_cond, 1);  // [T, 4M]
            ggml_tensor* h_uncond = ggml_concat(ctx, x, c_uncond, 1);
            ggml_tensor *v_cond, *v_uncond;
            if (batched) {
                ggml_tensor* v = estimate(ctx, in, ggml_concat(ctx, h_cond, h_uncond, 2), t, r);  // [T, M, 2]
                v_cond = ggml_view_2d(ctx, v, T, M, v->nb[1], 0);
                v_uncond = ggml_view_2d(ctx, v, T, M, v->nb[1], v->nb[2]);
            } else {
                v_cond = estimate(ctx, in, h_cond, t, r);
                v_uncond = estimate(ctx, in, h_uncond, t, r);
            }
            return ggml_sub(ctx, ggml_scale(ctx, v_cond, w_cond), ggml_scale(ctx, v_uncond, w_uncond));
        };
    });
}

// ---------------------------------------------------------------------------
// Sampler
// ---------------------------------------------------------------------------

S3GenCfm::S3GenCfm(const ModelFile& mf, ggml_backend_t backend) : est_(mf, backend) {
    n_timesteps_ = static_cast<int>(mf.get_int("chatterbox.s3gen.cfm.n_timesteps"));
    meanflow_ = mf.get_bool("chatterbox.s3gen.cfm.meanflow");
    if (n_timesteps_ <= 0) throw ModelError(mf.path() + ": s3gen.cfm.n_timesteps must be positive");
    // The standard CFM's schedule and guidance (CFM_PARAMS' values where a file lacks them).
    if (mf.has_key("chatterbox.s3gen.cfm.t_scheduler"))
        cosine_ = mf.get_string("chatterbox.s3gen.cfm.t_scheduler") == "cosine";
    if (mf.has_key("chatterbox.s3gen.cfm.inference_cfg_rate"))
        cfg_rate_ = mf.get_float("chatterbox.s3gen.cfm.inference_cfg_rate");
    if (!std::isfinite(cfg_rate_)) throw ModelError(mf.path() + ": s3gen.cfm.inference_cfg_rate must be finite");
    const ggml_tensor* w = mf.tensor("s3gen.flow.spk_embed_affine_layer.weight", {-1, est_.n_mels()});
    spk_in_ = static_cast<int>(w->ne[0]);
    spk_out_ = static_cast<int>(w->ne[1]);
    spk_w_ = mf.read_f32(w);
    spk_b_ = mf.read_f32(mf.tensor("s3gen.flow.spk_embed_affine_layer.bias", {spk_out_}));
}

std::vector<float> S3GenCfm::t_span(int n_steps) const {
    // torch.linspace(0, 1, n + 1, float32) as torch 2.x's CPU kernel computes it (checked for
    // every n up to 300): a float32 step, each value start + step * i (first half) or
    // end - step * (steps - 1 - i) (second half) in double, rounded to float32.
    const int steps = n_steps + 1;
    std::vector<float> ts(steps);
    const double step = 1.0f / static_cast<float>(n_steps);
    const int halfway = steps / 2;
    for (int i = 0; i < steps; ++i)
        ts[i] = static_cast<float>(i < halfway ? step * i : 1.0 - step * (steps - 1 - i));
    // meanflow uses it as is (CausalConditionalCFM.forward skips the scheduler).
    if (meanflow_ || !cosine_) return ts;
    // 1 - cos(t * 0.5 * pi) in float32 (torch.pi a float32 scalar). torch's float32 cos
    // (MKL's vector cos in the oracle's wheel) is within one ulp of the correctly rounded
    // value used here; the two agree on every value for the default 10 steps.
    const float pi = static_cast<float>(M_PI);
    for (float& t : ts) t = 1.0f - static_cast<float>(std::cos(static_cast<double>((t * 0.5f) * pi)));
    return ts;
}

int S3GenCfm::conditioning(const std::vector<float>& mu, int T, const std::vector<float>& prompt_feat,
                           const std::vector<float>& embedding, const std::vector<float>& x0, std::vector<float>& spks,
                           std::vector<float>& cond) const {
    const int M = est_.n_mels();
    const size_t n = static_cast<size_t>(M) * T;
    if (T <= 0 || mu.size() != n) throw EngineError("mu must be [" + std::to_string(M) + ", T] with T > 0");
    if (x0.size() != n)
        throw EngineError("x0 must be [" + std::to_string(M) + ", " + std::to_string(T) + "] (n_mels x mel frames of mu), got " +
                          std::to_string(x0.size()) + " values");
    if (prompt_feat.size() % M != 0) throw EngineError("prompt_feat must be [T_prompt, " + std::to_string(M) + "]");
    const int P = static_cast<int>(prompt_feat.size() / M);
    if (P > T) throw EngineError("prompt_feat has more frames (" + std::to_string(P) + ") than mu (" + std::to_string(T) + ")");
    if (embedding.size() != static_cast<size_t>(spk_in_))
        throw EngineError("speaker embedding must have " + std::to_string(spk_in_) + " values");

    // spks = spk_embed_affine_layer(F.normalize(embedding)).
    double ss = 0.0;
    for (float v : embedding) ss += static_cast<double>(v) * v;
    const float norm = std::max(static_cast<float>(std::sqrt(ss)), 1e-12f);
    std::vector<float> e(spk_in_);
    for (int k = 0; k < spk_in_; ++k) e[k] = embedding[k] / norm;
    spks.assign(M, 0.0f);
    for (int o = 0; o < M; ++o) {
        double acc = spk_b_[o];
        for (int k = 0; k < spk_in_; ++k) acc += static_cast<double>(spk_w_[static_cast<size_t>(o) * spk_in_ + k]) * e[k];
        spks[o] = static_cast<float>(acc);
    }

    // cond: the prompt mel in the first P frames, zeros after; row-major [M][T].
    cond.assign(n, 0.0f);
    for (int f = 0; f < P; ++f)
        for (int c = 0; c < M; ++c) cond[static_cast<size_t>(c) * T + f] = prompt_feat[static_cast<size_t>(f) * M + c];
    return P;
}

std::vector<float> S3GenCfm::sample(const std::vector<float>& mu, int T, const std::vector<float>& prompt_feat,
                                    const std::vector<float>& embedding, const std::vector<float>& x0, int n_steps) {
    if (n_steps < 0 || n_steps > 100) throw EngineError("cfm_steps must be between 1 and 100");
    if (n_steps == 0) n_steps = n_timesteps_;
    std::vector<float> spks, cond;
    const int P = conditioning(mu, T, prompt_feat, embedding, x0, spks, cond);
    const int M = est_.n_mels();

    // Euler over t_span on the device: meanflow x += (r - t) v(x, t, r); the standard CFM
    // with classifier-free guidance inside every step.
    const std::vector<float> x = meanflow_ ? est_.integrate(x0, mu, spks, cond, T, t_span(n_steps))
                                           : est_.integrate_guided(x0, mu, spks, cond, T, t_span(n_steps), cfg_rate_,
                                                                   guidance_batched_);

    std::vector<float> out(static_cast<size_t>(M) * (T - P));
    for (int c = 0; c < M; ++c)
        std::copy(x.begin() + static_cast<size_t>(c) * T + P, x.begin() + static_cast<size_t>(c + 1) * T,
                  out.begin() + static_cast<size_t>(c) * (T - P));
    return out;
}

std::shared_ptr<CfmPrefix> S3GenCfm::make_prefix(const std::vector<float>& mu, int P,
                                                  const std::vector<float>& prompt_feat,
                                                  const std::vector<float>& embedding, const std::vector<float>& x0,
                                                  int n_steps) {
    if (!meanflow_) throw EngineError("a cached stream prefix needs a meanflow CFM (this model's is guided)");
    if (n_steps < 0 || n_steps > 100) throw EngineError("cfm_steps must be between 1 and 100");
    if (n_steps == 0) n_steps = n_timesteps_;
    std::vector<float> spks, cond;
    if (conditioning(mu, P, prompt_feat, embedding, x0, spks, cond) != P)
        throw EngineError("a stream prefix is the prompt's frames alone: prompt_feat must have mu's frames");
    std::shared_ptr<CfmPrefix> prefix = est_.record_prefix(x0, mu, spks, cond, P, t_span(n_steps));
    prefix->spks_ = std::move(spks);
    return prefix;
}

std::vector<float> S3GenCfm::sample_after_prefix(const CfmPrefix& prefix, const std::vector<float>& mu, int T,
                                                 const std::vector<float>& x0) {
    const size_t n = static_cast<size_t>(est_.n_mels()) * T;
    if (T <= 0 || mu.size() != n || x0.size() != n)
        throw EngineError("mu and x0 after the prefix must be [" + std::to_string(est_.n_mels()) + ", T] with T > 0");
    return est_.integrate_after_prefix(prefix, x0, mu, prefix.spks_, T);
}

std::vector<std::vector<float>> S3GenCfm::velocities(const std::vector<float>& mu, int T,
                                                     const std::vector<float>& prompt_feat,
                                                     const std::vector<float>& embedding, const std::vector<float>& x,
                                                     float t, float r) {
    std::vector<float> spks, cond;
    conditioning(mu, T, prompt_feat, embedding, x, spks, cond);
    std::vector<std::vector<float>> v{est_.forward(x, mu, spks, cond, T, t, r)};
    if (!meanflow_) {
        const std::vector<float> zeros(mu.size(), 0.0f);
        v.push_back(est_.forward(x, zeros, std::vector<float>(spks.size(), 0.0f), zeros, T, t, r));
    }
    return v;
}

}  // namespace cbs
