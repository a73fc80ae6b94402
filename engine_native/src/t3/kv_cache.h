// T3's KV cache, owned by a generation session (a token stream), not by the model:
// per layer K and V as [head_dim, n_cache, n_head, n_seq], the layout ggml_flash_attn_ext
// reads directly (a view of the first n_kv positions). n_seq is 1, or 2 for the
// Multilingual T3's classifier-free guidance: a pair of caches, row 0 conditional and
// row 1 unconditional, that share the conditioning prefix.
//
// A cache remembers which conditioning's keys and values occupy its first positions
// (the voice prefix): a later prompt with the same conditioning reuses them, and
// growing the cache keeps them.
#pragma once

#include <algorithm>
#include <atomic>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "t3/t3_hparams.h"

namespace cbs {

class T3Cache {
public:
    T3Cache(const T3Hparams& hp, ggml_backend_t backend, ggml_type type, int n_seq = 1);
    ~T3Cache();
    T3Cache(const T3Cache&) = delete;
    T3Cache& operator=(const T3Cache&) = delete;

    // Room for n_tokens positions (throws EngineError beyond the model's context). A
    // bigger cache keeps the voice prefix.
    void reserve(int n_tokens);
    int size() const { return n_cache_; }
    // Distinct for every buffer any cache has allocated: a graph built over this cache's
    // tensors is valid while serial() is unchanged.
    uint64_t serial() const { return serial_; }
    int n_seq() const { return n_seq_; }
    ggml_tensor* k(int layer) const { return k_[layer]; }
    ggml_tensor* v(int layer) const { return v_[layer]; }

    // Positions written so far (the next token goes at n_past).
    int n_past = 0;
    // A step's attention view: the first positions up to a multiple of `pad` past n_past
    // (within the cache), so one graph serves `pad` tokens; and its mask (0 up to n_past, the
    // new token's place, -inf after).
    int step_view(int pad) const { return std::min(n_cache_, GGML_PAD(n_past + 1, pad)); }
    std::vector<ggml_fp16_t> step_mask(int n_kv) const;
    // Rows the last prompt ran (1, or 2 with guidance); step() runs as many.
    int n_rows = 1;
    // Speech tokens fed so far: the learned speech position of the next one (llama).
    int n_speech = 0;
    // The alignment heads' attention over the text in the last call (llama; empty
    // otherwise): [heads][rows][align_cols], rows = the speech positions of that call,
    // columns = the text, which starts at KV position align_col0.
    std::vector<float> align;
    int align_rows = 0, align_cols = 0, align_col0 = 0;

    // Whether the first positions hold `cond`'s keys and values (the voice prefix).
    bool holds_prefix(const T3Conditioning& cond) const;
    void set_prefix(const T3Conditioning& cond, int n) {
        prefix_cond_ = cond;
        n_prefix_ = n;
    }
    void clear_prefix() { n_prefix_ = 0, uncond_text = 0; }
    // Positions of row 1 after the prefix that hold the unconditional row's text (llama with
    // guidance): its text is position embeddings only, so these keys and values are the same
    // for any text at least this long with the same prefix, and a later prompt computes only
    // the rest. The last guided prompt's text length; 0 when unknown.
    int uncond_text = 0;
    int uncond_class = -1;  // the kernels that prompt took (T3Llama::guided_prompt_class)

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
    int n_seq_ = 1;
    int n_cache_ = 0;
    uint64_t serial_ = 0;
    T3Conditioning prefix_cond_;
    int n_prefix_ = 0;
    std::atomic<bool> held_{false};
};

}  // namespace cbs
