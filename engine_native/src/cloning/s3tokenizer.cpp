#include "cloning/s3tokenizer.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/backend.h"
#include "core/graph_helpers.h"
#include "cpu/activations.h"
#include "cpu/attention.h"

namespace cbs {

namespace {
// Constants of the reference code itself (s3tokenizer.model_v2), not of the weights.
constexpr float kLayerNormEps = 1e-5f;
constexpr float kRopeTheta = 10000.0f;
constexpr int kRopePositions = 2048;          // AudioEncoderV2 precomputes 2048 positions
constexpr float kFsqScale = 0.9990000128746033f;
constexpr int kWindowSeconds = 30, kOverlapSeconds = 4;  // long-audio sliding windows
}  // namespace

S3TokenizerV2::S3TokenizerV2(const ModelFile& mf, ggml_backend_t backend)
    : logmel_(mf), runner_(backend), on_cpu_(backend_is_cpu(backend)), products_(on_cpu_) {
    auto i = [&](const char* k) { return static_cast<int>(mf.get_int(std::string("chatterbox.s3tok.") + k)); };
    n_mels_ = i("n_mels");
    n_state_ = i("n_state");
    n_head_ = i("n_head");
    fsmn_kernel_ = i("fsmn_kernel");
    codebook_size_ = i("codebook_size");
    const int sr = i("sample_rate"), hop = i("hop"), token_rate = i("token_rate");
    if (n_head_ <= 0 || n_state_ % n_head_ != 0 || (n_state_ / n_head_) % 2 != 0 || hop <= 0)
        throw ModelError(mf.path() + ": inconsistent S3Tokenizer dimensions");
    head_dim_ = n_state_ / n_head_;
    window_frames_ = kWindowSeconds * sr / hop;
    stride_frames_ = window_frames_ - kOverlapSeconds * sr / hop;
    overlap_tokens_ = (kOverlapSeconds / 2) * token_rate;

    auto f32 = [&](ggml_tensor* w) {  // the f32 convolutions reshape their kernels
        if (w->type != GGML_TYPE_F32) throw ModelError(mf.path() + ": " + ggml_get_name(w) + " must be F32");
        return w;
    };
    auto ts = [&](const std::string& n, std::vector<int64_t> ne) { return mf.tensor("s3tok." + n, ne); };
    const int64_t S = n_state_;
    conv1_w_ = f32(ts("encoder.conv1.weight", {3, n_mels_, S}));
    conv1_b_ = ts("encoder.conv1.bias", {S});
    conv2_w_ = f32(ts("encoder.conv2.weight", {3, S, S}));
    conv2_b_ = ts("encoder.conv2.bias", {S});
    proj_w_ = ts("quantizer._codebook.project_down.weight", {S, -1});
    proj_b_ = ts("quantizer._codebook.project_down.bias", {proj_w_->ne[1]});
    if (conv1_w_->ne[0] != 3 || conv2_w_->ne[0] != 3 || conv1_w_->ne[1] != n_mels_ || conv1_w_->ne[2] != n_state_ ||
        proj_w_->ne[0] != n_state_)
        throw ModelError(mf.path() + ": S3Tokenizer tensor shapes do not match its metadata");
    n_digits_ = static_cast<int>(proj_w_->ne[1]);
    // tanh * 0.999 rounds to {-1, 0, 1}: three levels per digit.
    level_ = 3;
    if (std::pow(3.0, n_digits_) != static_cast<double>(codebook_size_))
        throw ModelError(mf.path() + ": S3Tokenizer codebook size is not 3^" + std::to_string(n_digits_));

    const int n_layer = i("n_layer");
    for (int l = 0; l < n_layer; ++l) {
        const std::string p = "encoder.blocks." + std::to_string(l) + ".";
        const int64_t M = ts(p + "mlp.0.weight", {S, -1})->ne[1];
        Block b{ts(p + "attn_ln.weight", {S}), ts(p + "attn_ln.bias", {S}), ts(p + "attn.query.weight", {S, S}),
                ts(p + "attn.query.bias", {S}), ts(p + "attn.key.weight", {S, S}), ts(p + "attn.value.weight", {S, S}),
                ts(p + "attn.value.bias", {S}), ts(p + "attn.out.weight", {S, S}), ts(p + "attn.out.bias", {S}),
                f32(ts(p + "attn.fsmn_block.weight", {fsmn_kernel_, 1, S})), ts(p + "mlp_ln.weight", {S}),
                ts(p + "mlp_ln.bias", {S}), ts(p + "mlp.0.weight", {S, M}), ts(p + "mlp.0.bias", {M}),
                ts(p + "mlp.2.weight", {M, S}), ts(p + "mlp.2.bias", {S})};
        if (b.fsmn_w->ne[0] != fsmn_kernel_ || b.fsmn_w->ne[2] != n_state_)
            throw ModelError(mf.path() + ": S3Tokenizer FSMN kernel does not match its metadata");
        blocks_.push_back(b);
    }
    // A quantised model's tokens take the fast products as its S3Gen does: within ~1e-5 of
    // f32 per product, so a token flips only where an FSQ input lies that close to a rounding
    // boundary (the reference itself has such ties). An f32 model keeps the exact products.
    products_ = s3gen_products(mf, backend);
}

// Conv1d(kernel 3, stride 2, padding 1) of x [L, C_in] (time fastest) via im2col, the kernel
// as the product's weight (the engine's products: AMX tiles in the fast ones): the result
// comes out channels-first [C_out, L_out].
static ggml_tensor* conv_stem(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, CpuProducts how) {
    ggml_tensor* cols = ggml_im2col(ctx, w, x, 2, 0, 1, 0, 1, 0, false, GGML_TYPE_F32);  // [K*C_in, L_out]
    return ggml_add(ctx, matmul(ctx, ggml_reshape_2d(ctx, w, w->ne[0] * w->ne[1], w->ne[2]), cols, how), b);
}

// NEOX-style rotation (rotate_half): x * cos + [-x2, x1] * sin, written as
// x * cos + [x2, x1] * sin_signed with sin_signed's first half negated.
ggml_tensor* S3TokenizerV2::rope(ggml_context* ctx, ggml_tensor* x, ggml_tensor* cos, ggml_tensor* sin) const {
    const int64_t half = head_dim_ / 2;
    ggml_tensor* x1 = ggml_view_3d(ctx, x, half, x->ne[1], x->ne[2], x->nb[1], x->nb[2], 0);
    ggml_tensor* x2 = ggml_view_3d(ctx, x, half, x->ne[1], x->ne[2], x->nb[1], x->nb[2], half * sizeof(float));
    return ggml_add(ctx, ggml_mul(ctx, x, cos), ggml_mul(ctx, ggml_concat(ctx, x2, x1, 0), sin));
}

// ResidualAttentionBlock on x [C, T]: pre-LN FSMN attention, then pre-LN GELU MLP.
ggml_tensor* S3TokenizerV2::block(ggml_context* ctx, ggml_tensor* x, ggml_tensor* cos, ggml_tensor* sin,
                                  const Block& b) const {
    const int64_t T = x->ne[1], H = n_head_, D = head_dim_, C = n_state_, K = fsmn_kernel_;
    ggml_tensor* h = layer_norm(ctx, x, b.attn_ln_w, b.attn_ln_b, &kLayerNormEps, on_cpu_);
    ggml_tensor* q = linear(ctx, h, b.q_w, b.q_b, products_);
    ggml_tensor* k = linear(ctx, h, b.k_w, nullptr, products_);
    ggml_tensor* v = linear(ctx, h, b.v_w, b.v_b, products_);

    // FSMN memory: depth-wise conv (zero padded to keep T) over v, plus v. ssm_conv is a
    // per-channel f32 cross-correlation over time-fastest rows that returns [C, T].
    ggml_tensor* vt = ggml_pad_ext(ctx, ggml_cont(ctx, ggml_transpose(ctx, v)), (K - 1) / 2, K - 1 - (K - 1) / 2, 0, 0,
                                   0, 0, 0, 0);  // [T + K - 1, C]
    ggml_tensor* mem = ggml_ssm_conv(ctx, ggml_reshape_3d(ctx, vt, T + K - 1, C, 1), ggml_reshape_2d(ctx, b.fsmn_w, K, C));
    mem = ggml_add(ctx, ggml_reshape_2d(ctx, mem, C, T), v);

    // Attention over the whole segment through the engine's fused attention (scores, softmax
    // and values per head and block of queries: no T x T tensor, AMX tiles in the fast
    // products). The reference scales q and k by D^-1/4 each; here q alone by D^-1/2, the same
    // scores within rounding.
    auto heads = [&](ggml_tensor* t) { return ggml_permute(ctx, ggml_reshape_3d(ctx, t, D, H, T), 0, 2, 1, 3); };
    ggml_tensor* o = attention(ctx, heads(rope(ctx, ggml_reshape_3d(ctx, q, D, H, T), cos, sin)),
                               heads(rope(ctx, ggml_reshape_3d(ctx, k, D, H, T), cos, sin)), heads(v), products_);
    o = ggml_reshape_2d(ctx, o, C, T);  // [D, H, T]
    x = ggml_add(ctx, x, ggml_add(ctx, linear(ctx, o, b.out_w, b.out_b, products_), mem));

    h = layer_norm(ctx, x, b.mlp_ln_w, b.mlp_ln_b, &kLayerNormEps, on_cpu_);
    h = linear(ctx, gelu_erf(ctx, linear(ctx, h, b.fc1_w, nullptr, products_), b.fc1_b, on_cpu_), b.fc2_w, b.fc2_b, products_);
    return ggml_add(ctx, x, h);
}

std::vector<float> S3TokenizerV2::encode(const std::vector<float>& mel, int64_t n_frames, int64_t start, int64_t len) {
    const int64_t T1 = (len - 1) / 2 + 1, T = (T1 - 1) / 2 + 1;  // after the two stride-2 convs
    if (T > kRopePositions) throw EngineError("S3Tokenizer segment is longer than its position table");
    std::vector<float> seg(static_cast<size_t>(n_mels_) * len);
    for (int m = 0; m < n_mels_; ++m)
        std::copy_n(&mel[static_cast<size_t>(m) * n_frames + start], len, &seg[static_cast<size_t>(m) * len]);

    // RoPE tables [D, T] computed in float32 the way precompute_freqs_cis does.
    std::vector<float> cos_t(static_cast<size_t>(head_dim_) * T), sin_t(cos_t.size());
    const int half = head_dim_ / 2;
    for (int64_t p = 0; p < T; ++p)
        for (int j = 0; j < half; ++j) {
            const float freq = 1.0f / std::pow(kRopeTheta, static_cast<float>(2 * j) / static_cast<float>(head_dim_));
            const float a = static_cast<float>(p) * freq;
            const size_t o = static_cast<size_t>(p) * head_dim_;
            cos_t[o + j] = cos_t[o + j + half] = std::cos(a);
            sin_t[o + j] = -std::sin(a);  // rotate_half's negated half
            sin_t[o + j + half] = std::sin(a);
        }

    ggml_context* ctx = runner_.begin();
    GraphInputs in;
    ggml_tensor* x = in.f32(ctx, std::move(seg), len, n_mels_);  // [L, n_mels], time fastest
    x = gelu_erf(ctx, conv_stem(ctx, x, conv1_w_, conv1_b_, products_), on_cpu_);  // [C, L1]
    x = ggml_cont(ctx, ggml_transpose(ctx, x));                         // [L1, C]
    x = gelu_erf(ctx, conv_stem(ctx, x, conv2_w_, conv2_b_, products_), on_cpu_);  // [C, T]
    ggml_tensor* cos = ggml_reshape_3d(ctx, in.f32(ctx, std::move(cos_t), head_dim_, T), head_dim_, 1, T);
    ggml_tensor* sin = ggml_reshape_3d(ctx, in.f32(ctx, std::move(sin_t), head_dim_, T), head_dim_, 1, T);
    for (const Block& b : blocks_) x = block(ctx, x, cos, sin, b);
    return runner_.compute(linear(ctx, x, proj_w_, proj_b_, products_), in);  // [n_digits, T]
}

std::vector<float> S3TokenizerV2::projection(const std::vector<float>& wav16k, int max_len) {
    if (wav16k.empty()) throw EngineError("the speech tokenizer got empty audio");
    if (max_len == 0) throw EngineError("max_len must be positive (or negative for no limit)");
    int64_t n_frames = 0;
    const std::vector<float> mel = logmel_.compute(wav16k, &n_frames);  // throws on too short / NaN
    int64_t used = n_frames;
    if (max_len > 0) used = std::min<int64_t>(used, 4 * static_cast<int64_t>(max_len));  // 4 mel frames per token

    if (used <= window_frames_) return encode(mel, n_frames, 0, used);

    // Long audio: windows of 30 s every 26 s; keep each window's middle, dropping half of
    // the overlap (overlap_tokens_) on every inner edge, as merge_tokenized_segments does.
    std::vector<std::vector<float>> segments;
    for (int64_t start = 0; start < used; start += stride_frames_)
        segments.push_back(encode(mel, n_frames, start, std::min<int64_t>(window_frames_, used - start)));
    std::vector<float> merged;
    for (size_t s = 0; s < segments.size(); ++s) {
        const int64_t n = static_cast<int64_t>(segments[s].size()) / n_digits_;
        const int64_t l = std::min<int64_t>(s == 0 ? 0 : overlap_tokens_, n);
        const int64_t r = s + 1 == segments.size() ? n : std::max<int64_t>(n - overlap_tokens_, 0);
        if (l < r) merged.insert(merged.end(), segments[s].begin() + l * n_digits_, segments[s].begin() + r * n_digits_);
    }
    return merged;
}

std::vector<int32_t> S3TokenizerV2::tokens(const std::vector<float>& wav16k, int max_len) {
    const std::vector<float> proj = projection(wav16k, max_len);
    std::vector<int32_t> out(proj.size() / n_digits_);
    for (size_t t = 0; t < out.size(); ++t) {
        // FSQ: tanh, * 0.999, round half to even (torch.round) to {-1, 0, 1}, + 1, base-3 digits.
        int32_t token = 0, power = 1;
        for (int d = 0; d < n_digits_; ++d) {
            const float h = std::nearbyint(std::tanh(proj[t * n_digits_ + d]) * kFsqScale) + 1.0f;
            token += static_cast<int32_t>(h) * power;
            power *= level_;
        }
        out[t] = token;
    }
    return out;
}

}  // namespace cbs
