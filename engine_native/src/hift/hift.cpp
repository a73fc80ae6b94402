#include "hift/hift.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "core/backend.h"
#include "hift/kernels.h"

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
    if (!ok) throw ModelError(mf.path() + ": inconsistent HiFT metadata");
    return hp;
}

int64_t HiftHparams::samples_per_frame() const {
    int64_t n = hop;
    for (int r : upsample_rates) n *= r;
    return n;
}

std::vector<int64_t> HiftHparams::source_down_strides() const {
    const size_t n_up = upsample_rates.size();
    std::vector<int64_t> down(n_up), cum(n_up);
    down[0] = 1;
    for (size_t i = 1; i < n_up; ++i) down[i] = upsample_rates[n_up - i];
    std::partial_sum(down.begin(), down.end(), cum.begin(), std::multiplies<int64_t>());
    std::reverse(cum.begin(), cum.end());
    return cum;
}

void HiftHparams::check_mel(int64_t T) const {
    if (T < 1) throw EngineError("mel must have at least one frame");
    if (T > (int64_t{1} << 31) / samples_per_frame())
        throw EngineError("mel has too many frames (" + std::to_string(T) + ")");
}

using namespace hiftk;

// ---------------------------------------------------------------------------
// Weights
// ---------------------------------------------------------------------------

// A weight [kc][n] (row-major, columns fastest) in rgemm's panels of 16 columns,
// [n16 / 16][kc][16], the columns past n zero.
static std::vector<float> panels16(const std::vector<float>& w, int64_t kc, int64_t n, int64_t n16) {
    std::vector<float> out(static_cast<size_t>(kc * n16), 0.0f);
    for (int64_t j = 0; j < kc; ++j)
        for (int64_t c = 0; c < n; ++c) out[(c / 16 * kc + j) * 16 + c % 16] = w[j * n + c];
    return out;
}

