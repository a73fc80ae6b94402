#include "hift.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

namespace cbs {

// ---------------------------------------------------------------------------
// Hyperparameters
// ---------------------------------------------------------------------------

static std::vector<int> ints(const ModelFile& mf, const std::string& key) {
    std::vector<int> out;
    for (int64_t v : mf.get_int_array(key)) out.push_back(static_cast<int>(v));
    return out;
}

HiftHparams HiftHparams::from(const ModelFile& mf) {
    const std::string p = "chatterbox.hift.";
    auto i = [&](const char* k) { return static_cast<int>(mf.get_int(p + k)); };
    auto f = [&](const char* k) { return static_cast<float>(mf.get_float(p + k)); };
    HiftHparams hp;
    hp.sample_rate = i("sample_rate");
    hp.base_channels = i("base_channels");
    hp.nb_harmonics = i("nb_harmonics");
    hp.upsample_rates = ints(mf, p + "upsample_rates");
    hp.upsample_kernel_sizes = ints(mf, p + "upsample_kernel_sizes");
    hp.resblock_kernel_sizes = ints(mf, p + "resblock_kernel_sizes");
    hp.resblock_dilations = ints(mf, p + "resblock_dilations");
    hp.source_resblock_kernel_sizes = ints(mf, p + "source_resblock_kernel_sizes");
    hp.source_resblock_dilations = ints(mf, p + "source_resblock_dilations");
    hp.n_fft = i("istft_n_fft");
    hp.hop = i("istft_hop");
    hp.lrelu_slope = f("lrelu_slope");
    hp.audio_limit = f("audio_limit");
    const size_t n_up = hp.upsample_rates.size();
    bool ok = n_up > 0 && hp.upsample_kernel_sizes.size() == n_up && hp.source_resblock_kernel_sizes.size() == n_up &&
              !hp.resblock_kernel_sizes.empty() && !hp.resblock_dilations.empty() &&
              !hp.source_resblock_dilations.empty() && hp.n_fft >= 2 && hp.n_fft % 2 == 0 && hp.hop >= 1 &&
              hp.base_channels >= (1 << n_up);
    for (int r : hp.upsample_rates) ok = ok && r >= 1;
    if (!ok) throw EngineError(mf.path() + ": inconsistent HiFT metadata");
    return hp;
}

int64_t HiftHparams::samples_per_frame() const {
    int64_t n = hop;
    for (int r : upsample_rates) n *= r;
    return n;
}

// ---------------------------------------------------------------------------
// Weights
// ---------------------------------------------------------------------------
//
// Convolutions run as a sum over kernel taps in the channel-fastest layout: for a
// signal x ne [Cin, L] (padded in time), tap k reads the contiguous view of x that
// starts k*dilation frames in, and contributes W_k^T x with W_k ne [Cin, Cout]. Each
// tap is one ggml_mul_mat on contiguous operands (the fast sgemm path), with no
// im2col buffer; biases and the per-channel Snake parameters broadcast along rows.
// So each Conv1d weight (numpy [Cout, Cin, K], ne [K, Cin, Cout]) is stored once more
// re-ordered as ne [Cin, Cout, K]: tap k is the contiguous slice k.

Hift::Hift(const ModelFile& mf, ggml_backend_t backend) : hp_(HiftHparams::from(mf)), backend_(backend) {
    const size_t n_tensors = mf.tensors().size() + 16;
    own_ctx_ = ggml_init({ggml_tensor_overhead() * n_tensors, nullptr, true});
    auto t = [&](const std::string& name) { return mf.tensor("hift." + name); };
    const size_t n_up = hp_.upsample_rates.size();

    // f0 predictor: condnet.{0,2,4,...} Conv1d (ELU between), then a Linear classifier.
    for (int i = 0; mf.find_tensor("hift.f0_predictor.condnet." + std::to_string(i) + ".weight"); i += 2) {
        const std::string name = "f0_predictor.condnet." + std::to_string(i);
        const int K = static_cast<int>(t(name + ".weight")->ne[0]);
        f0_convs_.push_back(conv(mf, name, 1, K / 2, 1));  // Conv1d(kernel_size=3, padding=1)
    }
    if (f0_convs_.empty()) throw EngineError(mf.path() + ": no HiFT f0 predictor");
    f0_cls_w_ = f32_weight(mf, "hift.f0_predictor.classifier.weight");
    f0_cls_b_ = f32_weight(mf, "hift.f0_predictor.classifier.bias");
    hp_.in_channels = static_cast<int>(t("conv_pre.weight")->ne[1]);
    if (t("f0_predictor.condnet.0.weight")->ne[1] != hp_.in_channels ||
        f0_cls_w_->ne[0] != f0_convs_.back().w->ne[1] || ggml_nelements(f0_cls_b_) != 1)
        throw EngineError(mf.path() + ": HiFT f0 predictor shapes disagree");

    const int k_pre = static_cast<int>(t("conv_pre.weight")->ne[0]);
    conv_pre_ = conv(mf, "conv_pre", 1, k_pre / 2, 1);  // Conv1d(in, base, 7, 1, padding=3)
    if (conv_pre_.w->ne[1] != hp_.base_channels)
        throw EngineError(mf.path() + ": hift.conv_pre disagrees with chatterbox.hift.base_channels");

    // ups[i]: ConvTranspose1d(base/2^i, base/2^(i+1), k, u, padding=(k-u)/2), stored
    // transposed as ne [Cin, K*Cout] for mul_mat followed by ggml_col2im_1d.
    for (size_t i = 0; i < n_up; ++i) {
        const std::string name = "hift.ups." + std::to_string(i);
        const ggml_tensor* w = mf.tensor(name + ".weight");  // ne [K, Cout, Cin]
        const int u = hp_.upsample_rates[i], K = hp_.upsample_kernel_sizes[i];
        const int64_t cin = hp_.base_channels >> i, cout = hp_.base_channels >> (i + 1);
        if (w->ne[0] != K || w->ne[1] != cout || w->ne[2] != cin || K < u)
            throw EngineError(mf.path() + ": " + name + " shape disagrees with the HiFT metadata");
        std::vector<float> src = mf.read_f32(w), dst(src.size());
        for (int64_t ci = 0; ci < cin; ++ci)
            for (int64_t j = 0; j < K * cout; ++j) dst[j * cin + ci] = src[ci * K * cout + j];
        Up up;
        up.wt = ggml_new_tensor_2d(own_ctx_, GGML_TYPE_F32, cin, K * cout);
        pending_.emplace_back(up.wt, std::move(dst));
        up.b = f32_weight(mf, name + ".bias");
        up.stride = u;
        up.pad = (K - u) / 2;
        up.cout = static_cast<int>(cout);
        ups_.push_back(up);
    }

    // Source branch: downsample_rates = [1] + upsample_rates[::-1][:-1], cumulated and
    // reversed: source_downs[i] has stride u (kernel 2u, padding u/2; a 1x1 conv when u == 1).
    std::vector<int64_t> cum(n_up);
    {
        std::vector<int64_t> down(n_up);
        down[0] = 1;
        for (size_t i = 1; i < n_up; ++i) down[i] = hp_.upsample_rates[n_up - i];
        std::partial_sum(down.begin(), down.end(), cum.begin(), std::multiplies<int64_t>());
        std::reverse(cum.begin(), cum.end());
    }
    for (size_t i = 0; i < n_up; ++i) {
        const int u = static_cast<int>(cum[i]);
        const std::string name = "source_downs." + std::to_string(i);
        const int64_t K = t(name + ".weight")->ne[0];
        if (K != (u == 1 ? 1 : 2 * u) || t(name + ".weight")->ne[1] != hp_.n_fft + 2)
            throw EngineError(mf.path() + ": hift." + name + " shape disagrees with the HiFT metadata");
        source_downs_.push_back(conv(mf, name, u, u == 1 ? 0 : u / 2, 1));
        source_resblocks_.push_back(resblock(mf, "source_resblocks." + std::to_string(i),
                                             hp_.source_resblock_kernel_sizes[i], hp_.source_resblock_dilations));
    }
    for (size_t i = 0; i < n_up; ++i)
        for (size_t j = 0; j < hp_.resblock_kernel_sizes.size(); ++j)
            resblocks_.push_back(resblock(mf, "resblocks." + std::to_string(i * hp_.resblock_kernel_sizes.size() + j),
                                          hp_.resblock_kernel_sizes[j], hp_.resblock_dilations));
    const int k_post = static_cast<int>(t("conv_post.weight")->ne[0]);
    conv_post_ = conv(mf, "conv_post", 1, k_post / 2, 1);  // Conv1d(ch, n_fft + 2, 7, 1, padding=3)
    if (conv_post_.w->ne[1] != hp_.n_fft + 2)
        throw EngineError(mf.path() + ": hift.conv_post disagrees with chatterbox.hift.istft_n_fft");

    // scipy.signal.get_window("hann", n_fft, fftbins=True): the periodic Hann window, as float32.
    for (int n = 0; n < hp_.n_fft; ++n)
        window_.push_back(static_cast<float>(0.5 - 0.5 * std::cos(2.0 * M_PI * n / hp_.n_fft)));

    own_buf_ = ggml_backend_alloc_ctx_tensors(own_ctx_, backend_);
    if (!own_buf_) throw EngineError("not enough memory for the HiFT weights");
    for (auto& [tensor, data] : pending_) ggml_backend_tensor_set(tensor, data.data(), 0, ggml_nbytes(tensor));
    pending_.clear();
    pending_.shrink_to_fit();

    alloc_ = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend_));
    graph_meta_.resize(ggml_tensor_overhead() * 16384 + ggml_graph_overhead_custom(16384, false));
}

