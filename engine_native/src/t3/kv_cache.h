// T3's KV cache, owned by a generation session (a token stream), not by the model:
// per layer K and V as [head_dim, n_cache, n_head], the layout ggml_flash_attn_ext
// reads directly (a view of the first n_kv positions).
//
// A cache remembers which conditioning's keys and values occupy its first positions
// (the voice prefix): a later prompt with the same conditioning reuses them, and
// growing the cache keeps them.
#pragma once

#include <atomic>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "t3/t3_hparams.h"

namespace cbs {

class T3Cache {
public:
    T3Cache(const T3Hparams& hp, ggml_backend_t backend, ggml_type type);
    ~T3Cache();
    T3Cache(const T3Cache&) = delete;
    T3Cache& operator=(const T3Cache&) = delete;

    // Room for n_tokens positions (throws EngineError beyond the model's context). A
    // bigger cache keeps the voice prefix.
    void reserve(int n_tokens);
    int size() const { return n_cache_; }
    ggml_tensor* k(int layer) const { return k_[layer]; }
    ggml_tensor* v(int layer) const { return v_[layer]; }

    // Positions written so far (the next token goes at n_past).
    int n_past = 0;
    // Whether positions [0, 1 + prompt tokens) hold `cond`'s keys and values.
    bool holds_prefix(const T3Conditioning& cond) const;
    void set_prefix(const T3Conditioning& cond, int n) {
        prefix_cond_ = cond;
        n_prefix_ = n;
    }
    void clear_prefix() { n_prefix_ = 0; }

    // Exclusive use by one stream: acquire() throws BusyError when another holds it.
    void acquire();
    void release() { held_.store(false); }
    bool held() const { return held_.load(); }

private:
    T3Hparams hp_;
    ggml_backend_t backend_;
    ggml_type type_;
    ggml_context* ctx_ = nullptr;
    ggml_backend_buffer_t buf_ = nullptr;
    std::vector<ggml_tensor*> k_, v_;
    int n_cache_ = 0;
    T3Conditioning prefix_cond_;
    int n_prefix_ = 0;
    std::atomic<bool> held_{false};
};

}  // namespace cbs
