#include "fft.h"

#include <cmath>
#include <unordered_map>

namespace cbs {

namespace {

using cd = std::complex<double>;

// exp(-2 pi i j / n) for j < n, per size, built once per thread: the recursion reads the
// twiddles of every sub-length from the full table (sub-lengths divide n).
const std::vector<cd>& twiddles(size_t n) {
    static thread_local std::unordered_map<size_t, std::vector<cd>> tables;
    std::vector<cd>& w = tables[n];
    if (w.size() != n) {
        w.resize(n);
        for (size_t j = 0; j < n; ++j) {
            const double a = -2.0 * M_PI * static_cast<double>(j) / static_cast<double>(n);
            w[j] = cd(std::cos(a), std::sin(a));
        }
    }
    return w;
}

// Mixed-radix decimation in time over x[0], x[stride], ...: n outputs into out.
// The twiddle for angle index j at this length is w[j * wstep].
void fft_rec(const cd* x, size_t stride, size_t n, const std::vector<cd>& w, size_t wstep, cd* out) {
    if (n == 1) {
        out[0] = x[0];
        return;
    }
    size_t p = 2;
    while (p * p <= n && n % p != 0) ++p;
    if (n % p != 0) p = n;  // prime length: direct DFT
    const size_t m = n / p;
    std::vector<cd> sub(n);  // p sub-transforms of length m, back to back
    for (size_t r = 0; r < p; ++r) fft_rec(x + r * stride, stride * p, m, w, wstep * p, sub.data() + r * m);
    for (size_t k = 0; k < n; ++k) {
        cd acc = 0.0;
        for (size_t r = 0; r < p; ++r) acc += sub[r * m + k % m] * w[((r * k) % n) * wstep];
        out[k] = acc;
    }
}

}  // namespace

std::vector<std::complex<double>> fft(const std::vector<std::complex<double>>& x) {
    const size_t n = x.size();
    if (n <= 1) return x;
    std::vector<cd> out(n);
    fft_rec(x.data(), 1, n, twiddles(n), 1, out.data());
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
