// HiFT's neural-source-filter excitation (SineGen + SourceModuleHnNSF): f0 per mel
// frame -> the source signal `decode` consumes. Plain C++: it is elementwise over
// ~24 k samples per second and needs the reference's float32 steps, not a graph.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "model_file.h"

namespace cbs {

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
    // The same with phases ~ U(-pi, pi) and noise ~ N(0, 1) drawn from `rng`.
    std::vector<float> excitation(const std::vector<float>& f0, std::mt19937_64& rng) const;

private:
    int sample_rate_, n_harm_;
    int64_t upsample_;
    float sine_amp_, noise_std_, voiced_threshold_;
    std::vector<float> merge_w_;  // l_linear: n_harmonics -> 1
    float merge_b_;
};

}  // namespace cbs
