// PerthNet's STFT and inverse (its AudioProcessor: torchaudio Spectrogram(power=None) and
// InverseSpectrogram with n_fft = win_length, a periodic Hann window, hop, centre=True,
// reflect padding, not normalised), through the engine's FFT (core/fft.h) in double, each
// real frame of n_fft as one complex transform of n_fft / 2.
#pragma once

#include <cstdint>
#include <vector>

#include "core/fft.h"

namespace cbs {

// A complex spectrogram, frame-major: bin f of frame t at [t * n_bins + f].
struct Spectrogram {
    int64_t frames = 0;
    int n_bins = 0;
    std::vector<float> re, im;
};

class PerthStft {
public:
    PerthStft() = default;
    // n_fft even; window of n_fft values.
    PerthStft(int n_fft, int hop, std::vector<float> window);
    int n_fft() const { return n_fft_; }
    int n_bins() const { return n_fft_ / 2 + 1; }
    int hop() const { return hop_; }
    int64_t frames(int64_t n) const { return 1 + n / hop_; }
    // Shortest signal the reflection padding accepts (torch needs n > n_fft / 2).
    int64_t min_length() const { return n_fft_ / 2 + 1; }

    // torch.stft(x, n_fft, hop, window, center=True, pad_mode="reflect", onesided=True).
    Spectrogram forward(const float* x, int64_t n, int threads) const;
    // torch.istft(spec, n_fft, hop, window, center=True): hop * (frames - 1) samples; the
    // imaginary parts of the DC and Nyquist bins are ignored (a real inverse).
    std::vector<float> inverse(const Spectrogram& spec, int threads) const;

private:
    void rfft(const double* frame, double* re, double* im, double* scratch) const;
    void irfft(const double* re, const double* im, double* frame, double* scratch) const;

    int n_fft_ = 0, hop_ = 1;
    std::vector<float> window_;
    FftPlan<double> half_;
    std::vector<double> w_re_, w_im_;  // exp(-2 pi i k / n_fft), k <= n_fft / 2
};

}  // namespace cbs
