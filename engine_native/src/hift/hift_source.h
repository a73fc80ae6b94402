// HiFT's neural-source-filter excitation (SineGen + SourceModuleHnNSF): f0 per mel
// frame -> the source signal `decode` consumes. Plain C++: it is elementwise over
// ~24 k samples per second and needs the reference's float32 steps, not a graph.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "core/model_file.h"

namespace cbs {

// The random state of one utterance's excitation: per-harmonic phase offsets, the
// running phase sums and one generator for the noise, drawn sample by sample (all
// harmonics of sample n, then n + 1). Continuing a state over f0 cut into pieces
// gives exactly the excitation of one call over the whole f0 (streaming == batch).
struct HiftSourceState {
    HiftSourceState(int n_harmonics, uint64_t seed);
    std::vector<float> phases;
    std::vector<double> phase_sum;  // torch's CPU cumsum accumulates float in double
    std::mt19937_64 rng;
    std::normal_distribution<float> normal{0.0f, 1.0f};
};

class HiftSource {
public:
    explicit HiftSource(const ModelFile& mf);

    int n_harmonics() const { return n_harm_; }          // harmonics incl. the fundamental
    int64_t samples_per_frame() const { return upsample_; }

    // The excitation for f0 [T] with the random parts given: phases [n_harmonics]
    // (the fundamental's is forced to 0 as the reference does) and standard-normal
    // noise [n_harmonics][T * samples_per_frame()].
    std::vector<float> excitation(const std::vector<float>& f0, const std::vector<float>& phases,
                                  const std::vector<float>& noise) const;
    // The excitation for the next f0 frames of an utterance, advancing `state`.
    std::vector<float> excitation(const std::vector<float>& f0, HiftSourceState& state) const;

private:
    // The shared loop; phase_sum [n_harmonics] carries the running sums in and out.
    std::vector<float> excite(const std::vector<float>& f0, const std::vector<float>& phases,
                              const std::vector<float>& noise, std::vector<double>& phase_sum) const;
    int sample_rate_, n_harm_;
    int64_t upsample_;
    float sine_amp_, noise_std_, voiced_threshold_;
    std::vector<float> merge_w_;  // l_linear: n_harmonics -> 1
    float merge_b_;
};

}  // namespace cbs
