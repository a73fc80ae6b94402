#include "s3gen/cfm_estimator.h"

#include <cmath>
#include <cstdlib>
#include <string>

#include "core/backend.h"
#include "core/graph_helpers.h"
#include "cpu/activations.h"
#include "cpu/attention.h"

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
    const ggml_tensor* q_w = mid_.empty() ? down_.tfm.at(0).q_w : mid_[0].tfm.at(0).q_w;
    products_ = products_for(backend, q_w);
    // On a GPU a model whose matrices are not f32 multiplies its attention at the precision
    // its weights' products already have (the device's default: TF32 on CUDA), since the f32
    // products were a large part of a pass (docs/GPU.md: the time and the mel difference);
    // an f32 model, parity's, keeps f32. CBS_CFM_ATTENTION_F32=1: f32 always.
    const char* f32 = std::getenv("CBS_CFM_ATTENTION_F32");
    attention_products_ = !on_cpu_ && q_w->type != GGML_TYPE_F32 && !(f32 && std::string(f32) == "1")
                              ? CpuProducts::device_default
                              : products_;
    // [q; k; v] as one weight: one product where there were three. On the CPU only in the fast
    // products, whose sums per output do not depend on the weight's other rows (AMX, int16:
    // the same values as the three products); sgemm's may, so exact products keep three.
    const char* fuse = std::getenv("CBS_CFM_QKV");  // "0": the three products (a comparison)
    if ((!on_cpu_ || products_.kind == CpuProducts::fast) && !(fuse && std::string(fuse) == "0")) fuse_qkv(mf, backend);
    const char* convs = std::getenv("CBS_CFM_CONV");  // "0": im2col and the product (a comparison)
    if (on_cpu_ && products_.kind == CpuProducts::fast && !(convs && std::string(convs) == "0"))
        order_convs_by_time(mf, backend);
    const char* replay = std::getenv("CBS_CFM_REPLAY");
    replay_steps_ = !on_cpu_ && !(replay && std::string(replay) == "0");
}

CfmEstimator::~CfmEstimator() {
    if (qkv_buf_) ggml_backend_buffer_free(qkv_buf_);
    if (qkv_ctx_) ggml_free(qkv_ctx_);
    if (conv_buf_) ggml_backend_buffer_free(conv_buf_);
    if (conv_ctx_) ggml_free(conv_ctx_);
}

void CfmEstimator::order_convs_by_time(const ModelFile& mf, ggml_backend_t backend) {
    std::vector<ggml_tensor*> convs;
    for (Stage* s : {&down_, &up_}) convs.insert(convs.end(), {s->res.c1_w, s->res.c2_w, s->conv_w});
    for (Stage& s : mid_) convs.insert(convs.end(), {s.res.c1_w, s.res.c2_w});
    convs.push_back(final_c_w_);
    std::vector<ggml_tensor*> todo;
    for (ggml_tensor* w : convs)
        if (w && w->type == GGML_TYPE_F32 && ggml_n_dims(w) == 3 && w->ne[0] > 1 && ggml_is_contiguous(w)) todo.push_back(w);
    if (todo.empty()) return;
    conv_ctx_ = ggml_init({ggml_tensor_overhead() * todo.size(), nullptr, /*no_alloc=*/true});
    std::vector<ggml_tensor*> ordered;
    for (ggml_tensor* w : todo) ordered.push_back(ggml_new_tensor_2d(conv_ctx_, GGML_TYPE_F32, w->ne[0] * w->ne[1], w->ne[2]));
    conv_buf_ = ggml_backend_alloc_ctx_tensors(conv_ctx_, backend);
    if (!conv_buf_) return;  // no room: im2col stays
    for (size_t i = 0; i < todo.size(); ++i) {
        const int64_t k = todo[i]->ne[0], cin = todo[i]->ne[1], cout = todo[i]->ne[2];
        const std::vector<uint8_t> raw = mf.read_raw(todo[i]);
        const auto* w = reinterpret_cast<const float*>(raw.data());  // [co][ci][j]
        std::vector<float> out(raw.size() / sizeof(float));
        for (int64_t co = 0; co < cout; ++co)
            for (int64_t ci = 0; ci < cin; ++ci)
                for (int64_t j = 0; j < k; ++j) out[(co * k + j) * cin + ci] = w[(co * cin + ci) * k + j];
        ggml_backend_tensor_set(ordered[i], out.data(), 0, out.size() * sizeof(float));
        time_ordered_[todo[i]] = ordered[i];
    }
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
    return mish(ctx, layer_norm(ctx, causal_conv(ctx, x, cw, cb), lw, lb, &ln_eps_, on_cpu_), on_cpu_);
}

ggml_tensor* CfmEstimator::causal_conv(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b) const {
    const int k = static_cast<int>(w->ne[0]) - 1;
    ggml_tensor* left = tap_ && k > 0 ? tap_conv_left(ctx, x, k) : nullptr;  // a stream prefix's context
    const auto ordered = time_ordered_.find(w);
    if (ordered != time_ordered_.end()) {
        ggml_tensor* in = left ? ggml_concat(ctx, left, x, 1) : x;
        if (ggml_tensor* y = causal_conv_product(ctx, ordered->second, in, w->ne[0], products_, left != nullptr))
            return b ? ggml_add(ctx, y, b) : y;
    }
    return causal_conv1d_ct(ctx, x, w, b, products_, left);
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
    ggml_tensor* h = layer_norm(ctx, x, b.n1_w, b.n1_b, &ln_eps_, on_cpu_);
    ggml_tensor *q, *k, *v;  // [A, T, B], rows contiguous
    if (b.qkv_w) {
        ggml_tensor* qkv = matmul(ctx, b.qkv_w, h, on_cpu_ ? products_ : CpuProducts::ggml);  // [3A, T, B]
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
    ggml_tensor* o = attention(ctx, heads(q), heads(k), heads(v), attention_products_);
    o = ggml_reshape_3d(ctx, o, D * H, T, B);  // result is [D, H, T, B]
    x = ggml_add(ctx, x, linear(ctx, o, b.o_w, b.o_b, products_));

    h = layer_norm(ctx, x, b.n3_w, b.n3_b, &ln_eps_, on_cpu_);
    h = linear(ctx, gelu_erf(ctx, linear(ctx, h, b.ff1_w, nullptr, products_), b.ff1_b, on_cpu_), b.ff2_w, b.ff2_b, products_);
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
std::vector<std::vector<float>> CfmEstimator::time_inputs(float t, float r) const {
    if (meanflow_) return {time_sinusoid(t), time_sinusoid(r)};
    return {time_sinusoid(t)};
}

ggml_tensor* CfmEstimator::time_embedding(ggml_context* ctx, GraphInputs& in, float t, float r) const {
    std::vector<std::vector<float>> times = time_inputs(t, r);
    ggml_tensor* temb = time_mlp(ctx, in.f32(ctx, std::move(times[0]), in_channels_));
    if (meanflow_) {
        ggml_tensor* remb = time_mlp(ctx, in.f32(ctx, std::move(times[1]), in_channels_));
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

}  // namespace cbs
