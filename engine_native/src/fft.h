// A small mixed-radix FFT in double precision for the feature extractors' STFTs
// (n_fft 1920, 512, 400: factors 2, 3, 5). Double keeps near-silent bins exact enough
// for log features, where an f32 DFT-as-matmul is off by 1e-5 of full scale.
#pragma once

#include <complex>
#include <cstdint>
#include <vector>

namespace cbs {

// Forward DFT X[k] = sum_n x[n] exp(-2 pi i k n / N) of any length (radix 2/3/5 fast,
// other prime factors by direct DFT).
std::vector<std::complex<double>> fft(const std::vector<std::complex<double>>& x);

// |DFT| of a real frame for bins 0..N/2 (the onesided spectrum), as power if `power`.
std::vector<double> rfft_magnitude(const std::vector<double>& frame, bool power);

// frame[k] = x[start + k] * window[k] for k < window.size(), indexing x with reflection at
// both ends (numpy/torch "reflect" padding: the edge sample is not repeated).
void reflect_windowed_frame(const std::vector<float>& x, int64_t start, const std::vector<float>& window,
                            std::vector<double>& frame);

}  // namespace cbs