Hift::~Hift() {
    if (alloc_) ggml_gallocr_free(alloc_);
    if (own_buf_) ggml_backend_buffer_free(own_buf_);
    if (own_ctx_) ggml_free(own_ctx_);
}

// The model's tensor when it is F32, otherwise an F32 copy (HiFT runs in F32).
ggml_tensor* Hift::f32_weight(const ModelFile& mf, const std::string& name) {
    ggml_tensor* t = mf.tensor(name);
    if (t->type == GGML_TYPE_F32) return t;
    ggml_tensor* c = ggml_new_tensor(own_ctx_, GGML_TYPE_F32, GGML_MAX_DIMS, t->ne);
    pending_.emplace_back(c, mf.read_f32(t));
    return c;
}

Hift::Conv Hift::conv(const ModelFile& mf, const std::string& name, int stride, int pad, int dil) {
    const ggml_tensor* w = mf.tensor("hift." + name + ".weight");  // ne [K, Cin, Cout]
    const int64_t K = w->ne[0], cin = w->ne[1], cout = w->ne[2];
    std::vector<float> src = mf.read_f32(w), dst(src.size());
    for (int64_t oc = 0; oc < cout; ++oc)
        for (int64_t ci = 0; ci < cin; ++ci)
            for (int64_t k = 0; k < K; ++k) dst[(k * cout + oc) * cin + ci] = src[(oc * cin + ci) * K + k];
    Conv c;
    c.w = ggml_new_tensor_3d(own_ctx_, GGML_TYPE_F32, cin, cout, K);
    pending_.emplace_back(c.w, std::move(dst));
    c.b = f32_weight(mf, "hift." + name + ".bias");
    if (ggml_nelements(c.b) != cout) throw EngineError(mf.path() + ": hift." + name + ".bias has the wrong size");
    c.stride = stride;
    c.pad = pad;
    c.dil = dil;
    return c;
}

