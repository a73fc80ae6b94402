// A stream's cached CFM prefix: the voice prompt's part of every Euler step, kept so that a
// stream's later passes integrate only their own frames (CfmEstimator::record_prefix).
#pragma once

#include <cstddef>
#include <optional>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"

namespace cbs {

// A stream's cached CFM prefix (CfmEstimator::record_prefix): for every Euler step, the
// tensors an estimator evaluation meets over the prefix, in graph order: each attention's
// keys and values [A, P] (Q8_0) and each causal convolution's last K-1 input frames
// [C_in, K-1], in a buffer of its own on the estimator's device. Freed with its last owner.
class CfmPrefix {
public:
    CfmPrefix() = default;
    ~CfmPrefix();
    CfmPrefix(const CfmPrefix&) = delete;
    CfmPrefix& operator=(const CfmPrefix&) = delete;
    int frames() const { return frames_; }
    size_t bytes() const;

private:
    friend class CfmEstimator;
    friend class S3GenCfm;
    int frames_ = 0;
    std::vector<float> ts_, spks_;  // its Euler times; S3GenCfm: its speaker (spks)
    std::optional<double> guidance_;  // the standard CFM's guidance rate (both rows kept)
    ggml_context* ctx_ = nullptr;
    ggml_backend_buffer_t buf_ = nullptr;
    std::vector<std::vector<ggml_tensor*>> steps_;
};

}  // namespace cbs
