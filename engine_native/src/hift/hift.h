// HiFT vocoder of S3Gen (HiFTGenerator: neural source filter + ISTFTNet) for the
// parity seams `hift_f0` and `hift_decode`. Every dimension comes from the GGUF
// (`chatterbox.hift.*` metadata and the `hift.*` tensor shapes); weight-norm is
// already folded into `hift.<module>.weight` by the converter.
//
// Layout: a signal of C channels and L frames is a ggml tensor ne [C, L] (channel
// fastest). The graph (hift_graph.cpp) runs on CPU kernels of ours (ggml custom ops,
// hift/kernels.h): the
// resblock convolutions through the DFT, the others as "columns" (for each output
// frame, the K input frames it reads, side by side) times the re-ordered weight, with
// Snake and the other activations fused into the kernels that read the signal.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "core/fft.h"
#include "core/graph_runner.h"
#include "hift/stft.h"
#include "core/model_file.h"

namespace cbs {

struct HiftHparams {
    int sample_rate = 0, base_channels = 0, nb_harmonics = 0, in_channels = 0;
    std::vector<int> upsample_rates, upsample_kernel_sizes;
    std::vector<int> resblock_kernel_sizes, resblock_dilations;
    std::vector<int> source_resblock_kernel_sizes, source_resblock_dilations;
    int n_fft = 0, hop = 0;
    float lrelu_slope = 0.1f, audio_limit = 0.99f;
    static HiftHparams from(const ModelFile& mf);
    // Source (excitation) samples per mel frame: prod(upsample_rates) * hop.
    int64_t samples_per_frame() const;
    // source_downs[i]'s stride: downsample_rates = [1] + upsample_rates[::-1][:-1],
    // cumulated and reversed.
    std::vector<int64_t> source_down_strides() const;
    // EngineError for a mel of no frames or too many.
    void check_mel(int64_t T) const;
};

class Hift {
public:
    Hift(const ModelFile& mf, ggml_backend_t backend);
    ~Hift();
    Hift(const Hift&) = delete;
    Hift& operator=(const Hift&) = delete;

    const HiftHparams& hp() const { return hp_; }

    // ConvRNNF0Predictor on mel [in_channels][T] (row-major): f0 [T].
    std::vector<float> f0(const float* mel, int64_t T);
    // HiFTGenerator.decode(x=mel, s=source) including its final clamp to audio_limit:
    // mel [in_channels][T] row-major, source [T * samples_per_frame()] -> waveform of
    // the same length as the source.
    std::vector<float> decode(const float* mel, int64_t T, const float* source, int64_t n_source);

private:
    // A Conv1d. Direct (columns times weight): the weight re-ordered to ne [kc,
    // cout_pad] with row index k*Cin + ci (tap-major, matching the columns), kc = K*Cin
    // rounded up to 8 and cout_pad = Cout rounded up to 4 with zeros (the sizes ggml's
    // tiled sgemm takes). Through the DFT (resblocks): ne [Cout, Cin, K].
    struct Conv {
        ggml_tensor *w = nullptr, *b = nullptr;  // b ne [Cout]
        int K = 1, cin = 0, cout = 0, stride = 1, pad = 0, dil = 1;
        const FftPlan<float>* fft = nullptr;  // set: through the DFT, tiles of its length (tile_fft_)
        bool panels = false;  // direct through rgemm (Cout a multiple of 16, dilation 1): w in panels
    };
    struct Snake {
        ggml_tensor *alpha = nullptr, *inv_alpha = nullptr;  // both ne [C]
    };
    struct ResBlock {
        std::vector<Conv> convs1, convs2;
        std::vector<Snake> act1, act2;
    };
    // ConvTranspose1d: weight [Cin][K*Cout] (column k*Cout + co) in rgemm's panels.
    struct Up {
        ggml_tensor *wt = nullptr, *b = nullptr;  // b ne [Cout]
        int K = 1, stride = 1, pad = 0, cout = 0;
    };
    struct Graph;  // graph-building helpers (hift_graph.cpp)

    ggml_tensor* f32_weight(const ModelFile& mf, const std::string& name);
    ggml_tensor* upload(std::vector<float> data, int64_t ne0, int64_t ne1 = 1);
    // ne: the weight's expected shape [K, Cin, Cout] (-1: any), checked first.
    Conv conv(const ModelFile& mf, const std::string& name, int stride, int pad, int dil,
              const std::vector<int64_t>& ne, bool allow_fft = false);
    Snake snake(const ModelFile& mf, const std::string& name, int64_t channels);
    ResBlock resblock(const ModelFile& mf, const std::string& prefix, int kernel, const std::vector<int>& dilations,
                      int64_t channels);

    HiftHparams hp_;
    ggml_backend_t backend_;

    // Weights derived at load (re-ordered conv kernels, 1/alpha, F32 copies of any
    // non-F32 weight) live in this context and buffer.
    ggml_context* own_ctx_ = nullptr;
    ggml_backend_buffer_t own_buf_ = nullptr;
    std::vector<std::pair<ggml_tensor*, std::vector<float>>> pending_;  // host data until the buffer exists

    std::vector<Conv> f0_convs_;
    ggml_tensor *f0_cls_w_ = nullptr, *f0_cls_b_ = nullptr;
    Conv conv_pre_, conv_post_;
    std::vector<Up> ups_;
    std::vector<Conv> source_downs_;
    std::vector<ResBlock> source_resblocks_, resblocks_;
    // The FFT convolutions' transform. Tiles of N = 64 frames measured best for K = 3..11
    // (K = 3 gains 1.4x in products, K = 11 4.5x).
    static constexpr int kFftTile = 64;
    FftPlan<float> tile_fft_{kFftTile};
    HiftStft stft_;                 // the host STFT of the source and ISTFT of the output
    std::vector<float> post_bias_;  // conv_post's bias, added on the host with the ISTFT

    GraphRunner runner_;
};

}  // namespace cbs