Hift::Snake Hift::snake(const ModelFile& mf, const std::string& name) {
    const ggml_tensor* a = mf.tensor("hift." + name + ".alpha");
    std::vector<float> alpha = mf.read_f32(a), inv(alpha.size());
    // Snake: x + 1 / (alpha + no_div_by_zero) * sin(alpha x)^2, no_div_by_zero = 1e-9
    // (float32 arithmetic, as torch does it).
    for (size_t i = 0; i < alpha.size(); ++i) inv[i] = 1.0f / (alpha[i] + 1e-9f);
    Snake s;
    s.alpha = ggml_new_tensor_1d(own_ctx_, GGML_TYPE_F32, static_cast<int64_t>(alpha.size()));
    s.inv_alpha = ggml_new_tensor_1d(own_ctx_, GGML_TYPE_F32, static_cast<int64_t>(alpha.size()));
    pending_.emplace_back(s.alpha, std::move(alpha));
    pending_.emplace_back(s.inv_alpha, std::move(inv));
    return s;
}

Hift::ResBlock Hift::resblock(const ModelFile& mf, const std::string& prefix, int kernel,
                              const std::vector<int>& dilations) {
    ResBlock rb;
    for (size_t i = 0; i < dilations.size(); ++i) {
        const std::string n = std::to_string(i);
        const int d = dilations[i];
        // get_padding(k, d) = (k*d - d) / 2
        rb.convs1.push_back(conv(mf, prefix + ".convs1." + n, 1, (kernel * d - d) / 2, d));
        rb.convs2.push_back(conv(mf, prefix + ".convs2." + n, 1, (kernel - 1) / 2, 1));
        if (rb.convs1.back().w->ne[2] != kernel || rb.convs2.back().w->ne[2] != kernel)
            throw EngineError(mf.path() + ": hift." + prefix + " kernel size disagrees with the HiFT metadata");
        rb.act1.push_back(snake(mf, prefix + ".activations1." + n));
        rb.act2.push_back(snake(mf, prefix + ".activations2." + n));
    }
    return rb;
}

