#include "t3/token_stream.h"

#include "core/options.h"

namespace cbs {

SpeechTokenStream::SpeechTokenStream(T3Model& t3, std::shared_ptr<T3Cache> cache, const T3Conditioning& cond,
                                     const std::vector<int32_t>& text, const SamplingParams& params, int max_tokens,
                                     uint64_t seed)
    : t3_(t3), cache_(std::move(cache)), params_(params), max_tokens_(max_tokens), sampler_(seed) {
    const AlignmentParams* align = t3.alignment();
    if (align) params_.validate_mtl();
    else params_.validate();
    check_option("max_tokens", max_tokens);
    check_option("seed", seed);
    if (!cache_) cache_ = t3.new_cache();
    cache_->acquire();
    holds_cache_ = true;
    try {
        const int start = t3.hp().start_speech_token;
        T3Conditioning c = cond;
        c.guidance = align && params_.cfg_weight > 0.0f;
        logits_ = t3.prompt(*cache_, c, text, {start}, 1, max_tokens);
        if (align) {
            analyzer_.emplace(*align, static_cast<int>(text.size()), t3.hp().stop_speech_token);
            history_ = {start};
        }
        process(start);  // the reference's first input_ids are the start token
    } catch (...) {
        finish();
        throw;
    }
}

void SpeechTokenStream::process(int32_t last_token) {
    if (!analyzer_) {
        process_logits(logits_, tokens_.empty() ? std::vector<int32_t>{last_token} : tokens_, params_);
        return;
    }
    const size_t V = static_cast<size_t>(t3_.hp().speech_vocab);
    if (cache_->n_rows == 2) apply_guidance(logits_.data(), logits_.data() + V, V, params_.cfg_weight);
    logits_.resize(V);
    const T3Cache& c = *cache_;
    const int per_head = c.align_rows * c.align_cols;
    if (per_head > 0 && !c.align.empty()) {
        const int n_heads = static_cast<int>(c.align.size()) / per_head;
        forced_ = analyzer_->step(logits_, AlignmentAnalyzer::head_mean(c.align, n_heads), c.align_rows, last_token);
    }
    process_logits_mtl(logits_, history_, params_);
}

SpeechTokenStream::~SpeechTokenStream() { finish(); }

void SpeechTokenStream::finish() {
    done_ = true;
    if (holds_cache_) {
        holds_cache_ = false;
        cache_->release();
    }
}

void SpeechTokenStream::close() {
    cancel_.store(true);
    std::lock_guard<std::mutex> lock(mutex_);
    finish();
}

std::vector<int32_t> SpeechTokenStream::tokens() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return tokens_;
}

std::vector<int32_t> SpeechTokenStream::next(int n) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<int32_t> out;
    const int stop = t3_.hp().stop_speech_token;
    while (!done_ && static_cast<int>(out.size()) < n) {
        if (cancel_.load()) {
            cancelled_ = true;
            break;
        }
        const int32_t token = sampler_.draw(logits_);
        if (token < 0) break;  // every logit filtered: the reference stops here too
        tokens_.push_back(token);
        out.push_back(token);
        if (token == stop || static_cast<int>(tokens_.size()) >= max_tokens_) {
            finish();
            break;
        }
        if (!holds_cache_) break;  // unreachable: only finish() gives the cache up
        if (analyzer_) history_.push_back(token);
        try {
            logits_ = t3_.step(*cache_, token);
        } catch (...) {
            finish();
            throw;
        }
        process(token);
    }
    if (!done_ && (cancelled_ || static_cast<int>(out.size()) < n)) finish();
    return out;
}

std::vector<int32_t> generate_speech_tokens(T3Model& t3, const T3Conditioning& cond, const std::vector<int32_t>& text,
                                            const SamplingParams& params, int max_tokens, uint64_t seed) {
    SpeechTokenStream stream(t3, nullptr, cond, text, params, max_tokens, seed);
    return stream.next(max_tokens);
}

}  // namespace cbs
