#include "fft.h"

#include <cmath>

namespace cbs {

std::vector<std::complex<double>> fft(const std::vector<std::complex<double>>& x) {
    const size_t n = x.size();
    if (n <= 1) return x;
    size_t p = 2;
    while (p * p <= n && n % p != 0) ++p;
    if (n % p != 0) p = n;  // prime length: direct DFT
    const size_t m = n / p;
    // Decimation in time: p interleaved sub-sequences of length m.
    std::vector<std::vector<std::complex<double>>> sub(p);
    for (size_t r = 0; r < p; ++r) {
        std::vector<std::complex<double>> s(m);
        for (size_t j = 0; j < m; ++j) s[j] = x[j * p + r];
        sub[r] = m > 1 ? fft(s) : s;
    }
    std::vector<std::complex<double>> out(n);
    for (size_t k = 0; k < n; ++k) {
        std::complex<double> acc = 0.0;
        for (size_t r = 0; r < p; ++r) {
            const double a = -2.0 * M_PI * static_cast<double>((r * k) % n) / static_cast<double>(n);
            acc += sub[r][k % m] * std::complex<double>(std::cos(a), std::sin(a));
        }
        out[k] = acc;
    }
    return out;
}

std::vector<double> rfft_magnitude(const std::vector<double>& frame, bool power) {
    std::vector<std::complex<double>> x(frame.begin(), frame.end());
    const std::vector<std::complex<double>> X = fft(x);
    std::vector<double> out(frame.size() / 2 + 1);
    for (size_t k = 0; k < out.size(); ++k) out[k] = power ? std::norm(X[k]) : std::abs(X[k]);
    return out;
}

void reflect_windowed_frame(const std::vector<float>& x, int64_t start, const std::vector<float>& window,
                            std::vector<double>& frame) {
    const int64_t n = static_cast<int64_t>(x.size());
    for (size_t k = 0; k < window.size(); ++k) {
        int64_t idx = start + static_cast<int64_t>(k);
        if (idx < 0) idx = -idx;
        if (idx >= n) idx = 2 * (n - 1) - idx;
        frame[k] = static_cast<double>(x[idx]) * window[k];
    }
}

}  // namespace cbs
