// The VoiceEncoder speaker embedding (T3's speaker_emb) as `embeds_from_wavs([wav], 16000)`
// computes it: librosa trim (top_db), 40-bin power mel, partial windows of 160 frames
// at rate 1.3, a 3-layer LSTM per partial, ReLU projection, L2 norms, mean, L2 norm.
// Host code: the LSTM is sequential and small (about 1 GFLOP for 10 s of audio).
#pragma once

#include <vector>

#include "model_file.h"

namespace cbs {

class VoiceEncoder {
public:
    explicit VoiceEncoder(const ModelFile& mf);
    // wav at 16 kHz -> the L2-normalised embedding [embed_dim].
    std::vector<float> embed(const std::vector<float>& wav16k) const;
    // The unscaled mel it embeds, row-major [n_frames][n_mels] (after trimming).
    std::vector<float> mel(const std::vector<float>& wav16k) const;

private:
    struct Layer {
        std::vector<float> w_ih, w_hh, b;  // [4H][in], [4H][H], b_ih + b_hh; gates i, f, g, o
        int in;
    };
    std::vector<float> trim(const std::vector<float>& wav) const;

    int n_fft_, hop_, n_mels_, n_freq_, partial_, hidden_, embed_dim_, trim_frame_, trim_hop_;
    float rate_, min_coverage_, trim_top_db_;
    std::vector<float> fb_, window_, proj_w_, proj_b_;
    std::vector<Layer> layers_;
};

}  // namespace cbs
