// HiFT on a GPU backend (CUDA, Vulkan) through standard ggml operations only, the
// counterpart of hift.h's CPU kernels (which stay the CPU's path, unchanged): the same
// two seams f0() and decode(), the same checks, F32 throughout.
//
// Layout: a signal of C channels and L frames is ne [L, C] (time fastest), the layout of
// ggml's im2col. Conv1d = im2col + one matrix product (core/graph_helpers.h conv1d);
// ConvTranspose1d(stride s) = its s phases as one Conv1d of J = ceil(K / s) taps to s * Cout
// channels, interleaved by a permute; Snake = mul, sin, sqr, mul, add; the source's STFT =
// im2col framing times a windowed DFT matrix; the ISTFT = an inverse-DFT matrix times the
// spectrum, overlap-added as n_fft / hop shifted (ggml_pad_ext) views, over the window
// envelope (a host input), clamped. Nothing but the mel, the source and the envelope goes
// up, and the waveform comes back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/graph_runner.h"
#include "core/model_file.h"
#include "hift/hift_weights.h"

namespace cbs {

class HiftGgml {
public:
    HiftGgml(const ModelFile& mf, ggml_backend_t backend);
    ~HiftGgml();
    HiftGgml(const HiftGgml&) = delete;
    HiftGgml& operator=(const HiftGgml&) = delete;

    const HiftHparams& hp() const { return hp_; }
    // As Hift::f0 and Hift::decode.
    std::vector<float> f0(const float* mel, int64_t T);
    std::vector<float> decode(const float* mel, int64_t T, const float* source, int64_t n_source);

private:
    struct Conv {
        ggml_tensor *w = nullptr, *b = nullptr;  // w ne [K, Cin, Cout], b ne [Cout]
        int stride = 1, pad = 0, dil = 1;
    };
    struct Snake {
        ggml_tensor *alpha = nullptr, *inv_alpha = nullptr;  // ne [1, C]
    };
    struct ResBlock {
        std::vector<Conv> convs1, convs2;
        std::vector<Snake> act1, act2;
    };
    struct Up {
        ggml_tensor *w = nullptr, *b = nullptr;  // w: the phases, ne [J, Cin, stride * Cout]
        int K = 1, stride = 1, pad = 0, J = 1, cout = 0;
    };

    ggml_tensor* weight(const ModelFile& mf, ggml_tensor* t);
    Conv conv(const ModelFile& mf, const HiftConvLayer& l);
    Snake snake(const ModelFile& mf, const ggml_tensor* alpha);
    ResBlock resblock(const ModelFile& mf, const HiftResBlockLayers& l);

    // graph pieces
    ggml_tensor* apply(ggml_context* ctx, const Conv& c, ggml_tensor* x) const;
    ggml_tensor* apply(ggml_context* ctx, const Snake& s, ggml_tensor* x) const;
    ggml_tensor* apply(ggml_context* ctx, const ResBlock& rb, ggml_tensor* x) const;
    ggml_tensor* apply(ggml_context* ctx, const Up& u, ggml_tensor* x, bool reflect_first) const;

    HiftHparams hp_;
    ggml_backend_t backend_;
    HiftDerivedWeights own_;  // derived weights (phases, 1/alpha, DFT matrices, F32 copies)

    std::vector<Conv> f0_convs_;
    ggml_tensor *f0_cls_w_ = nullptr, *f0_cls_b_ = nullptr;  // ne [Cc, 1], [1, 1]
    Conv conv_pre_;
    std::vector<Up> ups_;
    std::vector<Conv> source_downs_;
    std::vector<ResBlock> source_resblocks_, resblocks_;
    // conv_post split into its magnitude and phase halves (n_fft / 2 + 1 channels each),
    // output channel fastest: ne [K * Cin, n_bins] and bias ne [n_bins, 1].
    ggml_tensor *post_mag_w_ = nullptr, *post_ph_w_ = nullptr, *post_mag_b_ = nullptr, *post_ph_b_ = nullptr;
    int post_K_ = 1;
    ggml_tensor* dft_ = nullptr;   // ne [n_fft, 1, n_fft + 2]: windowed forward DFT (real, then imaginary parts)
    ggml_tensor* idft_ = nullptr;  // ne [n_fft + 2, n_fft]: inverse DFT of the Hermitian spectrum, windowed, / n_fft
    std::vector<double> window_;

    GraphRunner runner_;
};

}  // namespace cbs
