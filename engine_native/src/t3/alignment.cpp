#include "t3/alignment.h"

#include <algorithm>
#include <string>

namespace cbs {

AlignmentParams AlignmentParams::from(const ModelFile& mf) {
    auto i = [&](const char* k) { return static_cast<int>(mf.get_int(std::string("chatterbox.t3.align.") + k)); };
    auto f = [&](const char* k) { return static_cast<float>(mf.get_float(std::string("chatterbox.t3.align.") + k)); };
    AlignmentParams p;
    p.window_lo = i("window_lo");
    p.window_hi = i("window_hi");
    p.complete_margin = i("complete_margin");
    p.long_tail = f("long_tail");
    p.repetition = f("repetition");
    p.min_text = i("min_text");
    p.force_value = f("force_value");
    return p;
}

AlignmentAnalyzer::AlignmentAnalyzer(const AlignmentParams& p, int n_text, int32_t eos)
    : p_(p), S_(n_text), eos_(eos), tail_sums_(std::min(n_text, 3), 0.0) {}

std::vector<float> AlignmentAnalyzer::head_mean(const std::vector<float>& heads, int n_heads) {
    const size_t n = n_heads > 0 ? heads.size() / n_heads : 0;
    std::vector<float> out(n, 0.0f);
    for (int h = 0; h < n_heads; ++h)
        for (size_t k = 0; k < n; ++k) out[k] += heads[h * n + k];
    for (float& v : out) v /= static_cast<float>(n_heads);
    return out;
}

bool AlignmentAnalyzer::step(std::vector<float>& logits, std::vector<float> chunk, int rows, int32_t last_token) {
    const int S = S_;
    if (rows < 1 || chunk.size() != static_cast<size_t>(rows) * S)
        throw EngineError("alignment chunk has " + std::to_string(chunk.size()) + " values; expected rows x " +
                          std::to_string(S) + " text tokens");
    if (eos_ < 0 || static_cast<size_t>(eos_) >= logits.size())
        throw EngineError("the logits do not reach the stop token " + std::to_string(eos_));
    // Monotonic mask: text columns past the frame count are not visible yet.
    for (int r = 0; r < rows; ++r)
        for (int c = frame_ + 1; c < S; ++c) chunk[static_cast<size_t>(r) * S + c] = 0.0f;
    rows_ += rows;

    // The position is the first maximum of the chunk's last row; a jump outside the
    // window is ignored.
    const float* last = chunk.data() + static_cast<size_t>(rows - 1) * S;
    const int cur = static_cast<int>(std::max_element(last, last + S) - last);
    if (p_.window_lo < cur - text_position_ && cur - text_position_ < p_.window_hi) text_position_ = cur;

    complete_ = complete_ || text_position_ >= S - p_.complete_margin;
    if (complete_ && completed_at_ < 0) {
        completed_at_ = rows_;  // the rows appended from now on count
    } else if (complete_) {
        const int n_tail = static_cast<int>(tail_sums_.size());
        for (int r = 0; r < rows; ++r) {
            const float* row = chunk.data() + static_cast<size_t>(r) * S;
            for (int c = 0; c < n_tail; ++c) tail_sums_[c] += row[S - n_tail + c];
            // A[:, :-5] has no columns for texts of 5 tokens or fewer: the reference's
            // max() raises there; no repetition is counted instead.
            if (S > 5) repetition_sum_ += *std::max_element(row, row + (S - 5));
        }
    }
    const bool long_tail = complete_ && !tail_sums_.empty() &&
                           *std::max_element(tail_sums_.begin(), tail_sums_.end()) >= p_.long_tail;
    const bool alignment_repetition = complete_ && repetition_sum_ > p_.repetition;

    recent_.push_back(last_token);
    if (recent_.size() > 8) recent_.erase(recent_.begin());
    const bool token_repetition = recent_.size() >= 3 && recent_[recent_.size() - 1] == recent_[recent_.size() - 2];

    suppressed_ = cur < S - p_.complete_margin && S > p_.min_text;
    if (suppressed_) logits[eos_] = -p_.force_value;
    const bool forced = long_tail || alignment_repetition || token_repetition;
    if (forced) {
        std::fill(logits.begin(), logits.end(), -p_.force_value);
        logits[eos_] = p_.force_value;
    }
    frame_ += 1;
    return forced;
}

}  // namespace cbs
