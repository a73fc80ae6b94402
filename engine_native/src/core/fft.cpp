#include "core/fft.h"

#include <algorithm>
#include <cmath>
#include "core/errors.h"

namespace cbs {

namespace {

std::vector<cdouble> unit_roots(int n, int count) {  // exp(-2 pi i j / n), j < count
    std::vector<cdouble> w(count);
    for (int j = 0; j < count; ++j) {
        const double a = -2.0 * M_PI * static_cast<double>(j) / static_cast<double>(n);
        w[j] = cdouble(std::cos(a), std::sin(a));
    }
    return w;
}

inline cdouble mul_neg_i(cdouble z) { return cdouble(z.imag(), -z.real()); }  // z * (-i)

// Plain complex product (std::complex's operator* adds NaN/infinity recovery branches).
inline cdouble mul(cdouble a, cdouble b) {
    return cdouble(a.real() * b.real() - a.imag() * b.imag(), a.real() * b.imag() + a.imag() * b.real());
}

}  // namespace

FftPlan::FftPlan(int n) : n_(n) {
    if (n < 1) throw EngineError("FFT length must be positive");
    int rest = n;
    while (rest % 4 == 0) radices_.push_back(4), rest /= 4;
    for (int p = 2; rest > 1; ++p) {
        if (p * p > rest) p = rest;  // what is left is prime
        while (rest % p == 0) radices_.push_back(p), rest /= p;
    }
    w_ = unit_roots(n, n);
}

// Stockham autosort, decimation in frequency: the stage of radix p at sub-length L = n / s
// (s = product of the radices already applied, m = L / p) maps
//   y[q + s (p j + k)] = W_L^(j k) * sum_r x[q + s (j + r m)] W_p^(r k)
// for j < m, q < s, k < p; the output comes out in natural order, no bit reversal.
void FftPlan::forward(const cdouble* x, cdouble* out, cdouble* scratch) const {
    const int n = n_;
    if (x != out) std::copy(x, x + n, out);
    cdouble* src = out;
    cdouble* dst = scratch;
    std::vector<cdouble> a, b;  // only for radices above 5
    int s = 1;
    for (int p : radices_) {
        const int m = n / (s * p);
        const cdouble* w = w_.data();
        for (int j = 0; j < m; ++j) {
            // W_L^(j k) = W_n^(j k s); j k s < n, so no wrap-around.
            const cdouble w1 = w[j * s];
            if (p == 4) {
                const cdouble w2 = w[2 * j * s], w3 = w[3 * j * s];
                for (int q = 0; q < s; ++q) {
                    const cdouble a0 = src[q + s * j], a1 = src[q + s * (j + m)];
                    const cdouble a2 = src[q + s * (j + 2 * m)], a3 = src[q + s * (j + 3 * m)];
                    const cdouble t0 = a0 + a2, t1 = a0 - a2, t2 = a1 + a3, t3 = mul_neg_i(a1 - a3);
                    cdouble* y = dst + q + s * 4 * j;
                    y[0] = t0 + t2;
                    y[s] = mul(t1 + t3, w1);
                    y[2 * s] = mul(t0 - t2, w2);
                    y[3 * s] = mul(t1 - t3, w3);
                }
            } else if (p == 2) {
                for (int q = 0; q < s; ++q) {
                    const cdouble a0 = src[q + s * j], a1 = src[q + s * (j + m)];
                    cdouble* y = dst + q + s * 2 * j;
                    y[0] = a0 + a1;
                    y[s] = mul(a0 - a1, w1);
                }
            } else if (p == 3) {
                const cdouble w2 = w[2 * j * s];
                const double h = std::sqrt(3.0) / 2.0;  // W_3 = -1/2 - i sqrt(3)/2
                for (int q = 0; q < s; ++q) {
                    const cdouble a0 = src[q + s * j], a1 = src[q + s * (j + m)], a2 = src[q + s * (j + 2 * m)];
                    const cdouble t1 = a1 + a2, c = a0 - 0.5 * t1, d = mul_neg_i(h * (a1 - a2));
                    cdouble* y = dst + q + s * 3 * j;
                    y[0] = a0 + t1;
                    y[s] = mul(c + d, w1);
                    y[2 * s] = mul(c - d, w2);
                }
            } else if (p == 5) {
                // With s1 = a1 + a4, d1 = a1 - a4, s2 = a2 + a3, d2 = a2 - a3 and W_5 = c1 - i s1:
                // X1,4 = a0 + c1 s1 + c2 s2 -/+ i (s1 d1 + s2 d2), X2,3 = a0 + c2 s1 + c1 s2 -/+ i (s2 d1 - s1 d2).
                const double c1 = std::cos(2 * M_PI / 5), c2 = std::cos(4 * M_PI / 5);
                const double n1 = std::sin(2 * M_PI / 5), n2 = std::sin(4 * M_PI / 5);
                const cdouble w2 = w[2 * j * s], w3 = w[3 * j * s], w4 = w[4 * j * s];
                for (int q = 0; q < s; ++q) {
                    const cdouble a0 = src[q + s * j], a1 = src[q + s * (j + m)], a2 = src[q + s * (j + 2 * m)];
                    const cdouble a3 = src[q + s * (j + 3 * m)], a4 = src[q + s * (j + 4 * m)];
                    const cdouble s1 = a1 + a4, d1 = a1 - a4, s2 = a2 + a3, d2 = a2 - a3;
                    const cdouble e1 = a0 + c1 * s1 + c2 * s2, e2 = a0 + c2 * s1 + c1 * s2;
                    const cdouble f1 = mul_neg_i(n1 * d1 + n2 * d2), f2 = mul_neg_i(n2 * d1 - n1 * d2);
                    cdouble* y = dst + q + s * 5 * j;
                    y[0] = a0 + s1 + s2;
                    y[s] = mul(e1 + f1, w1);
                    y[2 * s] = mul(e2 + f2, w2);
                    y[3 * s] = mul(e2 - f2, w3);
                    y[4 * s] = mul(e1 - f1, w4);
                }
            } else {  // any other prime: direct p-point DFT
                a.resize(p);
                b.resize(p);
                const int step = n / p;  // W_p^r = W_n^(r step)
                for (int q = 0; q < s; ++q) {
                    for (int r = 0; r < p; ++r) a[r] = src[q + s * (j + r * m)];
                    for (int k = 0; k < p; ++k) {
                        cdouble acc = a[0];
                        for (int r = 1; r < p; ++r) acc += mul(a[r], w[((r * k) % p) * step]);
                        b[k] = acc;
                    }
                    cdouble* y = dst + q + s * p * j;
                    y[0] = b[0];
                    for (int k = 1; k < p; ++k) y[k * s] = mul(b[k], w[j * k * s]);
                }
            }
        }
        std::swap(src, dst);
        s *= p;
    }
    if (src != out) std::copy(src, src + n, out);
}

RealFft::RealFft(int n) : n_(n), half_(std::max(1, n / 2)) {
    if (n < 2 || n % 2 != 0) throw EngineError("real FFT length must be even");
    w_ = unit_roots(n, n / 2 + 1);
}

// z[j] = x[2j] + i x[2j+1] transformed at length h = n/2 gives Z; the even and odd halves
// are E[k] = (Z[k] + conj Z[h-k]) / 2 and O[k] = -i (Z[k] - conj Z[h-k]) / 2, and
// X[k] = E[k] + W_n^k O[k] for k = 0..h (indices of Z modulo h).
void RealFft::power(const double* frame, double* power, cdouble* scratch) const {
    const int h = n_ / 2;
    cdouble* z = scratch;
    for (int j = 0; j < h; ++j) z[j] = cdouble(frame[2 * j], frame[2 * j + 1]);
    half_.forward(z, z, scratch + h);
    for (int k = 0; k <= h; ++k) {
        const cdouble zk = z[k == h ? 0 : k], zc = std::conj(z[k == 0 ? 0 : h - k]);
        const cdouble e = 0.5 * (zk + zc), o = mul_neg_i(0.5 * (zk - zc));
        power[k] = std::norm(e + mul(w_[k], o));
    }
}

std::vector<cdouble> fft(const std::vector<cdouble>& x) {
    if (x.size() <= 1) return x;
    const FftPlan plan(static_cast<int>(x.size()));
    std::vector<cdouble> out(x.size()), scratch(x.size());
    plan.forward(x.data(), out.data(), scratch.data());
    return out;
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
