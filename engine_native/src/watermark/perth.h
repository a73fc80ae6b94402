// Resemble AI's Perth implicit watermarker (resemble-perth 1.0.1, MIT), the step the
// official chatterbox-tts runs on every output: PerthImplicitWatermarker.apply_watermark
// and get_watermark at the model's own rate, with the package's trained weights converted
// once into a small GGUF (engine_native/convert/perth.py; general.architecture = "perth",
// every dimension and constant in its metadata). Host-only: plain loops, the convolutions
// through conv_stack.h's sgemm. The reference resamples with librosa on the way in and out;
// engine_native.watermark does that with the libraries librosa calls (soxr, scipy).
//
// apply(x): STFT -> magnitude in normalised dB ((20 log10 max(|X|, mag_min) + 180) / 195)
//   and phase; the encoder adds a residual to the lowest `subband` bins of the frames whose
//   summed normalised magnitude exceeds mask_fraction of the loudest frame's; back to linear
//   (10^min(dB / 20, max_db_exponent)) with the original phase, inverse STFT
//   (hop * (frames - 1) samples).
// decode(x): STFT, the decoder's three branches (the low bins stretched to T x rate for
//   each of decoder_rates, linear interpolation with aligned corners) each give per frame an
//   attention and a mark logit; masked means over the frames (the frame mask stretched by
//   nearest neighbour), a softmax over the three attentions weights the three marks; clipped
//   to [0, 1]. get_watermark(round=True) rounds it (half to even): marked when 1.
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

// A stretch of a longer clip marked on its own (a stream marks a growing sentence window by
// window): which of its ends are the clip's own, and the loudest frame seen so far. A frame
// counts toward the loudest (and so the frame mask's threshold) only where its analysis
// window lies inside the stretch or reaches past one of the clip's own ends, as in the whole
// clip; the others are reflections of a cut. The defaults are the whole clip.
struct PerthWindow {
    bool clip_start = true, clip_end = true;
    double loudest = 0;  // in: the loudest frame before; out: including this stretch's
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

    // apply_watermark's marking of x at the model rate: hop * (frames - 1) samples, up to
    // one hop shorter than x. `window`: x is a stretch of a longer clip (see PerthWindow).
    std::vector<float> apply(const float* x, int64_t n, int threads, PerthWindow* window = nullptr) const;
    // get_watermark(x, round=False) at the model rate, with each branch's frames. `fast`: the
    // decoder's products on AMX where the CPU has it (conv_stack.h), for a verdict.
    PerthDecoding decode(const float* x, int64_t n, int threads, bool fast = false) const;

    // The shortest input (samples at the model rate) either call accepts: enough for the
    // STFT's reflection padding.
    int64_t min_length() const { return stft_.min_length(); }
    // Frames each side whose magnitudes a frame's watermark residual depends on.
    int encoder_radius() const { return encoder_.receptive_radius(); }

private:
    // Rejects what would reach an assertion or a meaningless result: length, NaN.
    void check_input(const float* x, int64_t n) const;
    // Normalised dB magnitudes [T][n_bins] of a spectrogram of n samples, and each frame's
    // mask (its threshold from the frames `window` counts; all of them without one).
    void magnitudes(const Spectrogram& s, int64_t n, PerthWindow* window, std::vector<float>& mag,
                    std::vector<float>& mask) const;

    PerthHparams hp_;
    PerthStft stft_;
    ConvStack encoder_;
    std::array<ConvStack, 3> decoder_;
};

}  // namespace cbs
