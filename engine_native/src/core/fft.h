// A small mixed-radix FFT in double precision for the feature extractors' STFTs
// (n_fft 1920, 512, 400: factors 2, 3, 5). Double keeps near-silent bins exact enough
// for log features, where an f32 DFT-as-matmul is off by 1e-5 of full scale.
//
// A plan per length holds the factorisation and twiddles; transforms then run without
// allocating (iterative Stockham, radix 4/2/3/5 butterflies, other primes by direct DFT).
// A real frame of even length n goes through one complex FFT of length n/2.
#pragma once

#include <complex>
#include <cstdint>
#include <vector>

namespace cbs {

using cdouble = std::complex<double>;

class FftPlan {
public:
    FftPlan() = default;
    explicit FftPlan(int n);
    int size() const { return n_; }
    // Forward DFT X[k] = sum_j x[j] exp(-2 pi i k j / n) of x[0..n) into out[0..n);
    // scratch holds n values. x may equal out; neither may be scratch.
    void forward(const cdouble* x, cdouble* out, cdouble* scratch) const;

private:
    int n_ = 0;
    std::vector<int> radices_;
    std::vector<cdouble> w_;  // exp(-2 pi i j / n), j < n
};

// The onesided power spectrum |X[k]|^2, k = 0..n/2, of real frames of even length n.
class RealFft {
public:
    RealFft() = default;
    explicit RealFft(int n);
    int size() const { return n_; }
    int n_bins() const { return n_ / 2 + 1; }
    // frame: n values; power: n/2 + 1 values; scratch: scratch_size() values.
    void power(const double* frame, double* power, cdouble* scratch) const;
    size_t scratch_size() const { return static_cast<size_t>(n_) + 2; }

private:
    int n_ = 0;
    FftPlan half_;
    std::vector<cdouble> w_;  // exp(-2 pi i k / n), k <= n/2
};

// Forward DFT of any length (allocating; for tests and one-off use).
std::vector<cdouble> fft(const std::vector<cdouble>& x);

// frame[k] = x[start + k] * window[k] for k < window.size(), indexing x with reflection at
// both ends (numpy/torch "reflect" padding: the edge sample is not repeated).
void reflect_windowed_frame(const float* x, int64_t n, int64_t start, const std::vector<float>& window,
                            double* frame);

}  // namespace cbs
