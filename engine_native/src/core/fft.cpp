#include "core/fft.h"

#include <algorithm>
#include <cmath>
#include <string>
#include "core/errors.h"

namespace cbs {

namespace {

// exp(-2 pi i j / n) for j < count into re, im: computed in double, exact at multiples of n / 4.
template <class T>
void unit_roots(int n, int count, std::vector<T>& re, std::vector<T>& im) {
    re.resize(count);
    im.resize(count);
    for (int j = 0; j < count; ++j) {
        const int64_t q = int64_t{4} * j;
        if (q % n == 0) {  // 1, -i, -1, i
            const int64_t quarter = (q / n) % 4;
            re[j] = static_cast<T>(quarter == 0 ? 1 : quarter == 2 ? -1 : 0);
            im[j] = static_cast<T>(quarter == 1 ? -1 : quarter == 3 ? 1 : 0);
            continue;
        }
        const double a = -2.0 * M_PI * static_cast<double>(j) / static_cast<double>(n);
        re[j] = static_cast<T>(std::cos(a));
        im[j] = static_cast<T>(std::sin(a));
    }
}

}  // namespace

template <class T>
FftPlan<T>::FftPlan(int n) : n_(n) {
    if (n < 1) throw EngineError("FFT length must be positive, got " + std::to_string(n));
    int rest = n;
    while (rest % 4 == 0) radices_.push_back(4), rest /= 4;
    for (int p = 2; rest > 1; ++p) {
        if (p * p > rest) p = rest;  // what is left is prime
        while (rest % p == 0) radices_.push_back(p), rest /= p;
    }
    unit_roots(n, n, w_re_, w_im_);
}

template class FftPlan<float>;
template class FftPlan<double>;

RealFft::RealFft(int n) : n_(n) {
    if (n < 2 || n % 2 != 0) throw EngineError("real FFT length must be even and at least 2, got " + std::to_string(n));
    half_ = FftPlan<double>(n / 2);
    unit_roots(n, n / 2 + 1, w_re_, w_im_);
}

// z[j] = x[2j] + i x[2j+1] transformed at length h = n/2 gives Z; the even and odd halves
// are E[k] = (Z[k] + conj Z[h-k]) / 2 and O[k] = -i (Z[k] - conj Z[h-k]) / 2, and
// X[k] = E[k] + W_n^k O[k] for k = 0..h (indices of Z modulo h).
void RealFft::power(const double* frame, double* power, double* scratch) const {
    const int h = n_ / 2;
    double *xr = scratch, *xi = xr + h, *zr = xi + h, *zi = zr + h;
    for (int j = 0; j < h; ++j) xr[j] = frame[2 * j], xi[j] = frame[2 * j + 1];
    half_.forward(xr, xi, zr, zi, zi + h, zi + 2 * h);
    for (int k = 0; k <= h; ++k) {
        const int a = k == h ? 0 : k, b = k == 0 ? 0 : h - k;  // Z[k] and conj Z[h - k]
        const double er = 0.5 * (zr[a] + zr[b]), ei = 0.5 * (zi[a] - zi[b]);
        const double ore = 0.5 * (zi[a] + zi[b]), oi = -0.5 * (zr[a] - zr[b]);
        const double xr_k = er + (w_re_[k] * ore - w_im_[k] * oi), xi_k = ei + (w_re_[k] * oi + w_im_[k] * ore);
        power[k] = xr_k * xr_k + xi_k * xi_k;
    }
}

void reflect_windowed_frame(const float* x, int64_t n, int64_t start, const std::vector<float>& window,
                            double* frame) {
    const int64_t len = static_cast<int64_t>(window.size());
    if (start >= 0 && start + len <= n) {  // interior frames: no index arithmetic
        for (int64_t k = 0; k < len; ++k) frame[k] = static_cast<double>(x[start + k]) * window[k];
        return;
    }
    for (int64_t k = 0; k < len; ++k) {
        int64_t idx = start + k;
        if (idx < 0) idx = -idx;
        if (idx >= n) idx = 2 * (n - 1) - idx;
        frame[k] = static_cast<double>(x[idx]) * window[k];
    }
}

}  // namespace cbs