// ---------------------------------------------------------------------------
// Graph pieces (signals are ne [C, L], channel fastest)
// ---------------------------------------------------------------------------

ggml_tensor* Hift::apply(ggml_context* ctx, const Conv& c, ggml_tensor* x) const {
    const int64_t cin = c.w->ne[0], cout = c.w->ne[1], K = c.w->ne[2];
    const int64_t L = x->ne[1] + 2 * c.pad;
    const int64_t out_len = (L - c.dil * (K - 1) - 1) / c.stride + 1;
    if (c.pad > 0) x = ggml_pad_ext(ctx, x, 0, 0, c.pad, c.pad, 0, 0, 0, 0);
    ggml_tensor* y = nullptr;
    for (int64_t k = 0; k < K; ++k) {
        ggml_tensor* wk = ggml_view_2d(ctx, c.w, cin, cout, c.w->nb[1], k * c.w->nb[2]);
        ggml_tensor* xk = ggml_view_2d(ctx, x, cin, out_len, c.stride * x->nb[1], k * c.dil * x->nb[1]);
        if (c.stride > 1) xk = ggml_cont(ctx, xk);
        ggml_tensor* yk = ggml_mul_mat(ctx, wk, xk);  // [Cout, out_len]
        y = y ? ggml_add(ctx, y, yk) : yk;
    }
    return ggml_add(ctx, y, c.b);
}

ggml_tensor* Hift::apply(ggml_context* ctx, const Snake& s, ggml_tensor* x) const {
    ggml_tensor* sx = ggml_sin(ctx, ggml_mul(ctx, x, s.alpha));
    return ggml_add(ctx, x, ggml_mul(ctx, ggml_sqr(ctx, sx), s.inv_alpha));
}

ggml_tensor* Hift::apply(ggml_context* ctx, const ResBlock& rb, ggml_tensor* x) const {
    for (size_t i = 0; i < rb.convs1.size(); ++i) {
        ggml_tensor* xt = apply(ctx, rb.act1[i], x);
        xt = apply(ctx, rb.convs1[i], xt);
        xt = apply(ctx, rb.act2[i], xt);
        xt = apply(ctx, rb.convs2[i], xt);
        x = ggml_add(ctx, xt, x);
    }
    return x;
}

ggml_tensor* Hift::apply(ggml_context* ctx, const Up& u, ggml_tensor* x) const {
    ggml_tensor* cols = ggml_mul_mat(ctx, u.wt, x);                // [K*Cout, L]
    ggml_tensor* y = ggml_col2im_1d(ctx, cols, u.stride, u.cout, u.pad);  // [T_out, Cout]
    y = ggml_cont(ctx, ggml_transpose(ctx, y));                    // [Cout, T_out]
    return ggml_add(ctx, y, u.b);
}

// ---------------------------------------------------------------------------
// Running a graph
// ---------------------------------------------------------------------------

void Hift::check_mel(int64_t T) const {
    if (T < 1) throw EngineError("mel must have at least one frame");
    if (T > (int64_t{1} << 31) / hp_.samples_per_frame())
        throw EngineError("mel has too many frames (" + std::to_string(T) + ")");
}

std::vector<float> Hift::compute(ggml_context* ctx, ggml_cgraph* gf, ggml_tensor* out,
                                 const std::vector<std::pair<ggml_tensor*, const float*>>& inputs) {
    ggml_set_output(out);
    ggml_build_forward_expand(gf, out);
    if (!ggml_gallocr_alloc_graph(alloc_, gf)) {
        ggml_free(ctx);
        throw EngineError("not enough memory for the HiFT graph");
    }
    for (auto& [t, data] : inputs) ggml_backend_tensor_set(t, data, 0, ggml_nbytes(t));
    if (ggml_backend_graph_compute(backend_, gf) != GGML_STATUS_SUCCESS) {
        ggml_free(ctx);
        throw EngineError("HiFT graph computation failed");
    }
    std::vector<float> result(ggml_nelements(out));
    ggml_backend_tensor_get(out, result.data(), 0, ggml_nbytes(out));
    ggml_free(ctx);
    return result;
}

