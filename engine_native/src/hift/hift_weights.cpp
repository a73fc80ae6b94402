#include "hift/hift_weights.h"

#include <algorithm>
#include <functional>
#include <numeric>
#include <string>

#include "core/errors.h"

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
    hp.in_channels = static_cast<int>(mf.tensor("hift.conv_pre.weight")->ne[1]);
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

void HiftHparams::check_decode(int64_t T, int64_t n_source) const {
    check_mel(T);
    const int64_t spf = samples_per_frame();
    if (n_source != T * spf)
        throw EngineError("source has " + std::to_string(n_source) + " samples; a mel of " + std::to_string(T) +
                          " frames needs " + std::to_string(T * spf) + " (" + std::to_string(spf) + " per frame)");
}

// ---------------------------------------------------------------------------
// Layers
// ---------------------------------------------------------------------------

// hift.<name>.weight of shape ne ([K, Cin, Cout], -1: any) and its bias [Cout].
static HiftConvLayer conv_layer(const ModelFile& mf, const std::string& name, int stride, int pad, int dil,
                                const std::vector<int64_t>& ne) {
    HiftConvLayer c;
    c.w = mf.tensor("hift." + name + ".weight", ne);
    c.K = static_cast<int>(c.w->ne[0]);
    c.cin = static_cast<int>(c.w->ne[1]);
    c.cout = static_cast<int>(c.w->ne[2]);
    c.b = mf.tensor("hift." + name + ".bias", {c.cout});
    c.stride = stride;
    c.pad = pad;
    c.dil = dil;
    return c;
}

static HiftResBlockLayers resblock_layers(const ModelFile& mf, const std::string& prefix, int kernel,
                                          const std::vector<int>& dilations, int64_t channels) {
    HiftResBlockLayers rb;
    for (size_t i = 0; i < dilations.size(); ++i) {
        const std::string n = std::to_string(i);
        const int d = dilations[i];
        // get_padding(k, d) = (k*d - d) / 2
        rb.convs1.push_back(
            conv_layer(mf, prefix + ".convs1." + n, 1, (kernel * d - d) / 2, d, {kernel, channels, channels}));
        rb.convs2.push_back(conv_layer(mf, prefix + ".convs2." + n, 1, (kernel - 1) / 2, 1, {kernel, channels, channels}));
        rb.alpha1.push_back(mf.tensor("hift." + prefix + ".activations1." + n + ".alpha", {channels}));
        rb.alpha2.push_back(mf.tensor("hift." + prefix + ".activations2." + n + ".alpha", {channels}));
    }
    return rb;
}

