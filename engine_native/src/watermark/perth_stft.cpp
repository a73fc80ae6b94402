#include "watermark/perth_stft.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/errors.h"
#include "core/parallel_for.h"

namespace cbs {

PerthStft::PerthStft(int n_fft, int hop, std::vector<float> window)
    : n_fft_(n_fft), hop_(hop), window_(std::move(window)) {
    if (n_fft < 2 || n_fft % 2 != 0) throw ModelError("STFT length must be even, got " + std::to_string(n_fft));
    if (hop < 1 || hop > n_fft) throw ModelError("STFT hop must be in [1, n_fft], got " + std::to_string(hop));
    if (static_cast<int>(window_.size()) != n_fft)
        throw ModelError("STFT window has " + std::to_string(window_.size()) + " values, expected " +
                         std::to_string(n_fft));
    half_ = FftPlan<double>(n_fft / 2);
    w_re_.resize(n_fft / 2 + 1);
    w_im_.resize(n_fft / 2 + 1);
    for (int k = 0; k <= n_fft / 2; ++k) {
        const double a = -2.0 * M_PI * k / n_fft;
        w_re_[k] = std::cos(a);
        w_im_[k] = std::sin(a);
    }
}

// z[j] = x[2j] + i x[2j+1] transformed at h = n/2 gives Z; with E[k] = (Z[k] + conj Z[h-k]) / 2
// and O[k] = -i (Z[k] - conj Z[h-k]) / 2, X[k] = E[k] + W^k O[k] for k = 0..h.
void PerthStft::rfft(const double* frame, double* re, double* im, double* scratch) const {
    const int h = n_fft_ / 2;
    double *xr = scratch, *xi = xr + h, *zr = xi + h, *zi = zr + h;
    for (int j = 0; j < h; ++j) xr[j] = frame[2 * j], xi[j] = frame[2 * j + 1];
    half_.forward(xr, xi, zr, zi, zi + h, zi + 2 * h);
    for (int k = 0; k <= h; ++k) {
        const int a = k == h ? 0 : k, b = k == 0 ? 0 : h - k;
        const double er = 0.5 * (zr[a] + zr[b]), ei = 0.5 * (zi[a] - zi[b]);
        const double ore = 0.5 * (zi[a] + zi[b]), oi = -0.5 * (zr[a] - zr[b]);
        re[k] = er + (w_re_[k] * ore - w_im_[k] * oi);
        im[k] = ei + (w_re_[k] * oi + w_im_[k] * ore);
    }
}

// The inverse of rfft for a Hermitian spectrum: E[k] = (X[k] + conj X[h-k]) / 2,
// O[k] = (X[k] - conj X[h-k]) conj(W^k) / 2, Z = E + i O; z = IDFT_h(Z) / h holds
// x[2j] + i x[2j+1]. The imaginary parts of X[0] and X[h] do not take part.
void PerthStft::irfft(const double* re, const double* im, double* frame, double* scratch) const {
    const int h = n_fft_ / 2;
    double *zr = scratch, *zi = zr + h, *yr = zi + h, *yi = yr + h;
    for (int k = 0; k < h; ++k) {
        const double ar = re[k], ai = k == 0 ? 0.0 : im[k];
        const double br = re[h - k], bi = (h - k == h || k == 0) ? 0.0 : -im[h - k];  // conj X[h-k]
        const double er = 0.5 * (ar + br), ei = 0.5 * (ai + bi);
        const double dr = 0.5 * (ar - br), di = 0.5 * (ai - bi);
        const double ore = dr * w_re_[k] + di * w_im_[k], oi = di * w_re_[k] - dr * w_im_[k];  // (dr + i di) conj W^k
        zr[k] = er - oi;
        zi[k] = ei + ore;
    }
    half_.inverse(zr, zi, yr, yi, yi + h, yi + 2 * h);
    for (int j = 0; j < h; ++j) {
        frame[2 * j] = yr[j] / h;
        frame[2 * j + 1] = yi[j] / h;
    }
}

Spectrogram PerthStft::forward(const float* x, int64_t n, int threads) const {
    if (n < min_length())
        throw EngineError("the STFT needs at least " + std::to_string(min_length()) + " samples, got " +
                          std::to_string(n));
    Spectrogram s;
    s.frames = frames(n);
    s.n_bins = n_bins();
    s.re.resize(static_cast<size_t>(s.frames * s.n_bins));
    s.im.resize(s.re.size());
    const int N = n_fft_, F = s.n_bins;
    parallel_for(s.frames, threads, 8, [&](int64_t t0, int64_t t1) {
        std::vector<double> frame(N), buf(4 * N), re(F), im(F);
        for (int64_t t = t0; t < t1; ++t) {
            reflect_windowed_frame(x, n, t * hop_ - N / 2, window_, frame.data());
            rfft(frame.data(), re.data(), im.data(), buf.data());
            float* orow = s.re.data() + t * F;
            float* irow = s.im.data() + t * F;
            for (int k = 0; k < F; ++k) orow[k] = static_cast<float>(re[k]), irow[k] = static_cast<float>(im[k]);
        }
    });
    return s;
}

std::vector<float> PerthStft::inverse(const Spectrogram& spec, int threads) const {
    const int N = n_fft_, F = n_bins(), pad = N / 2;
    const int64_t T = spec.frames;
    if (spec.n_bins != F || T < 1) throw EngineError("inverse STFT: spectrogram does not match the transform");
    // Frames in parallel, then overlap-add in order.
    std::vector<float> frames(static_cast<size_t>(T * N));
    parallel_for(T, threads, 8, [&](int64_t t0, int64_t t1) {
        std::vector<double> re(F), im(F), frame(N), buf(4 * N);
        for (int64_t t = t0; t < t1; ++t) {
            for (int k = 0; k < F; ++k) re[k] = spec.re[t * F + k], im[k] = spec.im[t * F + k];
            irfft(re.data(), im.data(), frame.data(), buf.data());
            float* out = frames.data() + t * N;
            for (int i = 0; i < N; ++i) out[i] = static_cast<float>(frame[i] * window_[i]);
        }
    });
    const int64_t full = N + static_cast<int64_t>(hop_) * (T - 1), n_out = static_cast<int64_t>(hop_) * (T - 1);
    std::vector<double> y(full, 0.0), env(full, 0.0);
    for (int64_t t = 0; t < T; ++t) {
        const float* f = frames.data() + t * N;
        double* yt = y.data() + t * hop_;
        double* et = env.data() + t * hop_;
        for (int i = 0; i < N; ++i) {
            yt[i] += f[i];
            et[i] += static_cast<double>(window_[i]) * window_[i];
        }
    }
    std::vector<float> out(static_cast<size_t>(n_out));
    for (int64_t i = 0; i < n_out; ++i) {
        const double e = env[pad + i];
        if (std::abs(e) < 1e-11) throw EngineError("inverse STFT: the window envelope is zero (window/hop inconsistent)");
        out[i] = static_cast<float>(y[pad + i] / e);
    }
    return out;
}

}  // namespace cbs
