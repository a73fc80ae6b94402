// T3's sampler: the logits processors of the reference, then a draw from a seeded RNG.
// - Turbo / Nano (`T3.inference_turbo`): temperature -> top-k -> top-p -> repetition
//   penalty. min_p (HF's MinPLogitsWarper) is not used by that path; when set above 0
//   it runs after top-p, before the repetition penalty.
// - Multilingual (`T3.inference`): guidance (cond + w (cond - uncond)) and the alignment
//   analyzer first, then repetition penalty -> temperature -> min-p -> top-p
//   (process_logits_mtl). The reference has no top-k there; top_k > 0 (1: greedy) is
//   applied last.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace cbs {

// Every value is given by the caller: the defaults live in the model file
// (chatterbox.sampling.*, written by the converter).
struct SamplingParams {
    float temperature = 0.0f;
    int top_k = 0;
    float top_p = 0.0f;
    float repetition_penalty = 0.0f;
    float min_p = 0.0f;
    float cfg_weight = 0.0f;  // Multilingual: classifier-free guidance weight (<= 0: none)
    // Throws ParameterError for a value outside its range in the options table.
    void validate() const;
    // The Multilingual sampler's domain: top_k 0 is off (its default), cfg_weight finite.
    void validate_mtl() const;
    // The processors' own domain, wider than the options' (0 switches temperature,
    // top_k and top_p off): for the sampler_process parity seam only.
    void validate_processors() const;
};

// Applies the processors in place; -inf marks removed tokens. `history` is what the
// reference passes as input_ids: the start-of-speech token on the first step, then
// every generated token.
void process_logits(std::vector<float>& logits, const std::vector<int32_t>& history, const SamplingParams& p);
// The Multilingual order (after guidance and the analyzer); `history` is the reference's
// generated_ids: the start-of-speech token, then every generated token.
void process_logits_mtl(std::vector<float>& logits, const std::vector<int32_t>& history, const SamplingParams& p);
// Classifier-free guidance as the reference combines it: cond + w * (cond - uncond),
// in float32, into `cond`.
void apply_guidance(float* cond, const float* uncond, size_t n, float cfg_weight);

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
