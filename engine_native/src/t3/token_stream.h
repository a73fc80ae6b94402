// T3's decode loop as a resumable loop over a KV cache the stream holds exclusively:
// `T3.inference_turbo` (Turbo, Nano), or `T3.inference` for a T3 with an alignment
// analyzer (Multilingual: guidance over the cache's two rows when cfg_weight > 0, the
// analyzer, then the MTL processors; the repetition history starts with the start token).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "t3/sampler.h"
#include "t3/t3_model.h"

namespace cbs {

// The constructor takes the cache (BusyError when another stream holds it) and prompts
// with [cond, text, start-of-speech]; next(n) samples up to n more tokens, so a caller
// can hand tokens on (streaming) and stop between calls. It ends at the stop token (kept
// in the output), a fully filtered distribution, `max_tokens`, cancel() or close(); the
// cache is released when it ends, and a stream never steps a cache it does not hold.
class SpeechTokenStream {
public:
    SpeechTokenStream(T3Model& t3, std::shared_ptr<T3Cache> cache, const T3Conditioning& cond,
                      const std::vector<int32_t>& text, const SamplingParams& params, int max_tokens, uint64_t seed);
    ~SpeechTokenStream();
    SpeechTokenStream(const SpeechTokenStream&) = delete;
    SpeechTokenStream& operator=(const SpeechTokenStream&) = delete;

    // Up to n more tokens; checks for cancel() between token steps and returns what it
    // has when cancelled.
    std::vector<int32_t> next(int n);
    // Any thread, no lock: the running or next next() stops before its next token step.
    void cancel() { cancel_.store(true); }
    // Ends the stream and releases its cache; from any thread (a running next() is
    // cancelled and finishes first).
    void close();
    bool done() const { return done_; }
    bool cancelled() const { return cancelled_; }
    // Every token so far (a copy: safe while another thread runs next()).
    std::vector<int32_t> tokens() const;
    const std::shared_ptr<T3Cache>& cache() const { return cache_; }

    // Multilingual: whether the analyzer forced the stop token for the next draw.
    bool forced_stop() const { return forced_; }

    // Up to n more tokens of each stream (streams of one T3, each at most once), the
    // streams' steps taken together (T3Model::step_batch): each round draws every live
    // stream's next token on the host with its own sampler, then steps all that go on in
    // one call. A stream ends, is cancelled or closed as in next(); returns each one's tokens.
    static std::vector<std::vector<int32_t>> next_together(const std::vector<SpeechTokenStream*>& streams, int n);

private:
    void finish();
    // Draws the next token into tokens_ and `out` (mutex_ held): true when the stream goes on
    // and needs a step with `token`; false when it has ended or must end (cancelled, stop or
    // max_tokens reached, every logit filtered).
    bool draw(int32_t& token, std::vector<int32_t>& out);
    // The step's logits for the token drawn last.
    void advance(std::vector<float> logits, int32_t token);
    // After a call: a stream cut short (cancelled or filtered) ends.
    void settle(size_t got, int n);
    // Turns the model's logits for the next draw into processed logits.
    void process(int32_t last_token);

    T3Model& t3_;
    std::shared_ptr<T3Cache> cache_;
    bool holds_cache_ = false;
    SamplingParams params_;
    int max_tokens_;
    Sampler sampler_;
    std::vector<float> logits_;  // for the next draw, already processed
    std::vector<int32_t> tokens_;
    std::optional<AlignmentAnalyzer> analyzer_;  // Multilingual only
    std::vector<int32_t> history_;               // Multilingual: start token + tokens
    std::atomic<bool> forced_{false};
    std::atomic<bool> done_{false};
    std::atomic<bool> cancelled_{false};
    mutable std::mutex mutex_;  // held by next(), close() and tokens()
    std::atomic<bool> cancel_{false};
};

// The whole loop at once, on a private cache.
std::vector<int32_t> generate_speech_tokens(T3Model& t3, const T3Conditioning& cond, const std::vector<int32_t>& text,
                                            const SamplingParams& params, int max_tokens, uint64_t seed);

}  // namespace cbs
