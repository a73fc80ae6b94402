// The Multilingual T3's AlignmentStreamAnalyzer (chatterbox t3/inference/
// alignment_stream_analyzer.py): it follows where the alignment heads' attention sits in
// the text, holds back the stop token until the text is nearly read, and forces it on a
// long tail, an alignment repetition or a token said twice in a row. It changes which
// tokens come out, so it runs between guidance and the sampler's processors.
//
// Not ported: its false-start tracking (`started`), which never touches the logits.
#pragma once

#include <cstdint>
#include <vector>

#include "core/model_file.h"

namespace cbs {

// The thresholds (chatterbox.t3.align.*).
struct AlignmentParams {
    int window_lo = -4, window_hi = 7;  // a step within (lo, hi) of the position moves it
    int complete_margin = 3;             // complete once position >= text - margin
    float long_tail = 5.0f;              // column-sum limit on the last 3 text tokens
    float repetition = 5.0f;             // limit on the summed row maxima of earlier text
    int min_text = 5;                    // the stop token is held back only for longer texts
    float force_value = 32768.0f;        // +-2^15, the reference's forcing value
    static AlignmentParams from(const ModelFile& mf);
};

class AlignmentAnalyzer {
public:
    // n_text: the text tokens T3 sees (start/stop text tokens included); eos: the stop
    // speech token.
    AlignmentAnalyzer(const AlignmentParams& p, int n_text, int32_t eos);

    // One decoding step: `chunk` is the heads' mean attention over the text for this
    // step's new positions, [rows][n_text] (the prompt: the start token's two rows; then
    // one row per step); `last_token` the token fed last (the start token at first).
    // Adjusts `logits` in place as the reference does; returns whether it forced the stop.
    bool step(std::vector<float>& logits, std::vector<float> chunk, int rows, int32_t last_token);

    // The state after the last step (for the parity seam).
    int text_position() const { return text_position_; }
    bool complete() const { return complete_; }
    bool suppressed() const { return suppressed_; }

    // The mean over the heads of `heads` [n_heads][rows][n_text] as torch's
    // stack(...).mean(0) computes it.
    static std::vector<float> head_mean(const std::vector<float>& heads, int n_heads);

private:
    AlignmentParams p_;
    int S_;
    int32_t eos_;
    int rows_ = 0;             // rows of the alignment matrix A so far
    int frame_ = 0;            // curr_frame_pos
    int text_position_ = 0;
    bool complete_ = false;
    int completed_at_ = -1;
    bool suppressed_ = false;
    // Over A's rows from completed_at on: column sums of the last 3 text columns, and the
    // sum of each row's maximum over the text before the last 5 tokens.
    std::vector<double> tail_sums_;
    double repetition_sum_ = 0.0;
    std::vector<int32_t> recent_;  // the last 8 tokens fed
};

}  // namespace cbs