// mel [C][T] row-major -> [T][C] (ne [C, T], channel fastest).
static std::vector<float> channel_fastest(const float* mel, int64_t C, int64_t T) {
    std::vector<float> out(static_cast<size_t>(C * T));
    for (int64_t c = 0; c < C; ++c)
        for (int64_t t = 0; t < T; ++t) out[t * C + c] = mel[c * T + t];
    return out;
}

std::vector<float> Hift::f0(const float* mel, int64_t T) {
    check_mel(T);
    std::vector<float> x_host = channel_fastest(mel, hp_.in_channels, T);
    ggml_context* ctx = ggml_init({graph_meta_.size(), graph_meta_.data(), true});
    ggml_cgraph* gf = ggml_new_graph_custom(ctx, 16384, false);
    ggml_tensor* in = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp_.in_channels, T);
    ggml_set_input(in);
    ggml_tensor* x = in;
    for (const Conv& c : f0_convs_) x = ggml_elu(ctx, apply(ctx, c, x));
    // classifier: Linear(cond_channels, 1) over every frame, then abs.
    x = ggml_mul_mat(ctx, ggml_reshape_2d(ctx, f0_cls_w_, f0_cls_w_->ne[0], 1), x);  // [1, T]
    x = ggml_abs(ctx, ggml_add(ctx, x, f0_cls_b_));
    return compute(ctx, gf, x, {{in, x_host.data()}});
}

