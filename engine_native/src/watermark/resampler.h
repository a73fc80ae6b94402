// The two resamplers the Perth watermarker's reference runs through librosa.resample:
// `soxr_hq` (its default, libsoxr's HQ recipe) on the way into and out of the watermarker,
// and `polyphase` (scipy.signal.resample_poly) in the detector.
//
// Both are the same linear-phase polyphase FIR, y[k] = sum_n x[n] h[c + k M - n L] with
// x zero outside [0, n) and c the filter's centre; they differ in the filter and in the
// output length (librosa then cuts or zero-pads to ceil(n * out / in): fixed_length()).
//
// soxr: libsoxr 0.1.3 at SOXR_HQ (20-bit precision, linear phase) plans a single
// rational stage (up L, down M, filtered by one Kaiser-windowed sinc at the up-sampled
// rate) for the ratios whose reduced L, M are small (24000 <-> 32000 is 4/3 and 3/4;
// 16000, 48000, 8000 <-> 32000 too); other ratios take its multi-stage paths and are
// refused here (ParameterError). The filter follows libsoxr's published design rule
// (pass-band end from its -3 dB model, attenuation (bits + 1) x 6.02 dB, its Kaiser beta
// fit, tap count = 1 mod 2L or 4); it outputs round(n L / M) samples, as libsoxr does when
// flushed. libsoxr filters in f32 through FFT blocks (and drops the aliases of a 2x or 4x
// decimation in the frequency domain): the same values within ~1e-7 of full scale.
//
// polyphase: scipy's firwin(2 * 10 max(L, M) + 1, 1 / max(L, M), kaiser 5.0) times L, in
// f32 like scipy for f32 input; ceil(n L / M) samples.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cbs {

class RationalResampler {
public:
    // libsoxr HQ as librosa calls it (res_type "soxr_hq"). ParameterError for a ratio that
    // libsoxr does not run as one rational stage, or rates outside 1 Hz .. 1 MHz.
    static RationalResampler soxr_hq(int in_rate, int out_rate);
    // scipy.signal.resample_poly as librosa calls it (res_type "polyphase").
    static RationalResampler polyphase(int in_rate, int out_rate);

    int up() const { return L_; }
    int down() const { return M_; }
    int taps() const { return static_cast<int>(h_.size()); }
    // The samples the resampler itself yields for n input samples (before librosa's fix).
    int64_t natural_length(int64_t n) const;
    // librosa's fix_length target: ceil(n * (out_rate / in_rate)) in double, as librosa.
    int64_t fixed_length(int64_t n) const;

    // x[0..n) resampled, cut or zero-padded to fixed_length(n) (librosa.resample, fix=True);
    // `threads` split the output.
    std::vector<float> process(const float* x, int64_t n, int threads) const;

private:
    RationalResampler(int in_rate, int out_rate, int L, int M, std::vector<double> h, bool soxr_length);

    int in_rate_ = 1, out_rate_ = 1, L_ = 1, M_ = 1;
    int centre_ = 0;
    bool soxr_length_ = false;
    std::vector<double> h_;
    // phases_[p]: the taps h[p + L j] reversed (j descending), padded with zeros to
    // phase_len_, so an output is one contiguous dot product with the input.
    std::vector<std::vector<float>> phases_;
    int phase_len_ = 0;
};

}  // namespace cbs