HiftLayers HiftLayers::from(const ModelFile& mf, const HiftHparams& hp) {
    HiftLayers l;
    const size_t n_up = hp.upsample_rates.size();

    // f0 predictor: condnet.{0,2,4,...} Conv1d(kernel_size=K, padding=K/2), ELU between, then
    // a Linear classifier.
    for (int i = 0; mf.find_tensor("hift.f0_predictor.condnet." + std::to_string(i) + ".weight"); i += 2) {
        const std::string name = "f0_predictor.condnet." + std::to_string(i);
        const int K = static_cast<int>(mf.tensor("hift." + name + ".weight")->ne[0]);
        const int64_t cin = l.f0_convs.empty() ? hp.in_channels : l.f0_convs.back().cout;
        l.f0_convs.push_back(conv_layer(mf, name, 1, K / 2, 1, {K, cin, -1}));
    }
    if (l.f0_convs.empty()) throw ModelError(mf.path() + ": no HiFT f0 predictor");
    l.f0_cls_w = mf.tensor("hift.f0_predictor.classifier.weight", {l.f0_convs.back().cout, 1});
    l.f0_cls_b = mf.tensor("hift.f0_predictor.classifier.bias", {1});

    // Conv1d(in, base, K, 1, padding=K/2)
    const int k_pre = static_cast<int>(mf.tensor("hift.conv_pre.weight")->ne[0]);
    l.conv_pre = conv_layer(mf, "conv_pre", 1, k_pre / 2, 1, {k_pre, hp.in_channels, hp.base_channels});

    // ups[i]: ConvTranspose1d(base/2^i, base/2^(i+1), K, u, padding=(K-u)/2).
    for (size_t i = 0; i < n_up; ++i) {
        const std::string name = "hift.ups." + std::to_string(i);
        HiftUpLayer u;
        u.K = hp.upsample_kernel_sizes[i];
        u.stride = hp.upsample_rates[i];
        u.pad = (u.K - u.stride) / 2;
        u.cin = hp.base_channels >> i;
        u.cout = hp.base_channels >> (i + 1);
        if (u.K < u.stride) throw ModelError(mf.path() + ": " + name + " has a kernel shorter than its stride");
        u.w = mf.tensor(name + ".weight", {u.K, u.cout, u.cin});
        u.b = mf.tensor(name + ".bias", {u.cout});
        l.ups.push_back(u);
    }

    // Source branch: source_downs[i] has stride u (kernel 2u, padding u/2; a 1x1 conv when
    // u == 1), then a resblock, both at the channels of ups[i].
    const std::vector<int64_t> cum = hp.source_down_strides();
    for (size_t i = 0; i < n_up; ++i) {
        const int u = static_cast<int>(cum[i]);
        const std::string name = "source_downs." + std::to_string(i);
        const ggml_tensor* w = mf.tensor("hift." + name + ".weight");
        if (w->ne[0] != (u == 1 ? 1 : 2 * u) || w->ne[1] != hp.n_fft + 2 || w->ne[2] != l.ups[i].cout)
            throw ModelError(mf.path() + ": hift." + name + " shape disagrees with the HiFT metadata");
        l.source_downs.push_back(
            conv_layer(mf, name, u, u == 1 ? 0 : u / 2, 1, {u == 1 ? 1 : 2 * u, hp.n_fft + 2, l.ups[i].cout}));
        l.source_resblocks.push_back(resblock_layers(mf, "source_resblocks." + std::to_string(i),
                                                     hp.source_resblock_kernel_sizes[i], hp.source_resblock_dilations,
                                                     l.ups[i].cout));
    }
    const size_t n_k = hp.resblock_kernel_sizes.size();
    for (size_t i = 0; i < n_up; ++i)
        for (size_t j = 0; j < n_k; ++j)
            l.resblocks.push_back(resblock_layers(mf, "resblocks." + std::to_string(i * n_k + j),
                                                  hp.resblock_kernel_sizes[j], hp.resblock_dilations, l.ups[i].cout));

    // Conv1d(ch, n_fft + 2, K, 1, padding=K/2): the magnitude and phase of each STFT bin.
    const int k_post = static_cast<int>(mf.tensor("hift.conv_post.weight")->ne[0]);
    l.conv_post = conv_layer(mf, "conv_post", 1, k_post / 2, 1, {k_post, l.ups.back().cout, hp.n_fft + 2});
    return l;
}

// ---------------------------------------------------------------------------
// Derived weights
// ---------------------------------------------------------------------------

HiftDerivedWeights::HiftDerivedWeights(size_t max_tensors)
    : ctx_(ggml_init({ggml_tensor_overhead() * max_tensors, nullptr, true})) {}

HiftDerivedWeights::~HiftDerivedWeights() {
    if (buf_) ggml_backend_buffer_free(buf_);
    if (ctx_) ggml_free(ctx_);
}

ggml_tensor* HiftDerivedWeights::add(std::vector<float> data, const std::vector<int64_t>& ne) {
    int64_t n[GGML_MAX_DIMS] = {1, 1, 1, 1};
    std::copy(ne.begin(), ne.end(), n);
    ggml_tensor* t = ggml_new_tensor(ctx_, GGML_TYPE_F32, static_cast<int>(ne.size()), n);
    pending_.emplace_back(t, std::move(data));
    return t;
}

bool HiftDerivedWeights::upload(ggml_backend_t backend) {
    buf_ = ggml_backend_alloc_ctx_tensors(ctx_, backend);
    if (!buf_) return false;
    for (auto& [tensor, data] : pending_) ggml_backend_tensor_set(tensor, data.data(), 0, ggml_nbytes(tensor));
    pending_.clear();
    pending_.shrink_to_fit();
    return true;
}

}  // namespace cbs
