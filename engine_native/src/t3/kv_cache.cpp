#include "t3/kv_cache.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <new>
#include <string>

namespace cbs {

T3Cache::T3Cache(const T3Hparams& hp, ggml_backend_t backend, ggml_type type, int n_seq)
    : hp_(hp), backend_(backend), type_(type), n_seq_(n_seq) {
    if (n_seq < 1) throw EngineError("a T3 cache needs at least one row");
}

T3Cache::~T3Cache() {
    if (buf_) ggml_backend_buffer_free(buf_);
    if (ctx_) ggml_free(ctx_);
}

bool T3Cache::holds_prefix(const T3Conditioning& cond) const {
    return n_prefix_ > 0 && prefix_cond_ == cond;
}

void T3Cache::acquire() {
    if (held_.exchange(true)) throw BusyError("the cache is in use by another stream");
}

std::vector<ggml_fp16_t> T3Cache::step_mask(int n_kv) const {
    std::vector<ggml_fp16_t> mask(n_kv);
    for (int j = 0; j < n_kv; ++j) mask[j] = ggml_fp32_to_fp16(j <= n_past ? 0.0f : -INFINITY);
    return mask;
}

void T3Cache::reserve(int n_tokens) {
    if (n_tokens > hp_.n_ctx)
        throw EngineError("T3 context is " + std::to_string(hp_.n_ctx) + " positions; this request needs " +
                          std::to_string(n_tokens) + " (shorten the text)");
    if (n_tokens <= n_cache_) return;
    // A multiple of 256 positions (within the context): a step's padded attention view
    // (T3Gpt2::kStepKvPad) then never stops short of a whole block, which the devices'
    // single-query attention kernels want.
    n_tokens = std::min(GGML_PAD(n_tokens, 256), hp_.n_ctx);
    // A bigger cache keeps the voice's prefix: its rows move over (per layer, head and
    // sequence, the first n_prefix_ positions), so growing never costs a new prefix pass.
    const int n_keep = n_prefix_;
    std::vector<std::vector<uint8_t>> kept;
    for (size_t i = 0; n_keep > 0 && i < k_.size(); ++i)
        for (ggml_tensor* t : {k_[i], v_[i]})
            for (int64_t s = 0; s < t->ne[3]; ++s)
                for (int64_t h = 0; h < t->ne[2]; ++h) {
                    kept.emplace_back(n_keep * t->nb[1]);
                    ggml_backend_tensor_get(t, kept.back().data(), h * t->nb[2] + s * t->nb[3], kept.back().size());
                }
    if (buf_) ggml_backend_buffer_free(buf_);
    if (ctx_) ggml_free(ctx_);
    buf_ = nullptr;
    n_cache_ = 0;
    n_prefix_ = 0;
    uncond_text = 0;  // only the prefix moves over
    ggml_init_params params{ggml_tensor_overhead() * (2 * hp_.n_layer + 1), nullptr, true};
    ctx_ = ggml_init(params);
    k_.clear();
    v_.clear();
    const int D = hp_.head_dim();
    for (int il = 0; il < hp_.n_layer; ++il) {
        k_.push_back(ggml_new_tensor_4d(ctx_, type_, D, n_tokens, hp_.n_head, n_seq_));
        v_.push_back(ggml_new_tensor_4d(ctx_, type_, D, n_tokens, hp_.n_head, n_seq_));
    }
    buf_ = ggml_backend_alloc_ctx_tensors(ctx_, backend_);
    if (!buf_) throw std::bad_alloc();
    // Zeros, not whatever the memory held: a step reads masked positions past n_past too,
    // and a device's attention weighs them by 0, which NaN garbage would survive.
    ggml_backend_buffer_clear(buf_, 0);
    n_cache_ = n_tokens;
    static std::atomic<uint64_t> serials{0};
    serial_ = ++serials;
    size_t next = 0;
    for (size_t i = 0; n_keep > 0 && i < k_.size(); ++i)
        for (ggml_tensor* t : {k_[i], v_[i]})
            for (int64_t s = 0; s < t->ne[3]; ++s)
                for (int64_t h = 0; h < t->ne[2]; ++h, ++next)
                    ggml_backend_tensor_set(t, kept[next].data(), h * t->nb[2] + s * t->nb[3], kept[next].size());
    n_prefix_ = n_keep;
}

}  // namespace cbs
