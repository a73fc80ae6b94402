#include "hift/hift.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>

#include "core/backend.h"
#include "cpu/op_helpers.h"
#include "cpu/products.h"
#include "hift/kernels.h"

namespace cbs {

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
    : hp_(HiftHparams::from(mf)), backend_(backend), own_(mf.tensors().size() + 16), runner_(backend, 4096) {
    // The kernels above read and write tensor memory directly.
    if (!backend_is_cpu(backend_)) throw EngineError("the HiFT vocoder runs on the CPU backend only");
    const HiftLayers layers = HiftLayers::from(mf, hp_);
    amx_convs_ = amx_tag(s3gen_products(mf, backend)) != nullptr;

    for (const HiftConvLayer& c : layers.f0_convs) f0_convs_.push_back(conv(mf, c));
    f0_cls_w_ = f32_weight(mf, layers.f0_cls_w);
    f0_cls_b_ = f32_weight(mf, layers.f0_cls_b);
    conv_pre_ = conv(mf, layers.conv_pre);

    // ups[i]: one matrix product to ne [K*Cout, L] (weight re-ordered to ne [Cin, K*Cout],
    // row k*Cout + co), then up_kernel's overlap-add.
    for (const HiftUpLayer& l : layers.ups) {
        const int64_t cin = l.cin, cout = l.cout, K = l.K;
        std::vector<float> src = mf.read_f32(l.w), t(src.size());
        for (int64_t ci = 0; ci < cin; ++ci)
            for (int64_t co = 0; co < cout; ++co)
                for (int64_t k = 0; k < K; ++k) t[ci * K * cout + k * cout + co] = src[(ci * cout + co) * K + k];
        const int64_t n16 = round_up(K * cout, 16);
        Up up;
        up.wt = own_.add(panels16(t, cin, K * cout, n16), {16, cin * n16 / 16});
        up.b = f32_weight(mf, l.b);
        up.K = l.K;
        up.stride = l.stride;
        up.pad = l.pad;
        up.cout = l.cout;
        if (amx_convs_ && cin % 32 == 0) {
            amx_weights_.emplace_back().pack_transposed(t.data(), K * cout, K * cout, cin);
            up.amx = &amx_weights_.back();
        }
        ups_.push_back(up);
    }

    for (size_t i = 0; i < layers.source_downs.size(); ++i) {
        source_downs_.push_back(conv(mf, layers.source_downs[i]));
        source_resblocks_.push_back(resblock(mf, layers.source_resblocks[i]));
    }
    for (const HiftResBlockLayers& rb : layers.resblocks) resblocks_.push_back(resblock(mf, rb));
    conv_post_ = conv(mf, layers.conv_post);
    if (conv_post_.w->ne[0] != int64_t{conv_post_.K} * conv_post_.cin)  // conv_rows reads no padding
        throw ModelError(mf.path() + ": hift.conv_post needs K * channels to be a multiple of 8");
    post_bias_ = mf.read_f32(layers.conv_post.b);

    // The periodic Hann window (scipy.signal.get_window("hann", n_fft, fftbins=True)).
    stft_ = HiftStft(hp_.n_fft, hp_.hop);

    if (!own_.upload(backend_)) throw EngineError("not enough memory for the HiFT weights");
}

Hift::~Hift() = default;

// The model's tensor when it is F32 in host memory, otherwise an F32 copy (HiFT runs in
// F32 on the CPU, also when the model's weights are on another device).
ggml_tensor* Hift::f32_weight(const ModelFile& mf, ggml_tensor* t) {
    if (t->type == GGML_TYPE_F32 && t->buffer && ggml_backend_buffer_is_host(t->buffer)) return t;
    return own_.add(mf.read_f32(t), {t->ne[0], t->ne[1], t->ne[2], t->ne[3]});
}

// Whether a conv goes through the DFT (tiles of n frames): resblock convs (C -> C, stride
// 1, odd K, "same" padding) with C a multiple of the 16 channels the FFT kernels take at a
// time and K at most n / 2.
static bool fft_conv(int64_t K, int64_t cin, int64_t cout, int stride, int pad, int dil, int n) {
    return stride == 1 && cin == cout && cin % 16 == 0 && K % 2 == 1 && pad == dil * (K - 1) / 2 && 2 * K <= n;
}

Hift::Conv Hift::conv(const ModelFile& mf, const HiftConvLayer& l, bool allow_fft) {
    const int64_t K = l.K, cin = l.cin, cout = l.cout;
    Conv c;
    static_assert(kFftTile <= kMaxTile);
    if (allow_fft && fft_conv(K, cin, cout, l.stride, l.pad, l.dil, kFftTile)) c.fft = &tile_fft_;
    std::vector<float> src = mf.read_f32(l.w);
    if (c.fft || (cout % 16 == 0 && l.dil == 1)) {
        // rgemm's panels of the weight [K * Cin][Cout] (row k Cin + ci); an FFT conv's too
        // (weight_bin reads them), so that a short signal goes through rgemm instead.
        std::vector<float> t(src.size());
        for (int64_t oc = 0; oc < cout; ++oc)
            for (int64_t ci = 0; ci < cin; ++ci)
                for (int64_t k = 0; k < K; ++k) t[(k * cin + ci) * cout + oc] = src[(oc * cin + ci) * K + k];
        c.w = own_.add(panels16(t, K * cin, cout, cout), {16, K * cin * cout / 16});
        c.panels = true;
        if (amx_convs_ && l.stride == 1 && cin % 32 == 0) {  // the resblocks', the f0 predictor's
            amx_weights_.emplace_back().pack_transposed(t.data(), cout, cout, K * cin);
            c.amx = &amx_weights_.back();
        }
    } else {
        const int64_t kc = round_up(K * cin, 8), cout_pad = round_up(cout, 4);
        std::vector<float> dst(static_cast<size_t>(kc * cout_pad), 0.0f);
        for (int64_t oc = 0; oc < cout; ++oc)
            for (int64_t ci = 0; ci < cin; ++ci)
                for (int64_t k = 0; k < K; ++k) dst[oc * kc + k * cin + ci] = src[(oc * cin + ci) * K + k];
        c.w = own_.add(std::move(dst), {kc, cout_pad});
    }
    c.b = f32_weight(mf, l.b);
    c.K = l.K;
    c.cin = l.cin;
    c.cout = l.cout;
    c.stride = l.stride;
    c.pad = l.pad;
    c.dil = l.dil;
    return c;
}

Hift::Snake Hift::snake(const ModelFile& mf, const ggml_tensor* alpha_tensor) {
    std::vector<float> alpha = mf.read_f32(alpha_tensor), inv(alpha.size());
    // Snake: x + 1 / (alpha + no_div_by_zero) * sin(alpha x)^2, no_div_by_zero = 1e-9
    // (float32 arithmetic, as torch does it).
    for (size_t i = 0; i < alpha.size(); ++i) inv[i] = 1.0f / (alpha[i] + 1e-9f);
    const auto n = static_cast<int64_t>(alpha.size());
    Snake s;
    s.alpha = own_.add(std::move(alpha), {n});
    s.inv_alpha = own_.add(std::move(inv), {n});
    return s;
}

Hift::ResBlock Hift::resblock(const ModelFile& mf, const HiftResBlockLayers& l) {
    ResBlock rb;
    for (size_t i = 0; i < l.convs1.size(); ++i) {
        rb.convs1.push_back(conv(mf, l.convs1[i], true));
        rb.convs2.push_back(conv(mf, l.convs2[i], true));
        rb.act1.push_back(snake(mf, l.alpha1[i]));
        rb.act2.push_back(snake(mf, l.alpha2[i]));
    }
    return rb;
}

}  // namespace cbs
