#include "hift/hift_source.h"

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

HiftSourceState::HiftSourceState(int n_harmonics, uint64_t seed) : phase_sum(n_harmonics, 0.0), rng(seed) {
    std::uniform_real_distribution<float> uniform(static_cast<float>(-M_PI), static_cast<float>(M_PI));
    for (int h = 0; h < n_harmonics; ++h) phases.push_back(uniform(rng));
}

std::vector<float> HiftSource::excitation(const std::vector<float>& f0, const std::vector<float>& phases,
                                          const std::vector<float>& noise) const {
    const int64_t N = static_cast<int64_t>(f0.size()) * upsample_;
    if (static_cast<int>(phases.size()) != n_harm_ || static_cast<int64_t>(noise.size()) != n_harm_ * N)
        throw EngineError("excitation: phases must hold " + std::to_string(n_harm_) + " values and noise " +
                          std::to_string(n_harm_ * N));
    std::vector<double> phase_sum(n_harm_, 0.0);
    return excite(f0, phases, noise, phase_sum);
}

std::vector<float> HiftSource::excitation(const std::vector<float>& f0, HiftSourceState& state) const {
    if (static_cast<int>(state.phases.size()) != n_harm_) throw EngineError("excitation state of another model");
    const int64_t N = static_cast<int64_t>(f0.size()) * upsample_;
    std::vector<float> noise(static_cast<size_t>(n_harm_) * N);
    for (int64_t n = 0; n < N; ++n)
        for (int h = 0; h < n_harm_; ++h) noise[h * N + n] = state.normal(state.rng);
    return excite(f0, state.phases, noise, state.phase_sum);
}

std::vector<float> HiftSource::excite(const std::vector<float>& f0, const std::vector<float>& phases,
                                      const std::vector<float>& noise, std::vector<double>& acc) const {
    const int64_t N = static_cast<int64_t>(f0.size()) * upsample_;
    const float two_pi = static_cast<float>(2.0 * M_PI);
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

}  // namespace cbs
