#include "t3/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <utility>

#include "core/errors.h"
#include "core/options.h"

namespace cbs {

static constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void SamplingParams::validate() const {
    check_option("temperature", temperature);
    check_option("top_k", top_k);
    check_option("top_p", top_p);
    check_option("repetition_penalty", repetition_penalty);
    check_option("min_p", min_p);
}

void SamplingParams::validate_processors() const {
    auto bad = [](const std::string& what) { throw ParameterError(what); };
    if (!std::isfinite(temperature) || temperature < 0.0f) bad("temperature must be >= 0, got " + std::to_string(temperature));
    if (top_k < 0) bad("top_k must be 0 (off) or positive, got " + std::to_string(top_k));
    if (!std::isfinite(top_p) || top_p < 0.0f || top_p > 1.0f) bad("top_p must be within [0, 1], got " + std::to_string(top_p));
    if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0f)
        bad("repetition_penalty must be > 0, got " + std::to_string(repetition_penalty));
    check_option("min_p", min_p);
}

void SamplingParams::validate_mtl() const {
    check_option("temperature", temperature);
    if (top_k != 0) check_option("top_k", top_k);
    check_option("top_p", top_p);
    check_option("repetition_penalty", repetition_penalty);
    check_option("min_p", min_p);
    if (!std::isfinite(cfg_weight)) throw ParameterError("cfg_weight must be a finite number");
}

std::vector<float> softmax(const std::vector<float>& logits) {
    const float mx = *std::max_element(logits.begin(), logits.end());
    std::vector<float> p(logits.size());
    if (mx == kNegInf) return p;
    double sum = 0.0;
    for (size_t i = 0; i < logits.size(); ++i) {
        if (logits[i] == kNegInf) continue;  // exp(-inf) is 0 exactly: a filtered token adds nothing
        p[i] = std::exp(logits[i] - mx);
        sum += p[i];
    }
    for (float& v : p) v = static_cast<float>(v / sum);
    return p;
}

// HF TopKLogitsWarper: remove scores strictly below the k-th largest (ties survive).
static void top_k_filter(std::vector<float>& s, int top_k) {
    const size_t k = std::min<size_t>(static_cast<size_t>(std::max(top_k, 1)), s.size());
    std::vector<float> sorted(s);
    std::nth_element(sorted.begin(), sorted.begin() + (k - 1), sorted.end(), std::greater<float>());
    const float kth = sorted[k - 1];
    for (float& v : s)
        if (v < kth) v = kNegInf;
}

// HF TopPLogitsWarper: sort ascending, cumulative softmax, drop while cum <= 1 - top_p,
// always keep the largest.
// Scores already -inf (top-k's) sort first with probability exactly 0 and stay -inf, so
// only the finite ones are sorted (the sums and the result are the same, 6x less work
// after the default top-k), as (score, index) pairs: sorted as pairs they give the stable
// sort's order (equal scores by index) without its merge buffer and indirect compares.
static void top_p_filter(std::vector<float>& s, float top_p) {
    std::vector<std::pair<float, int32_t>> order;
    order.reserve(s.size());
    for (size_t i = 0; i < s.size(); ++i)
        if (s[i] != kNegInf) order.emplace_back(s[i], static_cast<int32_t>(i));
    if (order.empty()) return;
    std::sort(order.begin(), order.end());
    std::vector<float> sorted(order.size());
    for (size_t i = 0; i < order.size(); ++i) sorted[i] = order[i].first;
    const std::vector<float> probs = softmax(sorted);
    double cum = 0.0;  // torch accumulates float cumsum in double on the CPU
    const float threshold = 1.0f - top_p;
    for (size_t i = 0; i + 1 < order.size(); ++i) {
        cum += probs[i];
        if (static_cast<float>(cum) <= threshold) s[order[i].second] = kNegInf;
    }
}

// HF MinPLogitsWarper: drop tokens whose probability is below min_p x the top probability.
static void min_p_filter(std::vector<float>& s, float min_p) {
    const std::vector<float> probs = softmax(s);
    const size_t top = std::max_element(probs.begin(), probs.end()) - probs.begin();
    const float threshold = min_p * probs[top];
    for (size_t i = 0; i < s.size(); ++i)
        if (probs[i] < threshold && i != top) s[i] = kNegInf;
}

// HF RepetitionPenaltyLogitsProcessor: every token seen (once, however often it
// occurred) is divided by the penalty when positive, multiplied when negative.
static void repetition_penalty(std::vector<float>& s, const std::vector<int32_t>& history, float penalty) {
    std::vector<int32_t> seen(history);
    std::sort(seen.begin(), seen.end());
    seen.erase(std::unique(seen.begin(), seen.end()), seen.end());
    for (int32_t id : seen) {
        if (id < 0 || static_cast<size_t>(id) >= s.size()) continue;
        float& v = s[id];
        v = v < 0.0f ? v * penalty : v / penalty;
    }
}

void process_logits(std::vector<float>& s, const std::vector<int32_t>& history, const SamplingParams& p) {
    if (s.empty()) return;
    if (p.temperature > 0.0f && p.temperature != 1.0f)
        for (float& v : s) v = v / p.temperature;
    if (p.top_k > 0) top_k_filter(s, p.top_k);
    if (p.top_p < 1.0f) top_p_filter(s, p.top_p);
    if (p.min_p > 0.0f) min_p_filter(s, p.min_p);
    if (p.repetition_penalty != 1.0f) repetition_penalty(s, history, p.repetition_penalty);
}

void process_logits_mtl(std::vector<float>& s, const std::vector<int32_t>& history, const SamplingParams& p) {
    if (s.empty()) return;
    repetition_penalty(s, history, p.repetition_penalty);
    if (p.temperature != 1.0f)
        for (float& v : s) v = v / p.temperature;
    if (p.min_p > 0.0f) min_p_filter(s, p.min_p);
    // At top_p = 1 HF's warper only drops tokens of probability 0: nothing to do.
    if (p.top_p < 1.0f) top_p_filter(s, p.top_p);
    if (p.top_k > 0) top_k_filter(s, p.top_k);
}

void apply_guidance(float* cond, const float* uncond, size_t n, float w) {
    for (size_t i = 0; i < n; ++i) {
        const float diff = cond[i] - uncond[i];
        const float scaled = w * diff;  // separate roundings, as torch's three ops
        cond[i] = cond[i] + scaled;
    }
}

int32_t Sampler::draw(const std::vector<float>& processed) {
    const std::vector<float> probs = softmax(processed);
    double total = 0.0;
    for (float v : probs) total += v;
    if (total <= 0.0) return -1;
    const double u = std::uniform_real_distribution<double>(0.0, total)(rng_);
    double cum = 0.0;
    int32_t last = -1;
    for (size_t i = 0; i < probs.size(); ++i) {
        if (probs[i] <= 0.0f) continue;
        cum += probs[i];
        last = static_cast<int32_t>(i);
        if (u < cum) return last;
    }
    return last;
}

}  // namespace cbs
