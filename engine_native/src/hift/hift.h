// HiFT vocoder of S3Gen (HiFTGenerator: neural source filter + ISTFTNet) on the CPU, for
// the engine and the parity seams `hift_f0` and `hift_decode`. Its layers come from
// hift_weights.h (every dimension from the GGUF).
//
// Layout: a signal of C channels and L frames is a ggml tensor ne [C, L] (channel
// fastest). The graph (hift_graph.cpp) runs on CPU kernels of ours (ggml custom ops,
// hift/kernels.h): the resblock convolutions through the DFT (on AMX tiles for a quantised
// model where the CPU has them: amx_conv), the others as "columns"
// (for each output frame, the K input frames it reads, side by side) times the re-ordered
// weight, with Snake and the other activations fused into the kernels that read the signal.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "core/fft.h"
#include "core/graph_runner.h"
#include "core/model_file.h"
#include "cpu/amx_gemm.h"
#include "ggml-backend.h"
#include "hift/hift_weights.h"
#include "hift/stft.h"

namespace cbs {

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
        bool panels = false;  // w in rgemm's panels (Cout a multiple of 16): direct through rgemm
        const AmxPackedB* amx = nullptr;  // set: every length direct on AMX tiles (amx_convs_)
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
        const AmxPackedB* amx = nullptr;  // set: the product on AMX tiles (amx_convs_), B = wt's transpose
    };
    struct Graph;  // graph-building helpers (hift_graph.cpp)

    ggml_tensor* f32_weight(const ModelFile& mf, ggml_tensor* t);
    // The layer's weight in this graph's layout; allow_fft: through the DFT where it qualifies.
    Conv conv(const ModelFile& mf, const HiftConvLayer& l, bool allow_fft = false);
    Snake snake(const ModelFile& mf, const ggml_tensor* alpha);
    ResBlock resblock(const ModelFile& mf, const HiftResBlockLayers& l);

    HiftHparams hp_;
    ggml_backend_t backend_;

    // Weights derived at load (re-ordered conv kernels, 1/alpha, F32 copies of any
    // non-F32 weight).
    HiftDerivedWeights own_;

    std::vector<Conv> f0_convs_;
    ggml_tensor *f0_cls_w_ = nullptr, *f0_cls_b_ = nullptr;
    Conv conv_pre_, conv_post_;
    std::vector<Up> ups_;
    std::vector<Conv> source_downs_;
    std::vector<ResBlock> source_resblocks_, resblocks_;
    // The FFT convolutions' transform, over tiles of N = 64 frames: the best tile for the
    // model's kernels of 3 to 11 taps (docs/CPU.md).
    static constexpr int kFftTile = 64;
    FftPlan<float> tile_fft_{kFftTile};
    HiftStft stft_;                 // the host STFT of the source and ISTFT of the output
    std::vector<float> post_bias_;  // conv_post's bias, added on the host with the ISTFT

    // A quantised model's stride-1 convs of 32k channels (resblocks', the f0 predictor's) and
    // ConvTranspose1d products run on AMX tiles (the fast
    // products its S3Gen takes, within ~1e-5 of f32 a product) where the CPU has them: several
    // times the DFT's speed. An f32 model keeps the exact path. Their weights, packed at load.
    bool amx_convs_ = false;
    std::deque<AmxPackedB> amx_weights_;

    GraphRunner runner_;
};

}  // namespace cbs
