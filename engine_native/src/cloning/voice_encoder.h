// The VoiceEncoder speaker embedding (T3's speaker_emb) as `embeds_from_wavs([wav], 16000)`
// computes it: librosa trim (top_db), 40-bin power mel, partial windows of 160 frames
// at rate 1.3, a 3-layer LSTM per partial, ReLU projection, L2 norms, mean, L2 norm.
// Host code: the partials are independent, so the LSTM runs them as one batch: per layer
// one matrix product for the input projections of every step, then per step one small
// product [partials, H] x [H, 4H] (about 3 GMAC for 12 s of audio).
#pragma once

#include <cstdint>
#include <vector>

#include "cloning/audio_features.h"
#include "core/fft.h"
#include "core/model_file.h"

namespace cbs {

class VoiceEncoder {
public:
    explicit VoiceEncoder(const ModelFile& mf);
    // wav at 16 kHz -> the L2-normalised embedding [embed_dim]. The partials are split
    // over `threads` threads (the result does not depend on the split).
    std::vector<float> embed(const float* wav16k, int64_t n, int threads = 1) const;
    std::vector<float> embed(const std::vector<float>& wav16k, int threads = 1) const {
        return embed(wav16k.data(), static_cast<int64_t>(wav16k.size()), threads);
    }
    // The unscaled mel it embeds, row-major [n_frames][n_mels] (after trimming).
    std::vector<float> mel(const float* wav16k, int64_t n) const;

private:
    struct Layer {
        std::vector<float> w_ih_t, w_hh_t, b;  // [in][4H], [H][4H] (transposed), b_ih + b_hh; gates i, f, g, o
        int in;
    };
    std::vector<float> trim(const std::vector<float>& wav) const;
    // Final hidden states [count][H] of partials first..first+count-1 of the padded mel.
    void run_partials(const float* mel, int64_t step, int64_t first, int64_t count, float* h_final) const;

    int n_fft_, hop_, n_mels_, n_freq_, partial_, hidden_, embed_dim_, trim_frame_, trim_hop_;
    float rate_, min_coverage_, trim_top_db_;
    MelBank fb_;
    RealFft fft_;
    std::vector<float> window_, proj_w_, proj_b_;
    std::vector<Layer> layers_;
};

}  // namespace cbs
