// HiFT's host STFT and ISTFT (HiFTGenerator._stft / _istft), in double precision
// through the engine's FFT (core/fft.h) with its Hann window (core/window.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/fft.h"

namespace cbs {

class HiftStft {
public:
    HiftStft() = default;
    HiftStft(int n_fft, int hop);
    int n_fft() const { return n_fft_; }
    int n_bins() const { return n_fft_ / 2 + 1; }
    // Frames of an n-sample signal: 1 + n / hop.
    int64_t frames(int64_t n) const { return 1 + n / hop_; }

    // torch.stft(x, n_fft, hop, n_fft, window=hann, center=True, pad_mode="reflect"):
    // ne [n_fft + 2, frames(n)], per frame the real parts of bins 0..n_fft/2, then the
    // imaginary parts.
    std::vector<float> forward(const float* x, int64_t n) const;

    // _istft of conv_post's output: spec is time fastest, channel k of frame m at
    // spec[k * spec_len + m], to which bias[k] is added; magnitude = min(exp(real
    // channel), 100), phase = sin(imaginary channel); torch.istft(n_fft, hop, n_fft, hann,
    // center=True) (imaginary parts of DC and Nyquist ignored), clamped to +-limit.
    std::vector<float> inverse(const std::vector<float>& spec, int64_t spec_len, const std::vector<float>& bias,
                               int64_t n_frames, float limit) const;

private:
    int n_fft_ = 0, hop_ = 1;
    std::vector<float> window_;  // periodic Hann, n_fft values
    FftPlan<double> plan_;
};

}  // namespace cbs
