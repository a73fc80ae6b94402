#include "t3/token_stream.h"

#include <algorithm>

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

bool SpeechTokenStream::draw(int32_t& token, std::vector<int32_t>& out) {
    if (done_) return false;
    if (cancel_.load()) {
        cancelled_ = true;
        return false;
    }
    token = sampler_.draw(logits_);
    if (token < 0) return false;  // every logit filtered: the reference stops here too
    tokens_.push_back(token);
    out.push_back(token);
    if (token == t3_.hp().stop_speech_token || static_cast<int>(tokens_.size()) >= max_tokens_) {
        finish();
        return false;
    }
    if (!holds_cache_) return false;  // unreachable: only finish() gives the cache up
    if (analyzer_) history_.push_back(token);
    return true;
}

void SpeechTokenStream::advance(std::vector<float> logits, int32_t token) {
    logits_ = std::move(logits);
    process(token);
}

void SpeechTokenStream::settle(size_t got, int n) {
    if (!done_ && (cancelled_ || static_cast<int>(got) < n)) finish();
}

std::vector<int32_t> SpeechTokenStream::next(int n) {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<int32_t> out;
    int32_t token = 0;
    while (static_cast<int>(out.size()) < n && draw(token, out)) {
        std::vector<float> logits;
        try {
            logits = t3_.step(*cache_, token);
        } catch (...) {
            finish();
            throw;
        }
        advance(std::move(logits), token);
    }
    settle(out.size(), n);
    return out;
}

std::vector<std::vector<int32_t>> SpeechTokenStream::next_together(const std::vector<SpeechTokenStream*>& streams,
                                                                   int n) {
    const size_t B = streams.size();
    std::vector<std::vector<int32_t>> out(B);
    if (B == 0) return out;
    // Locked in address order, so two overlapping calls cannot wait on each other.
    std::vector<SpeechTokenStream*> order(streams);
    std::sort(order.begin(), order.end());
    for (size_t i = 0; i < B; ++i) {
        if (!order[i]) throw EngineError("next_together: a null stream");
        if (i > 0 && order[i] == order[i - 1]) throw EngineError("next_together: a stream appears twice");
        if (&order[i]->t3_ != &streams[0]->t3_) throw EngineError("next_together: the streams belong to different T3s");
    }
    std::vector<std::unique_lock<std::mutex>> locks;
    for (SpeechTokenStream* s : order) locks.emplace_back(s->mutex_);
    T3Model& t3 = streams[0]->t3_;
    std::vector<char> live(B, 1);
    for (int round = 0; round < n; ++round) {
        std::vector<size_t> going;
        std::vector<T3Cache*> caches;
        std::vector<int32_t> tokens;
        for (size_t b = 0; b < B; ++b) {
            int32_t token = 0;
            if (live[b] && streams[b]->draw(token, out[b])) {
                going.push_back(b);
                caches.push_back(streams[b]->cache_.get());
                tokens.push_back(token);
            } else {
                live[b] = 0;
            }
        }
        if (going.empty()) break;
        std::vector<std::vector<float>> logits;
        try {
            logits = t3.step_batch(caches, tokens);
        } catch (...) {
            for (size_t b : going) streams[b]->finish();
            throw;
        }
        for (size_t k = 0; k < going.size(); ++k) streams[going[k]]->advance(std::move(logits[k]), tokens[k]);
    }
    for (size_t b = 0; b < B; ++b) streams[b]->settle(out[b].size(), n);
    return out;
}

std::vector<int32_t> generate_speech_tokens(T3Model& t3, const T3Conditioning& cond, const std::vector<int32_t>& text,
                                            const SamplingParams& params, int max_tokens, uint64_t seed) {
    SpeechTokenStream stream(t3, nullptr, cond, text, params, max_tokens, seed);
    return stream.next(max_tokens);
}

}  // namespace cbs
