// T3's sampler: the logits processors of the reference `T3.inference_turbo`, in its
// order (temperature -> top-k -> top-p -> repetition penalty), then a draw from a
// seeded RNG. min_p (HF's MinPLogitsWarper) is not used by the reference Turbo path;
// when set above 0 it runs after top-p, before the repetition penalty.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace cbs {

struct SamplingParams {
    float temperature = 0.8f;
    int top_k = 1000;
    float top_p = 0.95f;
    float repetition_penalty = 1.2f;
    float min_p = 0.0f;
    // Throws ParameterError for a value outside its range in the options table.
    void validate() const;
    // The processors' own domain, wider than the options' (0 switches temperature,
    // top_k and top_p off): for the sampler_process parity seam only.
    void validate_processors() const;
};

// Applies the processors in place; -inf marks removed tokens. `history` is what the
// reference passes as input_ids: the start-of-speech token on the first step, then
// every generated token.
void process_logits(std::vector<float>& logits, const std::vector<int32_t>& history, const SamplingParams& p);

// softmax of processed logits (what torch.multinomial draws from).
std::vector<float> softmax(const std::vector<float>& logits);

class Sampler {
public:
    explicit Sampler(uint64_t seed) : rng_(seed) {}
    // A draw from softmax(logits); -1 when every logit is -inf (the reference stops there).
    int32_t draw(const std::vector<float>& processed_logits);

private:
    std::mt19937_64 rng_;
};

}  // namespace cbs
