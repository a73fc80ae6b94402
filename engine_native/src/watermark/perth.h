// Resemble AI's Perth implicit watermarker (resemble-perth 1.0.1, MIT), the step the
// official chatterbox-tts runs on every output: PerthImplicitWatermarker.apply_watermark
// and get_watermark, with the package's trained weights converted once into a small GGUF
// (engine_native/convert/perth.py; general.architecture = "perth", every dimension and
// constant in its metadata). Host-only: plain loops, the convolutions through
// conv_stack.h's sgemm.
//
// apply(x, rate): resample rate -> model rate with libsoxr HQ (librosa's default),
//   STFT -> magnitude in normalised dB ((20 log10 max(|X|, mag_min) + 180) / 195) and phase;
//   the encoder adds a residual to the lowest `subband` bins of the frames whose summed
//   normalised magnitude exceeds mask_fraction of the loudest frame's; back to linear
//   (10^min(dB / 20, max_db_exponent)) with the original phase, inverse STFT
//   (hop * (frames - 1) samples), resample back with libsoxr HQ.
// score(x, rate): resample with scipy's resample_poly (librosa "polyphase"), STFT, the
//   decoder's three branches (the low bins stretched to T x rate for each of
//   decoder_rates, linear interpolation with aligned corners) each give per frame an
//   attention and a mark logit; masked means over the frames (the frame mask stretched
//   by nearest neighbour), a softmax over the three attentions weights the three marks;
//   clipped to [0, 1]. get_watermark(round=True) rounds it (half to even): marked when 1.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "watermark/conv_stack.h"
#include "watermark/perth_stft.h"

namespace cbs {

struct PerthHparams {
    int sample_rate = 0, n_fft = 0, hop = 0, n_bins = 0, subband = 0, hidden = 0;
    double mag_min = 0, headroom_db = 0, mask_fraction = 0, leaky_slope = 0, max_db_exponent = 0;
    std::array<double, 3> decoder_rates{};  // slow, normal, fast
};

// One decoder branch's output over its own time axis.
struct PerthBranch {
    int64_t frames = 0;
    std::vector<float> attention, mark;  // per frame, before masking
    std::vector<float> mask;             // the frame mask stretched to `frames`
    float attention_mean = 0, mark_mean = 0;
};

struct PerthDecoding {
    std::array<PerthBranch, 3> branches;  // slow, normal, fast
    float score = 0;                      // get_watermark(round=False); NaN for digital silence
};

class Perth {
public:
    explicit Perth(const std::string& path);  // ModelError for anything wrong with the file
    const PerthHparams& hparams() const { return hp_; }
    int64_t parameters() const;

    // apply_watermark(x, sample_rate): hop * (frames - 1) samples at the model rate, as
    // many as librosa gives back at `sample_rate` (a few ms shorter than x).
    std::vector<float> apply(const float* x, int64_t n, int sample_rate, int threads) const;
    // get_watermark(x, sample_rate, round=False), with each branch's frames. `fast`: the
    // decoder's products on AMX where the CPU has it (conv_stack.h), for a verdict.
    PerthDecoding decode(const float* x, int64_t n, int sample_rate, int threads, bool fast = false) const;

    // The shortest input (samples at `sample_rate`) either call accepts: enough for the
    // STFT's reflection padding at the model rate.
    int64_t min_samples(int sample_rate) const;

private:
    // Rejects what would reach an assertion or a meaningless result: rate, length, NaN.
    void check_input(const float* x, int64_t n, int sample_rate) const;
    // Normalised dB magnitudes [T][n_bins] of a spectrogram, and each frame's mask.
    void magnitudes(const Spectrogram& s, std::vector<float>& mag, std::vector<float>& mask) const;

    PerthHparams hp_;
    PerthStft stft_;
    ConvStack encoder_;
    std::array<ConvStack, 3> decoder_;
};

}  // namespace cbs