std::vector<float> Hift::decode(const float* mel, int64_t T, const float* source, int64_t n_source) {
    check_mel(T);
    const int64_t spf = hp_.samples_per_frame();
    if (n_source != T * spf)
        throw EngineError("source has " + std::to_string(n_source) + " samples; a mel of " + std::to_string(T) +
                          " frames needs " + std::to_string(T * spf) + " (" + std::to_string(spf) + " per frame)");
    const int n_fft = hp_.n_fft, hop = hp_.hop, n_bins = n_fft / 2 + 1, pad = n_fft / 2;
    if (n_source <= pad) throw EngineError("source is too short for the STFT's reflection padding");

    // _stft: torch.stft(s, n_fft, hop, n_fft, window=hann, center=True, pad_mode="reflect"),
    // real parts then imaginary parts as n_fft + 2 channels. A 16-point DFT per frame is a
    // few operations per sample, done here on the host in double precision.
    const int64_t n_frames = 1 + n_source / hop;
    std::vector<double> cos_t(n_fft * n_bins), sin_t(n_fft * n_bins);
    for (int k = 0; k < n_bins; ++k)
        for (int n = 0; n < n_fft; ++n) {
            const double a = 2.0 * M_PI * static_cast<double>((static_cast<int64_t>(k) * n) % n_fft) / n_fft;
            cos_t[k * n_fft + n] = std::cos(a);
            sin_t[k * n_fft + n] = std::sin(a);
        }
    std::vector<float> s_stft(static_cast<size_t>(n_frames * (n_fft + 2)));  // ne [n_fft + 2, n_frames]
    {
        auto reflect = [&](int64_t j) {
            if (j < 0) return -j;
            if (j >= n_source) return 2 * (n_source - 1) - j;
            return j;
        };
        std::vector<double> frame(n_fft);
        for (int64_t m = 0; m < n_frames; ++m) {
            for (int n = 0; n < n_fft; ++n) frame[n] = static_cast<double>(window_[n]) * source[reflect(m * hop + n - pad)];
            for (int k = 0; k < n_bins; ++k) {
                double re = 0, im = 0;
                for (int n = 0; n < n_fft; ++n) {
                    re += frame[n] * cos_t[k * n_fft + n];
                    im -= frame[n] * sin_t[k * n_fft + n];
                }
                s_stft[m * (n_fft + 2) + k] = static_cast<float>(re);
                s_stft[m * (n_fft + 2) + n_bins + k] = static_cast<float>(im);
            }
        }
    }

    std::vector<float> x_host = channel_fastest(mel, hp_.in_channels, T);
    ggml_context* ctx = ggml_init({graph_meta_.size(), graph_meta_.data(), true});
    ggml_cgraph* gf = ggml_new_graph_custom(ctx, 16384, false);
    ggml_tensor* in = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, hp_.in_channels, T);
    ggml_set_input(in);
    ggml_tensor* s_in = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, n_fft + 2, n_frames);
    ggml_set_input(s_in);

    const size_t n_up = ups_.size(), n_k = hp_.resblock_kernel_sizes.size();
    ggml_tensor* x = apply(ctx, conv_pre_, in);
    for (size_t i = 0; i < n_up; ++i) {
        x = ggml_leaky_relu(ctx, x, hp_.lrelu_slope, false);
        x = apply(ctx, ups_[i], x);
        if (i == n_up - 1) {
            // ReflectionPad1d((1, 0)): frame 1 prepended.
            ggml_tensor* first = ggml_cont(ctx, ggml_view_2d(ctx, x, x->ne[0], 1, x->nb[1], x->nb[1]));
            x = ggml_concat(ctx, first, x, 1);
        }
        ggml_tensor* si = apply(ctx, source_resblocks_[i], apply(ctx, source_downs_[i], s_in));
        if (si->ne[1] != x->ne[1]) {
            ggml_free(ctx);
            throw EngineError("HiFT source branch length " + std::to_string(si->ne[1]) + " != " +
                              std::to_string(x->ne[1]) + " (metadata inconsistent with the weights)");
        }
        x = ggml_add(ctx, x, si);
        ggml_tensor* xs = nullptr;
        for (size_t j = 0; j < n_k; ++j) {
            ggml_tensor* r = apply(ctx, resblocks_[i * n_k + j], x);
            xs = xs ? ggml_add(ctx, xs, r) : r;
        }
        x = ggml_scale(ctx, xs, 1.0f / static_cast<float>(n_k));
    }
    x = ggml_leaky_relu(ctx, x, 0.01f, false);  // F.leaky_relu(x): torch's default slope, not lrelu_slope
    x = apply(ctx, conv_post_, x);               // [n_fft + 2, n_frames]
    if (x->ne[1] != n_frames) {
        ggml_free(ctx);
        throw EngineError("HiFT output frames disagree with the source STFT (metadata inconsistent)");
    }
    std::vector<float> spec = compute(ctx, gf, x, {{in, x_host.data()}, {s_in, s_stft.data()}});

    // _istft: magnitude = clip(exp(x[:n_bins]), max=1e2), phase = sin(x[n_bins:]), then
    // torch.istft(n_fft, hop, n_fft, hann, center=True): per-frame inverse real DFT
    // (1/n_fft; imaginary parts of DC and Nyquist ignored), windowed overlap-add,
    // division by the overlap-added squared window, n_fft/2 trimmed from each end.
    const int64_t full = n_fft + hop * (n_frames - 1);
    std::vector<double> y(full, 0.0), env(full, 0.0);
    std::vector<double> re(n_bins), im(n_bins);
    for (int64_t m = 0; m < n_frames; ++m) {
        const float* col = spec.data() + m * (n_fft + 2);
        for (int k = 0; k < n_bins; ++k) {
            const float mag = std::min(std::exp(col[k]), 100.0f);
            const float ph = std::sin(col[n_bins + k]);
            re[k] = static_cast<double>(mag * std::cos(ph));
            im[k] = static_cast<double>(mag * std::sin(ph));
        }
        for (int n = 0; n < n_fft; ++n) {
            double v = re[0] + ((n & 1) ? -re[n_bins - 1] : re[n_bins - 1]);
            for (int k = 1; k < n_bins - 1; ++k) v += 2.0 * (re[k] * cos_t[k * n_fft + n] - im[k] * sin_t[k * n_fft + n]);
            const double w = window_[n];
            y[m * hop + n] += v / n_fft * w;
            env[m * hop + n] += w * w;
        }
    }
    const int64_t n_out = full - 2 * pad;
    std::vector<float> wav(n_out);
    for (int64_t i = 0; i < n_out; ++i) {
        const double e = env[pad + i];
        if (std::abs(e) < 1e-11) throw EngineError("HiFT ISTFT window envelope is zero (n_fft/hop inconsistent)");
        const float v = static_cast<float>(y[pad + i] / e);
        wav[i] = std::clamp(v, -hp_.audio_limit, hp_.audio_limit);
    }
    return wav;
}

}  // namespace cbs
