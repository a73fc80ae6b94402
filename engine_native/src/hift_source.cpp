#include "hift_source.h"

#include <cmath>
#include <string>

namespace cbs {

HiftSource::HiftSource(const ModelFile& mf) {
    sample_rate_ = static_cast<int>(mf.get_int("chatterbox.hift.sample_rate"));
    n_harm_ = static_cast<int>(mf.get_int("chatterbox.hift.nb_harmonics")) + 1;
    upsample_ = mf.get_int("chatterbox.hift.istft_hop");
    for (int64_t r : mf.get_int_array("chatterbox.hift.upsample_rates")) upsample_ *= r;
    sine_amp_ = static_cast<float>(mf.get_float("chatterbox.hift.nsf_alpha"));
    noise_std_ = static_cast<float>(mf.get_float("chatterbox.hift.nsf_sigma"));
    voiced_threshold_ = static_cast<float>(mf.get_float("chatterbox.hift.nsf_voiced_threshold"));
    merge_w_ = mf.read_f32(mf.tensor("hift.m_source.l_linear.weight"));
    merge_b_ = mf.read_f32(mf.tensor("hift.m_source.l_linear.bias")).at(0);
    if (static_cast<int>(merge_w_.size()) != n_harm_)
        throw EngineError(mf.path() + ": hift.m_source.l_linear does not match nb_harmonics");
}

std::vector<float> HiftSource::excitation(const std::vector<float>& f0, const std::vector<float>& phases,
                                          const std::vector<float>& noise) const {
    const int64_t N = static_cast<int64_t>(f0.size()) * upsample_;
    if (static_cast<int>(phases.size()) != n_harm_ || static_cast<int64_t>(noise.size()) != n_harm_ * N)
        throw EngineError("excitation: phases must hold " + std::to_string(n_harm_) + " values and noise " +
                          std::to_string(n_harm_ * N));
    const float two_pi = static_cast<float>(2.0 * M_PI);
    std::vector<double> acc(n_harm_, 0.0);  // torch's CPU cumsum accumulates float in double
    std::vector<float> out(N);
    for (int64_t n = 0; n < N; ++n) {
        const float f = f0[n / upsample_];  // nn.Upsample(mode="nearest")
        const bool voiced = f > voiced_threshold_;
        const float noise_amp = voiced ? noise_std_ : sine_amp_ / 3.0f;
        float merged = merge_b_;
        for (int h = 0; h < n_harm_; ++h) {
            const float step = f * static_cast<float>(h + 1) / static_cast<float>(sample_rate_);
            acc[h] += step;
            float cum = static_cast<float>(acc[h]);
            cum = cum - std::floor(cum);  // torch.remainder(x, 1)
            const float phase = h == 0 ? 0.0f : phases[h];
            float s = sine_amp_ * std::sin(two_pi * cum + phase);
            s = (voiced ? s : 0.0f) + noise_amp * noise[h * N + n];
            merged += merge_w_[h] * s;
        }
        out[n] = std::tanh(merged);
    }
    return out;
}

std::vector<float> HiftSource::excitation(const std::vector<float>& f0, std::mt19937_64& rng) const {
    const int64_t N = static_cast<int64_t>(f0.size()) * upsample_;
    std::uniform_real_distribution<float> uniform(static_cast<float>(-M_PI), static_cast<float>(M_PI));
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> phases(n_harm_);
    for (float& p : phases) p = uniform(rng);
    std::vector<float> noise(n_harm_ * N);
    for (float& v : noise) v = normal(rng);
    return excitation(f0, phases, noise);
}

}  // namespace cbs
