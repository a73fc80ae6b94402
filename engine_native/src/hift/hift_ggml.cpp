#include "hift/hift_ggml.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/backend.h"
#include "core/window.h"

namespace cbs {

// ---------------------------------------------------------------------------
// Weights
// ---------------------------------------------------------------------------

HiftGgml::HiftGgml(const ModelFile& mf, ggml_backend_t backend)
    : hp_(HiftHparams::from(mf)), backend_(backend), runner_(backend, 8192) {
    const size_t n_tensors = mf.tensors().size() + 16;
    own_ctx_ = ggml_init({ggml_tensor_overhead() * n_tensors, nullptr, true});
    auto t = [&](const std::string& name) { return mf.tensor("hift." + name); };
    const size_t n_up = hp_.upsample_rates.size();

    for (int i = 0; mf.find_tensor("hift.f0_predictor.condnet." + std::to_string(i) + ".weight"); i += 2) {
        const std::string name = "f0_predictor.condnet." + std::to_string(i);
        const int K = static_cast<int>(t(name + ".weight")->ne[0]);
        const int64_t cin = f0_convs_.empty() ? -1 : f0_convs_.back().w->ne[2];
        f0_convs_.push_back(conv(mf, name, 1, K / 2, 1, {K, cin, -1}));
    }
    if (f0_convs_.empty()) throw ModelError(mf.path() + ": no HiFT f0 predictor");
    hp_.in_channels = static_cast<int>(t("conv_pre.weight")->ne[1]);
    const int64_t cc = f0_convs_.back().w->ne[2];
    if (f0_convs_[0].w->ne[1] != hp_.in_channels) throw ModelError(mf.path() + ": HiFT f0 predictor shapes disagree");
    f0_cls_w_ = weight(mf, "hift.f0_predictor.classifier.weight", {cc, 1});
    f0_cls_b_ = weight(mf, "hift.f0_predictor.classifier.bias", {1});

    const int k_pre = static_cast<int>(t("conv_pre.weight")->ne[0]);
    conv_pre_ = conv(mf, "conv_pre", 1, k_pre / 2, 1, {k_pre, hp_.in_channels, hp_.base_channels});

    // ups[i]: ConvTranspose1d(Cin, Cout, K, s, padding (K - s) / 2). Output frame q s + r
    // is sum_j x[q - j] W[:, :, j s + r]: for each phase r a Conv1d of J taps over x
    // padded by J - 1 in front. Phase weights ne [J, Cin, s * Cout] (channel co * s + r),
    // tap j' = J - 1 - j (im2col reads x[q + j' - (J - 1)]), zero past K.
    for (size_t i = 0; i < n_up; ++i) {
        const std::string name = "hift.ups." + std::to_string(i);
        const int s = hp_.upsample_rates[i], K = hp_.upsample_kernel_sizes[i];
        const int64_t cin = hp_.base_channels >> i, cout = hp_.base_channels >> (i + 1);
        const std::vector<float> src = mf.read_f32(mf.tensor(name + ".weight", {K, cout, cin}));  // [Cin][Cout][K]
        if (K < s) throw ModelError(mf.path() + ": " + name + " has a kernel shorter than its stride");
        Up u;
        u.K = K;
        u.stride = s;
        u.pad = (K - s) / 2;
        u.J = (K + s - 1) / s;
        u.cout = static_cast<int>(cout);
        std::vector<float> w(static_cast<size_t>(u.J * cin * s * cout), 0.0f);
        for (int64_t ci = 0; ci < cin; ++ci)
            for (int64_t co = 0; co < cout; ++co)
                for (int k = 0; k < K; ++k) {
                    const int j = k / s, r = k % s;
                    w[(u.J - 1 - j) + u.J * (ci + cin * (r + s * co))] = src[(ci * cout + co) * K + k];
                }
        u.w = upload(std::move(w), {u.J, cin, s * cout});
        u.b = ggml_reshape_2d(own_ctx_, weight(mf, name + ".bias", {cout}), 1, cout);
        ups_.push_back(u);
    }

    const std::vector<int64_t> cum = hp_.source_down_strides();
    for (size_t i = 0; i < n_up; ++i) {
        const int u = static_cast<int>(cum[i]);
        const std::string name = "source_downs." + std::to_string(i);
        source_downs_.push_back(conv(mf, name, u, u == 1 ? 0 : u / 2, 1, {u == 1 ? 1 : 2 * u, hp_.n_fft + 2, ups_[i].cout}));
        source_resblocks_.push_back(resblock(mf, "source_resblocks." + std::to_string(i),
                                             hp_.source_resblock_kernel_sizes[i], hp_.source_resblock_dilations,
                                             ups_[i].cout));
    }
    for (size_t i = 0; i < n_up; ++i)
        for (size_t j = 0; j < hp_.resblock_kernel_sizes.size(); ++j)
            resblocks_.push_back(resblock(mf, "resblocks." + std::to_string(i * hp_.resblock_kernel_sizes.size() + j),
                                          hp_.resblock_kernel_sizes[j], hp_.resblock_dilations, ups_[i].cout));

    // conv_post, in two halves (magnitude, phase), output channel fastest for the ISTFT.
    const int nb = hp_.n_fft / 2 + 1;
    const int64_t ch = ups_.back().cout;
    post_K_ = static_cast<int>(t("conv_post.weight")->ne[0]);
    const std::vector<float> pw = mf.read_f32(mf.tensor("hift.conv_post.weight", {post_K_, ch, 2 * nb}));
    const std::vector<float> pb = mf.read_f32(mf.tensor("hift.conv_post.bias", {2 * nb}));
    const size_t half = static_cast<size_t>(post_K_ * ch * nb);
    post_mag_w_ = upload({pw.begin(), pw.begin() + half}, {post_K_ * ch, nb});
    post_ph_w_ = upload({pw.begin() + half, pw.end()}, {post_K_ * ch, nb});
    post_mag_b_ = upload({pb.begin(), pb.begin() + nb}, {nb, 1});
    post_ph_b_ = upload({pb.begin() + nb, pb.end()}, {nb, 1});

    // The STFT's DFT matrices with the periodic Hann window (as hift/stft.cpp).
    const int N = hp_.n_fft;
    if (N % hp_.hop != 0) throw ModelError(mf.path() + ": the HiFT graph needs istft_n_fft to be a multiple of istft_hop");
    const std::vector<float> win = hann_window(N, true);
    window_.assign(win.begin(), win.end());
    std::vector<float> fwd(static_cast<size_t>(N * 2 * nb)), inv(static_cast<size_t>(2 * nb * N), 0.0f);
    for (int i = 0; i < N; ++i)
        for (int k = 0; k < nb; ++k) {
            const double a = 2.0 * M_PI * double(int64_t{k} * i % N) / N, w = window_[i];
            fwd[i + N * k] = static_cast<float>(w * std::cos(a));
            fwd[i + N * (nb + k)] = static_cast<float>(-w * std::sin(a));
            const bool edge = k == 0 || k == nb - 1;  // DC and Nyquist: once, imaginary part dropped
            const double c = (edge ? 1.0 : 2.0) * w / N;
            inv[k + 2 * nb * i] = static_cast<float>(c * std::cos(a));
            inv[nb + k + 2 * nb * i] = edge ? 0.0f : static_cast<float>(-c * std::sin(a));
        }
    dft_ = upload(std::move(fwd), {N, 1, 2 * nb});
    idft_ = upload(std::move(inv), {2 * nb, N});

    own_buf_ = ggml_backend_alloc_ctx_tensors(own_ctx_, backend_);
    if (!own_buf_) throw DeviceError(std::string("not enough memory for the HiFT weights on ") + ggml_backend_name(backend_));
    for (auto& [tensor, data] : pending_) ggml_backend_tensor_set(tensor, data.data(), 0, ggml_nbytes(tensor));
    pending_.clear();
    pending_.shrink_to_fit();
}

HiftGgml::~HiftGgml() {
    if (own_buf_) ggml_backend_buffer_free(own_buf_);
    if (own_ctx_) ggml_free(own_ctx_);
}

ggml_tensor* HiftGgml::upload(std::vector<float> data, const std::vector<int64_t>& ne) {
    int64_t n[4] = {1, 1, 1, 1};
    std::copy(ne.begin(), ne.end(), n);
    ggml_tensor* t = ggml_new_tensor(own_ctx_, GGML_TYPE_F32, static_cast<int>(ne.size()), n);
    pending_.emplace_back(t, std::move(data));
    return t;
}

// The model's tensor when it is F32 in a buffer of this device, else an F32 copy here.
ggml_tensor* HiftGgml::weight(const ModelFile& mf, const std::string& name, const std::vector<int64_t>& ne) {
    ggml_tensor* t = mf.tensor(name, ne);
    if (t->type == GGML_TYPE_F32 && t->buffer && ggml_backend_supports_buft(backend_, ggml_backend_buffer_get_type(t->buffer)))
        return t;
    return upload(mf.read_f32(t), {t->ne[0], t->ne[1], t->ne[2], t->ne[3]});
}

HiftGgml::Conv HiftGgml::conv(const ModelFile& mf, const std::string& name, int stride, int pad, int dil,
                              const std::vector<int64_t>& ne) {
    Conv c;
    c.w = weight(mf, "hift." + name + ".weight", ne);
    const int64_t cout = c.w->ne[2];
    c.b = weight(mf, "hift." + name + ".bias", {cout});
    c.stride = stride;
    c.pad = pad;
    c.dil = dil;
    return c;
}

HiftGgml::Snake HiftGgml::snake(const ModelFile& mf, const std::string& name, int64_t channels) {
    std::vector<float> alpha = mf.read_f32(mf.tensor("hift." + name + ".alpha", {channels})), inv(alpha.size());
    for (size_t i = 0; i < alpha.size(); ++i) inv[i] = 1.0f / (alpha[i] + 1e-9f);  // as hift.cpp (torch's float32)
    return {upload(std::move(alpha), {1, channels}), upload(std::move(inv), {1, channels})};
}

HiftGgml::ResBlock HiftGgml::resblock(const ModelFile& mf, const std::string& prefix, int kernel,
                                      const std::vector<int>& dilations, int64_t channels) {
    ResBlock rb;
    for (size_t i = 0; i < dilations.size(); ++i) {
        const std::string n = std::to_string(i);
        const int d = dilations[i];
        rb.convs1.push_back(conv(mf, prefix + ".convs1." + n, 1, (kernel * d - d) / 2, d, {kernel, channels, channels}));
        rb.convs2.push_back(conv(mf, prefix + ".convs2." + n, 1, (kernel - 1) / 2, 1, {kernel, channels, channels}));
        rb.act1.push_back(snake(mf, prefix + ".activations1." + n, channels));
        rb.act2.push_back(snake(mf, prefix + ".activations2." + n, channels));
    }
    return rb;
}

// ---------------------------------------------------------------------------
// Graph pieces (ne [L, C], time fastest)
// ---------------------------------------------------------------------------

// a b, asked for in full F32: CUDA's default for F32 products is TF32 tensor-op math,
// ~1e-3 relative error through HiFT's depth (patches/0002 makes ggml-cuda honour this).
static ggml_tensor* mul_mat(ggml_context* ctx, ggml_tensor* a, ggml_tensor* b) {
    ggml_tensor* y = ggml_mul_mat(ctx, a, b);
    ggml_mul_mat_set_prec(y, GGML_PREC_F32);
    return y;
}

// Conv1d as core/graph_helpers.h conv1d (F32 im2col), its product in full F32; b may be null.
static ggml_tensor* conv1d_f32(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, int stride, int pad,
                               int dil) {
    ggml_tensor* cols = ggml_im2col(ctx, w, x, stride, 0, pad, 0, dil, 0, false, GGML_TYPE_F32);  // [K*Cin, L_out]
    ggml_tensor* y = mul_mat(ctx, cols, ggml_reshape_2d(ctx, w, w->ne[0] * w->ne[1], w->ne[2]));   // [L_out, Cout]
    return b ? ggml_add(ctx, y, ggml_reshape_2d(ctx, b, 1, b->ne[0])) : y;
}

ggml_tensor* HiftGgml::apply(ggml_context* ctx, const Conv& c, ggml_tensor* x) const {
    const int64_t K = c.w->ne[0];
    if ((x->ne[0] + 2 * c.pad - int64_t(c.dil) * (K - 1) - 1) / c.stride + 1 < 1)
        throw EngineError("HiFT input is too short for its convolutions");
    return conv1d_f32(ctx, x, c.w, c.b, c.stride, c.pad, c.dil);
}

// Snake: x + 1 / (alpha + 1e-9) * sin(alpha x)^2.
ggml_tensor* HiftGgml::apply(ggml_context* ctx, const Snake& s, ggml_tensor* x) const {
    return ggml_add(ctx, x, ggml_mul(ctx, ggml_sqr(ctx, ggml_sin(ctx, ggml_mul(ctx, x, s.alpha))), s.inv_alpha));
}

ggml_tensor* HiftGgml::apply(ggml_context* ctx, const ResBlock& rb, ggml_tensor* x) const {
    for (size_t i = 0; i < rb.convs1.size(); ++i) {
        ggml_tensor* h = apply(ctx, rb.convs1[i], apply(ctx, rb.act1[i], x));
        x = ggml_add(ctx, x, apply(ctx, rb.convs2[i], apply(ctx, rb.act2[i], h)));
    }
    return x;
}

// ConvTranspose1d (+ bias), then ReflectionPad1d((1, 0)) when reflect_first.
ggml_tensor* HiftGgml::apply(ggml_context* ctx, const Up& u, ggml_tensor* x, bool reflect_first) const {
    const int64_t L = x->ne[0], Lq = L + u.J - 1, s = u.stride;
    ggml_tensor* y = conv1d_f32(ctx, x, u.w, nullptr, 1, u.J - 1, 1);  // [Lq, s * Cout]
    y = ggml_cont(ctx, ggml_permute(ctx, ggml_reshape_3d(ctx, y, Lq, s, u.cout), 1, 0, 2, 3));  // [s, Lq, Cout]
    const int64_t T = (L - 1) * s + u.K - 2 * u.pad;
    y = ggml_view_2d(ctx, y, T, u.cout, y->nb[2], u.pad * sizeof(float));
    y = ggml_add(ctx, y, u.b);
    if (reflect_first) {
        if (T < 2) throw EngineError("HiFT input is too short for the reflection padding");
        y = ggml_concat(ctx, ggml_view_2d(ctx, y, 1, u.cout, y->nb[1], sizeof(float)), y, 0);
    }
    return y;
}


// ---------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------

std::vector<float> HiftGgml::f0(const float* mel, int64_t T) {
    hp_.check_mel(T);
    ggml_context* ctx = runner_.begin();
    GraphInputs inputs;
    // mel [C][T] row-major is ne [T, C]: time fastest already.
    ggml_tensor* x = inputs.f32(ctx, std::vector<float>(mel, mel + T * hp_.in_channels), T, hp_.in_channels);
    for (const Conv& c : f0_convs_) x = ggml_elu(ctx, apply(ctx, c, x));
    // classifier: Linear(Cc, 1) over every frame, then abs
    x = mul_mat(ctx, f0_cls_w_, ggml_cont(ctx, ggml_transpose(ctx, x)));  // [1, T]
    x = ggml_abs(ctx, ggml_add(ctx, x, f0_cls_b_));
    return runner_.compute(x, inputs);
}

std::vector<float> HiftGgml::decode(const float* mel, int64_t T, const float* source, int64_t n_source) {
    hp_.check_mel(T);
    const int64_t spf = hp_.samples_per_frame();
    if (n_source != T * spf)
        throw EngineError("source has " + std::to_string(n_source) + " samples; a mel of " + std::to_string(T) +
                          " frames needs " + std::to_string(T * spf) + " (" + std::to_string(spf) + " per frame)");
    const int N = hp_.n_fft, hop = hp_.hop, pad = N / 2, nb = N / 2 + 1;
    if (n_source <= pad) throw EngineError("source is too short for the STFT's reflection padding");
    const int64_t n_frames = 1 + n_source / hop;

    // The source reflection-padded by n_fft / 2 each side (torch.stft center=True).
    std::vector<float> padded(static_cast<size_t>(n_source + 2 * pad));
    for (int64_t i = 0; i < n_source + 2 * pad; ++i) {
        int64_t j = i - pad;
        if (j < 0) j = -j;
        if (j >= n_source) j = 2 * (n_source - 1) - j;
        padded[i] = source[j];
    }
    // 1 / the ISTFT's window envelope over the samples kept (double, as stft.cpp). Inside
    // (p >= N and p / hop <= n_frames - 1) sample p sums the same window taps in the same
    // order as any p' with p' % hop == p % hop: each residue's value is computed once there.
    const int64_t n_out = hop * (n_frames - 1);
    std::vector<float> inv_env(static_cast<size_t>(n_out));
    auto envelope = [&](int64_t p) {
        double e = 0.0;
        for (int64_t m = std::max<int64_t>(0, (p - N) / hop); m <= std::min(n_frames - 1, p / hop); ++m)
            if (p - m * hop < N) e += window_[p - m * hop] * window_[p - m * hop];
        if (std::abs(e) < 1e-11) throw EngineError("HiFT ISTFT window envelope is zero (n_fft/hop inconsistent)");
        return static_cast<float>(1.0 / e);
    };
    std::vector<float> inside(static_cast<size_t>(hop));
    std::vector<char> inside_set(static_cast<size_t>(hop), 0);
    for (int64_t i = 0; i < n_out; ++i) {
        const int64_t p = i + pad;
        if (p >= N && p / hop <= n_frames - 1) {
            const int64_t r = p % hop;
            if (!inside_set[r]) {
                inside[r] = envelope(p);
                inside_set[r] = 1;
            }
            inv_env[i] = inside[r];
        } else {
            inv_env[i] = envelope(p);
        }
    }

    ggml_context* ctx = runner_.begin();
    GraphInputs inputs;
    ggml_tensor* in = inputs.f32(ctx, std::vector<float>(mel, mel + T * hp_.in_channels), T, hp_.in_channels);
    ggml_tensor* src = inputs.f32(ctx, std::move(padded), n_source + 2 * pad, 1);
    ggml_tensor* env = inputs.f32(ctx, std::move(inv_env), n_out, 1);

    // _stft: frames (im2col, stride hop) times the windowed DFT: ne [n_frames, n_fft + 2].
    ggml_tensor* frames = ggml_im2col(ctx, dft_, src, hop, 0, 0, 0, 1, 0, false, GGML_TYPE_F32);  // [N, n_frames]
    ggml_tensor* s_stft = mul_mat(ctx, frames, ggml_reshape_2d(ctx, dft_, N, 2 * nb));

    const size_t n_up = ups_.size(), n_k = hp_.resblock_kernel_sizes.size();
    ggml_tensor* x = ggml_leaky_relu(ctx, apply(ctx, conv_pre_, in), hp_.lrelu_slope, false);
    for (size_t i = 0; i < n_up; ++i) {
        ggml_tensor* si = apply(ctx, source_resblocks_[i], apply(ctx, source_downs_[i], s_stft));
        x = apply(ctx, ups_[i], x, i == n_up - 1);
        if (x->ne[0] != si->ne[0] || x->ne[1] != si->ne[1])
            throw EngineError("HiFT source branch length " + std::to_string(si->ne[0]) + " != " + std::to_string(x->ne[0]) +
                              " (metadata inconsistent with the weights)");
        x = ggml_add(ctx, x, si);
        ggml_tensor* xs = nullptr;
        for (size_t j = 0; j < n_k; ++j) {
            ggml_tensor* r = apply(ctx, resblocks_[i * n_k + j], x);
            xs = xs ? ggml_add(ctx, xs, r) : r;
        }
        // torch's default slope 0.01 before conv_post, lrelu_slope between stages
        x = ggml_leaky_relu(ctx, ggml_scale(ctx, xs, 1.0f / static_cast<float>(n_k)),
                            i + 1 < n_up ? hp_.lrelu_slope : 0.01f, false);
    }
    if (x->ne[0] != n_frames) throw EngineError("HiFT output frames disagree with the source STFT (metadata inconsistent)");

    // conv_post (channel fastest), magnitude min(exp, 100) and phase sin, the real and
    // imaginary parts ne [n_fft + 2, n_frames], the inverse DFT per frame [n_fft, n_frames].
    ggml_tensor* cols = ggml_im2col(ctx, ggml_reshape_3d(ctx, post_mag_w_, post_K_, x->ne[1], nb), x, 1, 0, post_K_ / 2,
                                    0, 1, 0, false, GGML_TYPE_F32);  // [K * C, n_frames]
    ggml_tensor* mag = ggml_clamp(ctx, ggml_exp(ctx, ggml_add(ctx, mul_mat(ctx, post_mag_w_, cols), post_mag_b_)),
                                  0.0f, 100.0f);
    ggml_tensor* ph = ggml_sin(ctx, ggml_add(ctx, mul_mat(ctx, post_ph_w_, cols), post_ph_b_));
    ggml_tensor* spec = ggml_concat(ctx, ggml_mul(ctx, mag, ggml_cos(ctx, ph)), ggml_mul(ctx, mag, ggml_sin(ctx, ph)), 0);
    ggml_tensor* fr = mul_mat(ctx, idft_, spec);  // [N, n_frames]
    // Overlap-add: frame m's samples j hop .. (j + 1) hop land in block m + j.
    const int R = N / hop;
    ggml_tensor* y = nullptr;
    // Each part padded as one row: ggml-cuda's pad launches a block row per ne1, at most
    // 65535 (n_frames passes that at 10.9 s of audio).
    for (int j = 0; j < R; ++j) {
        ggml_tensor* part = ggml_cont(ctx, ggml_view_2d(ctx, fr, hop, n_frames, fr->nb[1], j * hop * sizeof(float)));
        part = ggml_pad_ext(ctx, ggml_reshape_1d(ctx, part, hop * n_frames), j * hop, (R - 1 - j) * hop, 0, 0, 0, 0, 0,
                            0);  // [hop (n_frames + R - 1)]
        y = y ? ggml_add(ctx, y, part) : part;
    }
    y = ggml_view_1d(ctx, ggml_reshape_1d(ctx, y, ggml_nelements(y)), n_out, pad * sizeof(float));
    y = ggml_clamp(ctx, ggml_mul(ctx, y, env), -hp_.audio_limit, hp_.audio_limit);
    return runner_.compute(y, inputs);
}

}  // namespace cbs