Hift::Hift(const ModelFile& mf, ggml_backend_t backend)
    : hp_(HiftHparams::from(mf)), backend_(backend), runner_(backend, 4096) {
    // The kernels above read and write tensor memory directly.
    if (!backend_is_cpu(backend_)) throw EngineError("the HiFT vocoder runs on the CPU backend only");
    const size_t n_tensors = mf.tensors().size() + 16;
    own_ctx_ = ggml_init({ggml_tensor_overhead() * n_tensors, nullptr, true});
    auto t = [&](const std::string& name) { return mf.tensor("hift." + name); };
    const size_t n_up = hp_.upsample_rates.size();

    // f0 predictor: condnet.{0,2,4,...} Conv1d (ELU between), then a Linear classifier.
    for (int i = 0; mf.find_tensor("hift.f0_predictor.condnet." + std::to_string(i) + ".weight"); i += 2) {
        const std::string name = "f0_predictor.condnet." + std::to_string(i);
        const int K = static_cast<int>(t(name + ".weight")->ne[0]);
        f0_convs_.push_back(conv(mf, name, 1, K / 2, 1, {K, f0_convs_.empty() ? -1 : f0_convs_.back().cout, -1}));  // Conv1d(kernel_size=3, padding=1)
    }
    if (f0_convs_.empty()) throw ModelError(mf.path() + ": no HiFT f0 predictor");
    f0_cls_w_ = f32_weight(mf, "hift.f0_predictor.classifier.weight");
    f0_cls_b_ = f32_weight(mf, "hift.f0_predictor.classifier.bias");
    hp_.in_channels = static_cast<int>(t("conv_pre.weight")->ne[1]);
    for (size_t i = 1; i < f0_convs_.size(); ++i)
        if (f0_convs_[i].cin != f0_convs_[i - 1].cout)
            throw ModelError(mf.path() + ": HiFT f0 predictor shapes disagree");
    if (f0_convs_[0].cin != hp_.in_channels || f0_cls_w_->ne[0] != f0_convs_.back().cout ||
        ggml_nelements(f0_cls_w_) != f0_cls_w_->ne[0] || ggml_nelements(f0_cls_b_) != 1)
        throw ModelError(mf.path() + ": HiFT f0 predictor shapes disagree");

    const int k_pre = static_cast<int>(t("conv_pre.weight")->ne[0]);
    conv_pre_ = conv(mf, "conv_pre", 1, k_pre / 2, 1, {k_pre, hp_.in_channels, hp_.base_channels});  // Conv1d(in, base, 7, 1, padding=3)
    if (conv_pre_.cout != hp_.base_channels)
        throw ModelError(mf.path() + ": hift.conv_pre disagrees with chatterbox.hift.base_channels");

    // ups[i]: ConvTranspose1d(base/2^i, base/2^(i+1), k, u, padding=(k-u)/2): one matrix
    // product to ne [K*Cout, L] (weight re-ordered to ne [Cin, K*Cout], row k*Cout + co),
    // then up_kernel's overlap-add.
    for (size_t i = 0; i < n_up; ++i) {
        const std::string name = "hift.ups." + std::to_string(i);
        const int u = hp_.upsample_rates[i], K = hp_.upsample_kernel_sizes[i];
        const int64_t cin = hp_.base_channels >> i, cout = hp_.base_channels >> (i + 1);
        const ggml_tensor* w = mf.tensor(name + ".weight", {K, cout, cin});  // ne [K, Cout, Cin]
        if (K < u) throw ModelError(mf.path() + ": " + name + " has a kernel shorter than its stride");
        std::vector<float> src = mf.read_f32(w), t(src.size());
        for (int64_t ci = 0; ci < cin; ++ci)
            for (int64_t co = 0; co < cout; ++co)
                for (int64_t k = 0; k < K; ++k) t[ci * K * cout + k * cout + co] = src[(ci * cout + co) * K + k];
        const int64_t n16 = round_up(K * cout, 16);
        Up up;
        up.wt = upload(panels16(t, cin, K * cout, n16), 16, cin * n16 / 16);
        up.b = f32_weight(mf, name + ".bias");
        if (ggml_nelements(up.b) != cout) throw ModelError(mf.path() + ": " + name + ".bias has the wrong size");
        up.K = K;
        up.stride = u;
        up.pad = (K - u) / 2;
        up.cout = static_cast<int>(cout);
        ups_.push_back(up);
    }

    // Source branch: downsample_rates = [1] + upsample_rates[::-1][:-1], cumulated and
    // reversed: source_downs[i] has stride u (kernel 2u, padding u/2; a 1x1 conv when u == 1).
    const std::vector<int64_t> cum = hp_.source_down_strides();
    for (size_t i = 0; i < n_up; ++i) {
        const int u = static_cast<int>(cum[i]);
        const std::string name = "source_downs." + std::to_string(i);
        const int64_t K = t(name + ".weight")->ne[0];
        if (K != (u == 1 ? 1 : 2 * u) || t(name + ".weight")->ne[1] != hp_.n_fft + 2 ||
            t(name + ".weight")->ne[2] != ups_[i].cout)
            throw ModelError(mf.path() + ": hift." + name + " shape disagrees with the HiFT metadata");
        source_downs_.push_back(conv(mf, name, u, u == 1 ? 0 : u / 2, 1, {u == 1 ? 1 : 2 * u, hp_.n_fft + 2, ups_[i].cout}));
        source_resblocks_.push_back(resblock(mf, "source_resblocks." + std::to_string(i),
                                             hp_.source_resblock_kernel_sizes[i], hp_.source_resblock_dilations, ups_[i].cout));
    }
    for (size_t i = 0; i < n_up; ++i)
        for (size_t j = 0; j < hp_.resblock_kernel_sizes.size(); ++j)
            resblocks_.push_back(resblock(mf, "resblocks." + std::to_string(i * hp_.resblock_kernel_sizes.size() + j),
                                          hp_.resblock_kernel_sizes[j], hp_.resblock_dilations, ups_[i].cout));
    for (size_t i = 0; i < n_up; ++i)
        for (const ResBlock* rb : {&source_resblocks_[i], &resblocks_[i * hp_.resblock_kernel_sizes.size()]})
            if (rb->convs1[0].cin != ups_[i].cout)
                throw ModelError(mf.path() + ": HiFT resblock channels disagree with the upsampling layers");
    const int k_post = static_cast<int>(t("conv_post.weight")->ne[0]);
    conv_post_ = conv(mf, "conv_post", 1, k_post / 2, 1, {k_post, ups_.back().cout, hp_.n_fft + 2});  // Conv1d(ch, n_fft + 2, 7, 1, padding=3)
    if (conv_post_.cout != hp_.n_fft + 2 || conv_post_.cin != ups_.back().cout)
        throw ModelError(mf.path() + ": hift.conv_post disagrees with chatterbox.hift.istft_n_fft");
    if (conv_post_.w->ne[0] != int64_t{conv_post_.K} * conv_post_.cin)  // conv_rows reads no padding
        throw ModelError(mf.path() + ": hift.conv_post needs K * channels to be a multiple of 8");
    post_bias_ = mf.read_f32(mf.tensor("hift.conv_post.bias"));

    // The periodic Hann window (scipy.signal.get_window("hann", n_fft, fftbins=True)).
    stft_ = HiftStft(hp_.n_fft, hp_.hop);

    own_buf_ = ggml_backend_alloc_ctx_tensors(own_ctx_, backend_);
    if (!own_buf_) throw EngineError("not enough memory for the HiFT weights");
    for (auto& [tensor, data] : pending_) ggml_backend_tensor_set(tensor, data.data(), 0, ggml_nbytes(tensor));
    pending_.clear();
    pending_.shrink_to_fit();
}

