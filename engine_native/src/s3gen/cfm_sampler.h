// S3Gen's CFM sampler: the speaker projection, the prompt mel as condition, the Euler times,
// and the integration from the initial noise x0 to the mel (meanflow, or the standard CFM
// with classifier-free guidance), whole or after a stream's cached prefix.
#pragma once

#include <memory>
#include <vector>

#include "core/model_file.h"
#include "s3gen/cfm_estimator.h"

namespace cbs {

// The flow's CFM: spk projection, cond from the prompt mel, and the Euler sampler.
class S3GenCfm {
public:
    S3GenCfm(const ModelFile& mf, ggml_backend_t backend);

    // mu: row-major [n_mels][T] (encoder output for prompt + speech tokens);
    // prompt_feat: row-major [T_prompt][n_mels] (T_prompt <= T); embedding: the voice's
    // x-vector; x0: row-major [n_mels][T], the initial noise as the estimator first sees it.
    // Returns the mel for frames T_prompt.. T-1, row-major [n_mels][T - T_prompt].
    // n_steps overrides the model's Euler step count (0 = the model's; meanflow models
    // can be sampled in 1 step for speed, at some loss of detail).
    std::vector<float> sample(const std::vector<float>& mu, int T, const std::vector<float>& prompt_feat,
                              const std::vector<float>& embedding, const std::vector<float>& x0, int n_steps = 0);

    // One estimator evaluation at time t on x (row-major [n_mels][T]), arguments as sample():
    // the conditional velocity, and for the standard CFM the unconditional one (mu, spks and
    // cond zero), each row-major [n_mels][T]. The parity seam for every Euler step.
    std::vector<std::vector<float>> velocities(const std::vector<float>& mu, int T, const std::vector<float>& prompt_feat,
                                               const std::vector<float>& embedding, const std::vector<float>& x,
                                               float t, float r);

    // Streaming with the voice prompt as a cached prefix (both kinds of CFM; CfmEstimator's
    // record_prefix says how). make_prefix takes the prompt's frames alone: mu, x0 row-major
    // [n_mels][P] and prompt_feat [P][n_mels], as sample() would over P frames. Then
    // sample_after_prefix(prefix, mu, T, x0) ([n_mels][T] each, the frames after the prompt)
    // returns their mel [n_mels][T] with the prefix's speaker and step count.
    std::shared_ptr<CfmPrefix> make_prefix(const std::vector<float>& mu, int P, const std::vector<float>& prompt_feat,
                                           const std::vector<float>& embedding, const std::vector<float>& x0,
                                           int n_steps = 0);
    std::vector<float> sample_after_prefix(const CfmPrefix& prefix, const std::vector<float>& mu, int T,
                                           const std::vector<float>& x0);

    int n_mels() const { return est_.n_mels(); }
    int n_timesteps() const { return n_timesteps_; }
    bool guided() const { return !meanflow_; }
    double cfg_rate() const { return cfg_rate_; }
    // The standard CFM's guidance rows in one batch-of-two evaluation per step (true, as the
    // reference) or two evaluations. Same result (within rounding). The default: two on the
    // CPU (the batch costs a little more time there: docs/CPU.md), the batch on a GPU (half
    // the graph's nodes, whose launches bound a step there: docs/GPU.md).
    bool guidance_batched() const { return guidance_batched_; }
    void set_guidance_batched(bool b) { guidance_batched_ = b; }
    bool replay_steps() const { return est_.replay_steps(); }
    void set_replay_steps(bool on) { est_.set_replay_steps(on); }
    // The Euler times for n_steps: torch.linspace(0, 1, n_steps + 1) in float32, then for the
    // standard CFM with the cosine scheduler 1 - cos(t * 0.5 * pi) in float32.
    std::vector<float> t_span(int n_steps) const;

private:
    // Validates sample()'s arguments; spks = spk_embed_affine_layer(F.normalize(embedding))
    // and cond = the prompt mel in the first T_prompt frames, zeros after ([n_mels][T]).
    // Returns T_prompt.
    int conditioning(const std::vector<float>& mu, int T, const std::vector<float>& prompt_feat,
                     const std::vector<float>& embedding, const std::vector<float>& x0, std::vector<float>& spks,
                     std::vector<float>& cond) const;

    CfmEstimator est_;
    std::vector<float> spk_w_, spk_b_;  // spk_embed_affine_layer, host copies
    int spk_in_, spk_out_, n_timesteps_;
    bool meanflow_, cosine_ = true, guidance_batched_ = false;
    double cfg_rate_ = 0.7;  // CFM_PARAMS.inference_cfg_rate, for files without the key
};

}  // namespace cbs
