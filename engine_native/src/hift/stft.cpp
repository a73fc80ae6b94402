#include "hift/stft.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/errors.h"
#include "core/window.h"

namespace cbs {

HiftStft::HiftStft(int n_fft, int hop) : n_fft_(n_fft), hop_(hop), window_(hann_window(n_fft, true)), plan_(n_fft) {}

std::vector<float> HiftStft::forward(const float* x, int64_t n) const {
    const int N = n_fft_, nb = n_bins(), pad = N / 2;
    if (n <= pad) throw EngineError("source is too short for the STFT's reflection padding");
    const int64_t n_frames = frames(n);
    std::vector<float> out(static_cast<size_t>(n_frames * (N + 2)));
    std::vector<double> buf(6 * N, 0.0);  // the frame (real, imaginary 0), its DFT, scratch
    double *fr = buf.data(), *fi = fr + N, *zr = fi + N, *zi = zr + N;
    for (int64_t m = 0; m < n_frames; ++m) {
        reflect_windowed_frame(x, n, m * hop_ - pad, window_, fr);
        plan_.forward(fr, fi, zr, zi, zi + N, zi + 2 * N);
        float* o = out.data() + m * (N + 2);
        for (int k = 0; k < nb; ++k) {
            o[k] = static_cast<float>(zr[k]);
            o[nb + k] = static_cast<float>(zi[k]);
        }
    }
    return out;
}

std::vector<float> HiftStft::inverse(const std::vector<float>& spec, int64_t spec_len, const std::vector<float>& b,
                                     int64_t n_frames, float limit) const {
    const int N = n_fft_, nb = n_bins(), pad = N / 2;
    const int64_t full = N + hop_ * (n_frames - 1);
    std::vector<double> y(full, 0.0), env(full, 0.0);
    std::vector<double> buf(6 * N);  // the spectrum, its inverse DFT, scratch
    double *xr = buf.data(), *xi = xr + N, *zr = xi + N, *zi = zr + N;
    for (int64_t m = 0; m < n_frames; ++m) {
        // The Hermitian spectrum (imaginary parts of DC and Nyquist dropped): its inverse
        // DFT is real, N times the signal.
        for (int k = 0; k < nb; ++k) {
            const float mag = std::min(std::exp(spec[k * spec_len + m] + b[k]), 100.0f);
            const float ph = std::sin(spec[(nb + k) * spec_len + m] + b[nb + k]);
            const double re = static_cast<double>(mag * std::cos(ph)), im = static_cast<double>(mag * std::sin(ph));
            const bool edge = k == 0 || k == nb - 1;
            xr[k] = re;
            xi[k] = edge ? 0.0 : im;
            if (!edge) xr[N - k] = re, xi[N - k] = -im;
        }
        plan_.inverse(xr, xi, zr, zi, zi + N, zi + 2 * N);
        for (int i = 0; i < N; ++i) {
            const double w = window_[i];
            y[m * hop_ + i] += zr[i] / N * w;
            env[m * hop_ + i] += w * w;
        }
    }
    const int64_t n_out = full - 2 * pad;
    std::vector<float> wav(n_out);
    for (int64_t i = 0; i < n_out; ++i) {
        const double e = env[pad + i];
        if (std::abs(e) < 1e-11) throw EngineError("HiFT ISTFT window envelope is zero (n_fft/hop inconsistent)");
        wav[i] = std::clamp(static_cast<float>(y[pad + i] / e), -limit, limit);
    }
    return wav;
}

}  // namespace cbs