Hift::~Hift() {
    if (own_buf_) ggml_backend_buffer_free(own_buf_);
    if (own_ctx_) ggml_free(own_ctx_);
}

ggml_tensor* Hift::upload(std::vector<float> data, int64_t ne0, int64_t ne1) {
    ggml_tensor* t = ggml_new_tensor_2d(own_ctx_, GGML_TYPE_F32, ne0, ne1);
    pending_.emplace_back(t, std::move(data));
    return t;
}

// The model's tensor when it is F32 in host memory, otherwise an F32 copy (HiFT runs in
// F32 on the CPU, also when the model's weights are on another device).
ggml_tensor* Hift::f32_weight(const ModelFile& mf, const std::string& name) {
    ggml_tensor* t = mf.tensor(name);
    if (t->type == GGML_TYPE_F32 && t->buffer && ggml_backend_buffer_is_host(t->buffer)) return t;
    ggml_tensor* c = ggml_new_tensor(own_ctx_, GGML_TYPE_F32, GGML_MAX_DIMS, t->ne);
    pending_.emplace_back(c, mf.read_f32(t));
    return c;
}

// Whether a conv goes through the DFT (tiles of n frames): resblock convs (C -> C, stride
// 1, odd K, "same" padding) with C a multiple of the 16 channels the FFT kernels take at a
// time and K at most n / 2.
static bool fft_conv(int64_t K, int64_t cin, int64_t cout, int stride, int pad, int dil, int n) {
    return stride == 1 && cin == cout && cin % 16 == 0 && K % 2 == 1 && pad == dil * (K - 1) / 2 && 2 * K <= n;
}

