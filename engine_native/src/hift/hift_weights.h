// HiFT (HiFTGenerator) as the model file holds it: hyper-parameters from `chatterbox.hift.*`
// and every layer's tensors, read and checked once for both of its graphs, the CPU kernels
// (hift.h) and the standard ggml operations (hift_ggml.h), which each re-lay the weights their
// own way. Weight-norm is already folded into `hift.<module>.weight` by the converter.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/model_file.h"
#include "ggml-backend.h"
#include "ggml.h"

namespace cbs {

struct HiftHparams {
    int sample_rate = 0, base_channels = 0, nb_harmonics = 0, in_channels = 0;
    std::vector<int> upsample_rates, upsample_kernel_sizes;
    std::vector<int> resblock_kernel_sizes, resblock_dilations;
    std::vector<int> source_resblock_kernel_sizes, source_resblock_dilations;
    int n_fft = 0, hop = 0;
    float lrelu_slope = 0.1f, audio_limit = 0.99f;
    // The metadata, and in_channels from hift.conv_pre's weight.
    static HiftHparams from(const ModelFile& mf);
    // Source (excitation) samples per mel frame: prod(upsample_rates) * hop.
    int64_t samples_per_frame() const;
    // source_downs[i]'s stride: downsample_rates = [1] + upsample_rates[::-1][:-1],
    // cumulated and reversed.
    std::vector<int64_t> source_down_strides() const;
    // EngineError for a mel of no frames or too many.
    void check_mel(int64_t T) const;
    // check_mel, and EngineError unless the source has samples_per_frame() samples per frame.
    void check_decode(int64_t T, int64_t n_source) const;
};

// A Conv1d of the model: its tensors, shapes checked, and how it is applied.
struct HiftConvLayer {
    ggml_tensor *w = nullptr, *b = nullptr;  // ne [K, Cin, Cout], [Cout]
    int K = 1, cin = 0, cout = 0, stride = 1, pad = 0, dil = 1;
};

// A ResBlock: for each dilation i, Snake(act1[i]), convs1[i] (dilated), Snake(act2[i]),
// convs2[i], added to its input. The Snakes' alphas are ne [C].
struct HiftResBlockLayers {
    std::vector<HiftConvLayer> convs1, convs2;
    std::vector<ggml_tensor*> alpha1, alpha2;
};

// A ConvTranspose1d(Cin, Cout, K, stride, padding (K - stride) / 2).
struct HiftUpLayer {
    ggml_tensor *w = nullptr, *b = nullptr;  // ne [K, Cout, Cin], [Cout]
    int K = 1, stride = 1, pad = 0, cin = 0, cout = 0;
};

struct HiftLayers {
    std::vector<HiftConvLayer> f0_convs;                // f0_predictor.condnet (ELU between)
    ggml_tensor *f0_cls_w = nullptr, *f0_cls_b = nullptr;  // its Linear(C, 1): ne [C, 1], [1]
    HiftConvLayer conv_pre, conv_post;
    std::vector<HiftUpLayer> ups;
    std::vector<HiftConvLayer> source_downs;
    std::vector<HiftResBlockLayers> source_resblocks;  // one per upsampling stage
    std::vector<HiftResBlockLayers> resblocks;         // stage i, kernel j at i * n_kernels + j
    // Every layer's tensors, each shape checked against hp (ModelError on a mismatch).
    static HiftLayers from(const ModelFile& mf, const HiftHparams& hp);
};

// Weights a HiFT graph derives at load (re-laid kernels, 1/alpha, F32 copies), made on the
// host and then uploaded at once into a buffer of their own on the graph's backend.
class HiftDerivedWeights {
public:
    explicit HiftDerivedWeights(size_t max_tensors);
    ~HiftDerivedWeights();
    HiftDerivedWeights(const HiftDerivedWeights&) = delete;
    HiftDerivedWeights& operator=(const HiftDerivedWeights&) = delete;

    // A new F32 tensor of shape ne holding data (uploaded by upload()).
    ggml_tensor* add(std::vector<float> data, const std::vector<int64_t>& ne);
    // The context of the tensors (for views of them).
    ggml_context* context() const { return ctx_; }
    // Allocates every tensor on backend and uploads its data; false when there is no room.
    bool upload(ggml_backend_t backend);

private:
    ggml_context* ctx_ = nullptr;
    ggml_backend_buffer_t buf_ = nullptr;
    std::vector<std::pair<ggml_tensor*, std::vector<float>>> pending_;  // host data until the buffer exists
};

}  // namespace cbs
