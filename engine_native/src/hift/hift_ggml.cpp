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
    : hp_(HiftHparams::from(mf)), backend_(backend), own_(mf.tensors().size() + 16), runner_(backend, 8192) {
    const HiftLayers layers = HiftLayers::from(mf, hp_);
    for (const HiftConvLayer& c : layers.f0_convs) f0_convs_.push_back(conv(mf, c));
    f0_cls_w_ = weight(mf, layers.f0_cls_w);
    f0_cls_b_ = weight(mf, layers.f0_cls_b);
    conv_pre_ = conv(mf, layers.conv_pre);

    // ups[i]: ConvTranspose1d(Cin, Cout, K, s, padding (K - s) / 2). Output frame q s + r
    // is sum_j x[q - j] W[:, :, j s + r]: for each phase r a Conv1d of J taps over x
    // padded by J - 1 in front. Phase weights ne [J, Cin, s * Cout] (channel co * s + r),
    // tap j' = J - 1 - j (im2col reads x[q + j' - (J - 1)]), zero past K.
    for (const HiftUpLayer& l : layers.ups) {
        const int s = l.stride, K = l.K;
        const int64_t cin = l.cin, cout = l.cout;
        const std::vector<float> src = mf.read_f32(l.w);  // [Cin][Cout][K]
        Up u;
        u.K = K;
        u.stride = s;
        u.pad = l.pad;
        u.J = (K + s - 1) / s;
        u.cout = l.cout;
        std::vector<float> w(static_cast<size_t>(u.J * cin * s * cout), 0.0f);
        for (int64_t ci = 0; ci < cin; ++ci)
            for (int64_t co = 0; co < cout; ++co)
                for (int k = 0; k < K; ++k) {
                    const int j = k / s, r = k % s;
                    w[(u.J - 1 - j) + u.J * (ci + cin * (r + s * co))] = src[(ci * cout + co) * K + k];
                }
        u.w = own_.add(std::move(w), {u.J, cin, s * cout});
        u.b = ggml_reshape_2d(own_.context(), weight(mf, l.b), 1, cout);
        ups_.push_back(u);
    }

    for (size_t i = 0; i < layers.source_downs.size(); ++i) {
        source_downs_.push_back(conv(mf, layers.source_downs[i]));
        source_resblocks_.push_back(resblock(mf, layers.source_resblocks[i]));
    }
    for (const HiftResBlockLayers& rb : layers.resblocks) resblocks_.push_back(resblock(mf, rb));

    // conv_post, in two halves (magnitude, phase), output channel fastest for the ISTFT.
    const int nb = hp_.n_fft / 2 + 1;
    const int64_t ch = layers.conv_post.cin;
    post_K_ = layers.conv_post.K;
    const std::vector<float> pw = mf.read_f32(layers.conv_post.w);
    const std::vector<float> pb = mf.read_f32(layers.conv_post.b);
    const size_t half = static_cast<size_t>(post_K_ * ch * nb);
    post_mag_w_ = own_.add({pw.begin(), pw.begin() + half}, {post_K_ * ch, nb});
    post_ph_w_ = own_.add({pw.begin() + half, pw.end()}, {post_K_ * ch, nb});
    post_mag_b_ = own_.add({pb.begin(), pb.begin() + nb}, {nb, 1});
    post_ph_b_ = own_.add({pb.begin() + nb, pb.end()}, {nb, 1});

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
    dft_ = own_.add(std::move(fwd), {N, 1, 2 * nb});
    idft_ = own_.add(std::move(inv), {2 * nb, N});

    if (!own_.upload(backend_))
        throw DeviceError(std::string("not enough memory for the HiFT weights on ") + ggml_backend_name(backend_));
}

HiftGgml::~HiftGgml() = default;

// The model's tensor when it is F32 in a buffer of this device, else an F32 copy here.
ggml_tensor* HiftGgml::weight(const ModelFile& mf, ggml_tensor* t) {
    if (t->type == GGML_TYPE_F32 && t->buffer && ggml_backend_supports_buft(backend_, ggml_backend_buffer_get_type(t->buffer)))
        return t;
    return own_.add(mf.read_f32(t), {t->ne[0], t->ne[1], t->ne[2], t->ne[3]});
}

HiftGgml::Conv HiftGgml::conv(const ModelFile& mf, const HiftConvLayer& l) {
    Conv c;
    c.w = weight(mf, l.w);
    c.b = weight(mf, l.b);
    c.stride = l.stride;
    c.pad = l.pad;
    c.dil = l.dil;
    return c;
}

HiftGgml::Snake HiftGgml::snake(const ModelFile& mf, const ggml_tensor* alpha_tensor) {
    std::vector<float> alpha = mf.read_f32(alpha_tensor), inv(alpha.size());
    for (size_t i = 0; i < alpha.size(); ++i) inv[i] = 1.0f / (alpha[i] + 1e-9f);  // as hift.cpp (torch's float32)
    const auto channels = static_cast<int64_t>(alpha.size());
    return {own_.add(std::move(alpha), {1, channels}), own_.add(std::move(inv), {1, channels})};
}

HiftGgml::ResBlock HiftGgml::resblock(const ModelFile& mf, const HiftResBlockLayers& l) {
    ResBlock rb;
    for (size_t i = 0; i < l.convs1.size(); ++i) {
        rb.convs1.push_back(conv(mf, l.convs1[i]));
        rb.convs2.push_back(conv(mf, l.convs2[i]));
        rb.act1.push_back(snake(mf, l.alpha1[i]));
        rb.act2.push_back(snake(mf, l.alpha2[i]));
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
    hp_.check_decode(T, n_source);
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