Hift::Conv Hift::conv(const ModelFile& mf, const std::string& name, int stride, int pad, int dil,
                      const std::vector<int64_t>& ne, bool allow_fft) {
    const ggml_tensor* w = mf.tensor("hift." + name + ".weight", ne);  // ne [K, Cin, Cout]
    const int64_t K = w->ne[0], cin = w->ne[1], cout = w->ne[2];
    Conv c;
    static_assert(kFftTile <= kMaxTile);
    if (allow_fft && fft_conv(K, cin, cout, stride, pad, dil, kFftTile)) c.fft = &tile_fft_;
    std::vector<float> src = mf.read_f32(w);
    if (c.fft) {
        // Panels of 16 output channels, [Cout / 16][Cin][K][16] (weight_bin's reading order:
        // one panel a contiguous stream)
        std::vector<float> dst(src.size());
        for (int64_t oc = 0; oc < cout; ++oc)
            for (int64_t ci = 0; ci < cin; ++ci)
                for (int64_t k = 0; k < K; ++k)
                    dst[((oc / 16 * cin + ci) * K + k) * 16 + oc % 16] = src[(oc * cin + ci) * K + k];
        c.w = upload(std::move(dst), cout, cin * K);
    } else if (cout % 16 == 0 && dil == 1) {
        // rgemm's panels of the weight [K * Cin][Cout] (row k Cin + ci)
        std::vector<float> t(src.size());
        for (int64_t oc = 0; oc < cout; ++oc)
            for (int64_t ci = 0; ci < cin; ++ci)
                for (int64_t k = 0; k < K; ++k) t[(k * cin + ci) * cout + oc] = src[(oc * cin + ci) * K + k];
        c.w = upload(panels16(t, K * cin, cout, cout), 16, K * cin * cout / 16);
        c.panels = true;
    } else {
        const int64_t kc = round_up(K * cin, 8), cout_pad = round_up(cout, 4);
        std::vector<float> dst(static_cast<size_t>(kc * cout_pad), 0.0f);
        for (int64_t oc = 0; oc < cout; ++oc)
            for (int64_t ci = 0; ci < cin; ++ci)
                for (int64_t k = 0; k < K; ++k) dst[oc * kc + k * cin + ci] = src[(oc * cin + ci) * K + k];
        c.w = upload(std::move(dst), kc, cout_pad);
    }
    c.b = f32_weight(mf, "hift." + name + ".bias");
    if (ggml_nelements(c.b) != cout) throw ModelError(mf.path() + ": hift." + name + ".bias has the wrong size");
    c.K = static_cast<int>(K);
    c.cin = static_cast<int>(cin);
    c.cout = static_cast<int>(cout);
    c.stride = stride;
    c.pad = pad;
    c.dil = dil;
    return c;
}

Hift::Snake Hift::snake(const ModelFile& mf, const std::string& name, int64_t channels) {
    const ggml_tensor* a = mf.tensor("hift." + name + ".alpha", {channels});
    std::vector<float> alpha = mf.read_f32(a), inv(alpha.size());
    // Snake: x + 1 / (alpha + no_div_by_zero) * sin(alpha x)^2, no_div_by_zero = 1e-9
    // (float32 arithmetic, as torch does it).
    for (size_t i = 0; i < alpha.size(); ++i) inv[i] = 1.0f / (alpha[i] + 1e-9f);
    const auto n = static_cast<int64_t>(alpha.size());
    Snake s;
    s.alpha = upload(std::move(alpha), n);
    s.inv_alpha = upload(std::move(inv), n);
    return s;
}

Hift::ResBlock Hift::resblock(const ModelFile& mf, const std::string& prefix, int kernel,
                              const std::vector<int>& dilations, int64_t channels) {
    ResBlock rb;
    for (size_t i = 0; i < dilations.size(); ++i) {
        const std::string n = std::to_string(i);
        const int d = dilations[i];
        // get_padding(k, d) = (k*d - d) / 2
        rb.convs1.push_back(conv(mf, prefix + ".convs1." + n, 1, (kernel * d - d) / 2, d, {kernel, channels, channels}, true));
        rb.convs2.push_back(conv(mf, prefix + ".convs2." + n, 1, (kernel - 1) / 2, 1, {kernel, channels, channels}, true));
        const Conv &c1 = rb.convs1.back(), &c2 = rb.convs2.back();
        if (c1.K != kernel || c2.K != kernel || c1.cin != c1.cout || c2.cin != c1.cout || c2.cout != c1.cout ||
            (i > 0 && c1.cin != rb.convs1[0].cin))
            throw ModelError(mf.path() + ": hift." + prefix + " shapes disagree with the HiFT metadata");
        rb.act1.push_back(snake(mf, prefix + ".activations1." + n, channels));
        rb.act2.push_back(snake(mf, prefix + ".activations2." + n, channels));
        if (ggml_nelements(rb.act1.back().alpha) != c1.cin || ggml_nelements(rb.act2.back().alpha) != c1.cin)
            throw ModelError(mf.path() + ": hift." + prefix + " Snake sizes disagree with its convolutions");
    }
    return rb;
}

}  // namespace cbs
