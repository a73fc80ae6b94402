// HiFT's neural-source-filter excitation (SineGen + SourceModuleHnNSF): f0 per mel
// frame -> the source signal `decode` consumes. Plain C++: it is elementwise over
// ~24 k samples per second and needs the reference's float32 steps, not a graph.
#pragma once

#include <condition_variable>
#include <functional>
#include <cstdint>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "core/model_file.h"

namespace cbs {

// One utterance's standard-normal draws, in order, from one mt19937_64. They depend on the
// seed alone, not on the mel, so a thread of their own draws them ahead (while T3 and
// S3Gen run) and HiFT finds them ready: the same numbers in the same order as drawing them
// on demand (the draw order is fixed: sample n's harmonics, then n + 1's).
class NoiseAhead {
public:
    // lead: how many draws to keep ready beyond the furthest one asked for.
    NoiseAhead(std::mt19937_64 rng, int64_t lead);
    ~NoiseAhead();
    NoiseAhead(const NoiseAhead&) = delete;
    NoiseAhead& operator=(const NoiseAhead&) = delete;

    // Draws [from, from + count) into out, waiting for the drawing thread if needed.
    void read(int64_t from, int64_t count, float* out);
    // Keep drawing until draw `end` (plus the lead) without waiting for it.
    void expect(int64_t end);

private:
    static constexpr int64_t kBlock = 1 << 16;
    void run();
    std::mutex mu_;
    std::condition_variable cv_;
    std::vector<std::unique_ptr<float[]>> blocks_;  // kBlock draws each; filled ones never change
    int64_t drawn_ = 0, target_, lead_;
    bool stop_ = false;
    std::mt19937_64 rng_;
    std::thread thread_;
};

// The random state of one utterance's excitation: per-harmonic phase offsets, the
// running phase sums and the noise, read in order from draws shared by copies (each copy
// keeps its own position). Continuing a state over f0 cut into pieces gives exactly the
// excitation of one call over the whole f0 (streaming == batch).
struct HiftSourceState {
    // lead_draws: noise drawn ahead of use (0: only on demand).
    HiftSourceState(int n_harmonics, uint64_t seed, int64_t lead_draws = 0);
    std::vector<float> phases;
    std::vector<double> phase_sum;  // torch's CPU cumsum accumulates float in double
    std::shared_ptr<NoiseAhead> noise;
    int64_t next_draw = 0;
};

class HiftSource {
public:
    explicit HiftSource(const ModelFile& mf);

    int n_harmonics() const { return n_harm_; }          // harmonics incl. the fundamental
    int64_t samples_per_frame() const { return upsample_; }

    // A fresh utterance state whose noise is drawn ahead (kLeadSeconds of audio).
    HiftSourceState state(uint64_t seed) const;
    // Ask for the noise of `frames` more mel frames from the state's position to be drawn ahead.
    void expect(const HiftSourceState& state, int64_t frames) const;

    // The excitation for f0 [T] with the random parts given: phases [n_harmonics]
    // (the fundamental's is forced to 0 as the reference does) and standard-normal
    // noise [n_harmonics][T * samples_per_frame()].
    std::vector<float> excitation(const std::vector<float>& f0, const std::vector<float>& phases,
                                  const std::vector<float>& noise) const;
    // The excitation for the next f0 frames of an utterance, advancing `state`.
    std::vector<float> excitation(const std::vector<float>& f0, HiftSourceState& state) const;

private:
    static constexpr int kLeadSeconds = 12;
    // Reads the draws of samples [begin, end) (sample-major: n * H + h) into out.
    using NoiseReader = std::function<void(int64_t begin, int64_t end, float* out)>;
    // The shared loop; noise of harmonic h at sample n is noise[h * h_stride + n * n_stride];
    // phase_sum [n_harmonics] carries the running sums in and out.
    std::vector<float> excite(const std::vector<float>& f0, const std::vector<float>& phases, const float* noise,
                              int64_t h_stride, int64_t n_stride, std::vector<double>& phase_sum) const;
    // The same with the noise read piece by piece through `read` (given == nullptr), or from
    // `given` as above.
    std::vector<float> excite(const std::vector<float>& f0, const std::vector<float>& phases, const NoiseReader& read,
                              int64_t h_stride, int64_t n_stride, std::vector<double>& phase_sum,
                              const float* given = nullptr) const;
    int sample_rate_, n_harm_;
    int64_t upsample_;
    float sine_amp_, noise_std_, voiced_threshold_;
    std::vector<float> merge_w_;  // l_linear: n_harmonics -> 1
    float merge_b_;
};

}  // namespace cbs
