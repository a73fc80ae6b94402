#include "t3/t3_llama.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/backend.h"
#include "core/graph_helpers.h"
#include "cpu/q4_matmul.h"
#include "ggml-cpu.h"
#include "t3/decode_attention.h"
#include "t3/decode_step.h"

namespace cbs {

namespace {

// HF's `_compute_llama3_parameters` in float32, operation for operation (torch's
// `s / t` with a Python scalar s is reciprocal(t) * s).
std::vector<float> llama3_inv_freq(int head_dim, float theta, float factor, float low, float high, float orig) {
    const float two_pi = static_cast<float>(2.0 * M_PI);
    const float low_wavelen = orig / low, high_wavelen = orig / high;
    std::vector<float> out(head_dim / 2);
    for (int i = 0; i < head_dim / 2; ++i) {
        const float inv = 1.0f / std::pow(theta, static_cast<float>(2 * i) / static_cast<float>(head_dim));
        const float wavelen = (1.0f / inv) * two_pi;
        const float scaled = wavelen > low_wavelen ? inv / factor : inv;
        const float smooth = ((1.0f / wavelen) * orig - low) / (high - low);
        const float smoothed = (1.0f - smooth) * scaled / factor + smooth * scaled;
        const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
        out[i] = medium ? smoothed : scaled;
    }
    return out;
}

std::vector<int32_t> arange(int from, int n) {
    std::vector<int32_t> v(n);
    for (int i = 0; i < n; ++i) v[i] = from + i;
    return v;
}

}  // namespace

T3Llama::T3Llama(const ModelFile& mf, ggml_backend_t backend)
    : hp_(T3Hparams::from(mf)), backend_(backend), runner_(backend) {
    auto i = [&](const char* k) { return static_cast<int>(mf.get_int(std::string("chatterbox.t3.") + k)); };
    auto f = [&](const char* k) { return static_cast<float>(mf.get_float(std::string("chatterbox.t3.") + k)); };
    const int64_t E = hp_.n_embd, F = hp_.n_ff, V = hp_.speech_vocab;
    n_query_ = i("perceiver.n_query");
    perceiver_heads_ = i("perceiver.n_head");
    perceiver_eps_ = f("perceiver.ln_eps");
    text_pos_len_ = i("text_pos_len");
    speech_pos_len_ = i("speech_pos_len");
    if (i("n_kv_head") != hp_.n_head)
        throw ModelError(mf.path() + ": grouped-query attention is not supported by this engine");
    if (n_query_ <= 0 || perceiver_heads_ <= 0 || E % perceiver_heads_ != 0 || text_pos_len_ <= 0 || speech_pos_len_ <= 0)
        throw ModelError(mf.path() + ": inconsistent T3 conditioning dimensions");
    if (hp_.head_dim() % 2 != 0) throw ModelError(mf.path() + ": T3 head_dim must be even for RoPE");
    if (mf.get_string("chatterbox.t3.rope.type") != "llama3")
        throw ModelError(mf.path() + ": T3 rope.type '" + mf.get_string("chatterbox.t3.rope.type") +
                         "' is not supported (known: llama3)");
    inv_freq_ = llama3_inv_freq(hp_.head_dim(), f("rope.theta"), f("rope.factor"), f("rope.low_freq_factor"),
                                f("rope.high_freq_factor"), static_cast<float>(i("rope.orig_max_pos")));
    if (mf.has_key("chatterbox.t3.align.heads")) {
        const std::vector<int64_t> pairs = mf.get_int_array("chatterbox.t3.align.heads");
        if (pairs.size() % 2 != 0) throw ModelError(mf.path() + ": chatterbox.t3.align.heads is not (layer, head) pairs");
        for (size_t k = 0; k < pairs.size(); k += 2) {
            if (pairs[k] < 0 || pairs[k] >= hp_.n_layer || pairs[k + 1] < 0 || pairs[k + 1] >= hp_.n_head)
                throw ModelError(mf.path() + ": alignment head (" + std::to_string(pairs[k]) + ", " +
                                 std::to_string(pairs[k + 1]) + ") is outside the model");
            align_.push_back({static_cast<int>(pairs[k]), static_cast<int>(pairs[k + 1])});
        }
        align_params_ = AlignmentParams::from(mf);
    }

    auto t = [&](const std::string& name, std::vector<int64_t> ne) { return mf.tensor("t3." + name, ne); };
    text_emb_ = t("text_emb.weight", {E, hp_.text_vocab});
    speech_emb_ = t("speech_emb.weight", {E, V});
    text_pos_ = t("text_pos_emb.emb.weight", {E, text_pos_len_});
    speech_pos_ = t("speech_pos_emb.emb.weight", {E, speech_pos_len_});
    norm_ = t("norm.weight", {E});
    head_w_ = t("speech_head.weight", {E, V});
    spkr_w_ = t("cond_enc.spkr_enc.weight", {hp_.speaker_embed_size, E});
    spkr_b_ = t("cond_enc.spkr_enc.bias", {E});
    if (mf.get_bool("chatterbox.t3.emotion_adv")) emotion_w_ = t("cond_enc.emotion_adv_fc.weight", {1, E});
    const std::string p = "cond_enc.perceiver.";
    pq_ = t(p + "pre_attention_query", {E, n_query_});
    p_norm_w_ = t(p + "attn.norm.weight", {E});
    p_norm_b_ = t(p + "attn.norm.bias", {E});
    p_q_w_ = t(p + "attn.to_q.weight", {E, E});
    p_q_b_ = t(p + "attn.to_q.bias", {E});
    p_k_w_ = t(p + "attn.to_k.weight", {E, E});
    p_k_b_ = t(p + "attn.to_k.bias", {E});
    p_v_w_ = t(p + "attn.to_v.weight", {E, E});
    p_v_b_ = t(p + "attn.to_v.bias", {E});
    p_o_w_ = t(p + "attn.proj_out.weight", {E, E});
    p_o_b_ = t(p + "attn.proj_out.bias", {E});
    for (int il = 0; il < hp_.n_layer; ++il) {
        const std::string b = "blk." + std::to_string(il) + ".";
        layers_.push_back({t(b + "input_layernorm.weight", {E}), t(b + "self_attn.q_proj.weight", {E, E}),
                           t(b + "self_attn.k_proj.weight", {E, E}), t(b + "self_attn.v_proj.weight", {E, E}),
                           t(b + "self_attn.o_proj.weight", {E, E}), t(b + "post_attention_layernorm.weight", {E}),
                           t(b + "mlp.gate_proj.weight", {E, F}), t(b + "mlp.up_proj.weight", {E, F}),
                           t(b + "mlp.down_proj.weight", {F, E})});
        Layer& L = layers_.back();
        L.wqkv = mf.joined({L.wq, L.wk, L.wv});
        L.gate_up = mf.joined({L.gate, L.up});
    }
    cache_type_ = layers_[0].wq->type == GGML_TYPE_F32 ? GGML_TYPE_F32 : GGML_TYPE_F16;
}

std::unique_ptr<T3Cache> T3Llama::new_cache() const {
    return std::make_unique<T3Cache>(hp_, backend_, cache_type_, 2);
}

int T3Llama::cond_len(const T3Conditioning& cond) const {
    return 1 + (cond.prompt_tokens.empty() ? 0 : n_query_) + (emotion_w_ ? 1 : 0);
}

void T3Llama::validate(const T3Conditioning& cond, const std::vector<int32_t>& text,
                       const std::vector<int32_t>& speech) const {
    if (static_cast<int>(cond.speaker_emb.size()) != hp_.speaker_embed_size)
        throw VoiceError("speaker embedding has " + std::to_string(cond.speaker_emb.size()) + " values; T3 expects " +
                         std::to_string(hp_.speaker_embed_size));
    check_token_ids(cond.prompt_tokens, hp_.speech_vocab, "prompt speech");
    if (static_cast<int>(cond.prompt_tokens.size()) > speech_pos_len_)
        throw VoiceError("the voice has " + std::to_string(cond.prompt_tokens.size()) + " prompt tokens; T3 takes at most " +
                         std::to_string(speech_pos_len_));
    if (!std::isfinite(cond.exaggeration)) throw ParameterError("exaggeration must be a finite number");
    check_token_ids(text, hp_.text_vocab, "text");
    check_token_ids(speech, hp_.speech_vocab, "speech");
    if (text.empty()) throw EngineError("T3 needs at least one text token (the start and stop text tokens)");
    if (static_cast<int>(text.size()) > text_pos_len_)
        throw EngineError("the text has " + std::to_string(text.size()) + " tokens; T3 takes at most " +
                          std::to_string(text_pos_len_) + " (shorten the text)");
    if (speech.empty()) throw EngineError("speech_ids must hold at least the start-of-speech token");
    if (static_cast<int>(speech.size()) > speech_pos_len_)
        throw EngineError("more speech tokens than T3's speech position table (" + std::to_string(speech_pos_len_) + ")");
}

// [speaker, perceiver(prompt speech + positions), emotion] -> [E, cond_len].
ggml_tensor* T3Llama::build_cond(ggml_context* ctx, GraphInputs& in, const T3Conditioning& cond) {
    const int E = hp_.n_embd;
    ggml_tensor* x = linear(ctx, in.f32(ctx, cond.speaker_emb, hp_.speaker_embed_size), spkr_w_, spkr_b_);
    x = ggml_reshape_2d(ctx, x, E, 1);
    if (!cond.prompt_tokens.empty()) {
        const int n = static_cast<int>(cond.prompt_tokens.size());
        ggml_tensor* prompt = ggml_add(ctx, ggml_get_rows(ctx, speech_emb_, in.ids(ctx, cond.prompt_tokens)),
                                       ggml_get_rows(ctx, speech_pos_, in.ids(ctx, arange(0, n))));
        // Cross-attention of the learned queries over the prompt, then self-attention,
        // through the same block (Perceiver.forward).
        ggml_tensor* q = perceiver_block(ctx, ggml_reshape_2d(ctx, pq_, E, n_query_), prompt);
        x = ggml_concat(ctx, x, perceiver_block(ctx, q, q), 1);
    }
    if (emotion_w_) {
        // Linear(1 -> E) without bias: exaggeration x W[:, 0].
        ggml_tensor* emo = mul_mat_weight(ctx, emotion_w_, in.f32(ctx, {cond.exaggeration}, 1));
        x = ggml_concat(ctx, x, ggml_reshape_2d(ctx, emo, E, 1), 1);
    }
    return x;
}

// AttentionBlock2(x1, x2): one LayerNorm for both inputs, q from x1, k/v from x2,
// unmasked multi-head attention, proj_out, plus the un-normalised x1.
ggml_tensor* T3Llama::perceiver_block(ggml_context* ctx, ggml_tensor* x1, ggml_tensor* x2) {
    const int E = hp_.n_embd, H = perceiver_heads_, D = E / H;
    const int a = static_cast<int>(x1->ne[1]), b = static_cast<int>(x2->ne[1]);
    ggml_tensor* n1 = layer_norm(ctx, x1, p_norm_w_, p_norm_b_, perceiver_eps_);
    ggml_tensor* n2 = x1 == x2 ? n1 : layer_norm(ctx, x2, p_norm_w_, p_norm_b_, perceiver_eps_);
    auto heads = [&](ggml_tensor* t, int n) { return ggml_permute(ctx, ggml_reshape_3d(ctx, t, D, H, n), 0, 2, 1, 3); };
    ggml_tensor* q = heads(linear(ctx, n1, p_q_w_, p_q_b_), a);
    ggml_tensor* k = heads(linear(ctx, n2, p_k_w_, p_k_b_), b);
    ggml_tensor* v = heads(linear(ctx, n2, p_v_w_, p_v_b_), b);
    ggml_tensor* att = ggml_flash_attn_ext(ctx, q, k, v, nullptr, 1.0f / std::sqrt(static_cast<float>(D)), 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(att, GGML_PREC_F32);
    return ggml_add(ctx, x1, linear(ctx, ggml_reshape_2d(ctx, att, E, a), p_o_w_, p_o_b_));
}

// [text, speech] for `rows` rows -> [E, (S + n_speech_pos) * rows], row-major by row.
// The prompt's first speech token goes in twice at learned position 0; speech[j] is at
// learned position first_speech_pos + j otherwise. Row 1 (unconditional) has the text's
// position embeddings only.
ggml_tensor* T3Llama::build_inputs(ggml_context* ctx, GraphInputs& in, const std::vector<int32_t>& text,
                                   const std::vector<int32_t>& speech, int first_speech_pos, int rows) {
    ggml_tensor* sp = speech_inputs(ctx, in, speech, first_speech_pos);
    if (text.empty()) return rows == 1 ? sp : ggml_concat(ctx, sp, sp, 1);
    ggml_tensor* tpos = ggml_get_rows(ctx, text_pos_, in.ids(ctx, arange(0, static_cast<int>(text.size()))));
    ggml_tensor* x = ggml_concat(ctx, ggml_add(ctx, ggml_get_rows(ctx, text_emb_, in.ids(ctx, text)), tpos), sp, 1);
    if (rows == 2) x = ggml_concat(ctx, x, ggml_concat(ctx, tpos, sp, 1), 1);
    return x;
}

ggml_tensor* T3Llama::speech_inputs(ggml_context* ctx, GraphInputs& in, const std::vector<int32_t>& speech,
                                    int first_speech_pos) {
    std::vector<int32_t> ids, pos;
    if (first_speech_pos == 0) {
        ids.push_back(speech[0]);
        pos.push_back(0);
    }
    for (size_t j = 0; j < speech.size(); ++j) {
        ids.push_back(speech[j]);
        pos.push_back(first_speech_pos + static_cast<int>(j));
    }
    return ggml_add(ctx, ggml_get_rows(ctx, speech_emb_, in.ids(ctx, ids)), ggml_get_rows(ctx, speech_pos_, in.ids(ctx, pos)));
}

// HF apply_rotary_pos_emb: x * cos + rotate_half(x) * sin on x [D, H, n, rows], with
// rotate_half(x) * sin written as [x2, x1] * [-sin, sin] (the same products).
ggml_tensor* T3Llama::rope(ggml_context* ctx, ggml_tensor* x, ggml_tensor* cos, ggml_tensor* sin) {
    if (backend_is_cpu(backend_) && step_rope_fuses(x, cos, sin)) return step_rope(ctx, x, cos, sin);
    const int64_t half = x->ne[0] / 2;
    ggml_tensor* x1 = ggml_view_4d(ctx, x, half, x->ne[1], x->ne[2], x->ne[3], x->nb[1], x->nb[2], x->nb[3], 0);
    ggml_tensor* x2 = ggml_view_4d(ctx, x, half, x->ne[1], x->ne[2], x->ne[3], x->nb[1], x->nb[2], x->nb[3],
                                   half * ggml_element_size(x));
    return ggml_add(ctx, ggml_mul(ctx, x, cos), ggml_mul(ctx, ggml_concat(ctx, x2, x1, 0), sin));
}

void T3Llama::attention_inputs(ggml_context* ctx, const Layer& L, ggml_tensor* h, int n, int rows, ggml_tensor* cos,
                               ggml_tensor* sin, const Product& product, bool join, ggml_tensor** q,
                               ggml_tensor** k, ggml_tensor** v) {
    const int H = hp_.n_head, D = hp_.head_dim();
    if (!join || !L.wqkv) {
        *q = rope(ctx, ggml_reshape_4d(ctx, product(L.wq, h), D, H, n, rows), cos, sin);
        *k = rope(ctx, ggml_reshape_4d(ctx, product(L.wk, h), D, H, n, rows), cos, sin);
        *v = ggml_reshape_4d(ctx, product(L.wv, h), D, H, n, rows);
        return;
    }
    // q, k and v as one product [3E, n * rows]; RoPE once over q's and k's heads side by side
    // (per value the same arithmetic as over each alone).
    ggml_tensor* qkv = product(L.wqkv, h);
    const size_t es = ggml_element_size(qkv), col = qkv->nb[1];
    auto heads = [&](int n_heads, int first) {
        return ggml_view_4d(ctx, qkv, D, n_heads, n, rows, D * es, col, col * n, first * D * es);
    };
    ggml_tensor* qk = rope(ctx, heads(2 * H, 0), cos, sin);
    *q = ggml_view_4d(ctx, qk, D, H, n, rows, qk->nb[1], qk->nb[2], qk->nb[3], 0);
    *k = ggml_view_4d(ctx, qk, D, H, n, rows, qk->nb[1], qk->nb[2], qk->nb[3], H * qk->nb[1]);
    *v = heads(H, 2 * H);
}

ggml_tensor* T3Llama::ffn_hidden(ggml_context* ctx, const Layer& L, ggml_tensor* h, const Product& product,
                                 bool join) {
    if (join && L.gate_up) return ggml_swiglu(ctx, product(L.gate_up, h));  // silu(its gate rows) x its up rows
    return ggml_swiglu_split(ctx, product(L.gate, h), product(L.up, h));
}

void T3Llama::rope_tables(int first, int n, std::vector<float>& cos, std::vector<float>& sin) const {
    const int D = hp_.head_dim();
    cos.assign(static_cast<size_t>(D) * n, 0.0f);
    sin.assign(cos.size(), 0.0f);
    for (int p = 0; p < n; ++p)
        for (int i = 0; i < D / 2; ++i) {
            const float a = inv_freq_[i] * static_cast<float>(first + p);
            const float c = std::cos(a), s = std::sin(a);
            cos[p * D + i] = cos[p * D + i + D / 2] = c;
            sin[p * D + i] = -s;
            sin[p * D + i + D / 2] = s;
        }
}

// Llama blocks over x [E, n_new * rows] at positions cache.n_past .. + n_new - 1 of each
// row. all_seqs: one row whose keys and values go to every row of the cache (the shared
// conditioning prefix). `step` (one new position): its row, RoPE and padded length come in
// as inputs, so the graph can be replayed for the next token.
ggml_tensor* T3Llama::transformer(ggml_context* ctx, ggml_cgraph* gf, GraphInputs& in, T3Cache& cache, ggml_tensor* x,
                                  int n_new, int rows, bool all_seqs, ggml_tensor* mask, TapSpec* taps,
                                  const StepInputs* step, const RowTail* tail) {
    const int E = hp_.n_embd, H = hp_.n_head, D = hp_.head_dim();
    const int n_kv = step ? step->n_kv : cache.n_past + n_new;
    const float scale = 1.0f / std::sqrt(static_cast<float>(D));
    const int n_cols = n_new + (tail ? tail->n : 0);  // x's columns a row (with a tail: both rows')

    ggml_tensor *rc, *rs;
    if (step) {
        rc = ggml_reshape_4d(ctx, step->cos, D, 1, 1, 1);
        rs = ggml_reshape_4d(ctx, step->sin, D, 1, 1, 1);
    } else {
        std::vector<float> cos, sin;
        rope_tables(cache.n_past, n_new, cos, sin);
        if (tail) {
            std::vector<float> c1, s1;
            rope_tables(cache.n_past + n_new - tail->n, tail->n, c1, s1);
            cos.insert(cos.end(), c1.begin(), c1.end());
            sin.insert(sin.end(), s1.begin(), s1.end());
        }
        rc = ggml_reshape_4d(ctx, in.f32(ctx, std::move(cos), D, n_cols), D, 1, n_cols, 1);
        rs = ggml_reshape_4d(ctx, in.f32(ctx, std::move(sin), D, n_cols), D, 1, n_cols, 1);
    }

    auto cache_view = [&](ggml_tensor* c, int first, int n, int seq0, int n_seq) {
        return ggml_view_4d(ctx, c, D, n, H, n_seq, c->nb[1], c->nb[2], c->nb[3], first * c->nb[1] + seq0 * c->nb[3]);
    };
    // (with a tail: the kernels the two-row prompt's 2 n_new columns take)
    const int64_t kernel_columns = tail ? 2 * int64_t{n_new} : 0;
    // A guided prompt of a quantised model on the CPU takes T3's own attention at any length
    // (ggml's, from 64 queries, gives a query other values with fewer beside it): its values per
    // query whatever the queries, so cached unconditional keys and values serve a later prompt.
    const int att_queries = !step && (rows == 2 || tail) && guided_prompt_class(cache, n_new) >= 0 ? 1 : n_new;
    const Product product = [ctx, kernel_columns](ggml_tensor* w, ggml_tensor* a) {
        return mul_mat_weight(ctx, w, a, kernel_columns);
    };
    // Joined products (attention_inputs): a step's everywhere; a prompt's on the CPU, whose
    // products sum each value alike whatever the weight's rows (test_t3_llama.py checks it).
    const bool join = step != nullptr || backend_is_cpu(backend_);
    // A step's norms and residual additions folded into its products on the CPU (t3/decode_step.h).
    const bool fuse = step && backend_is_cpu(backend_) && q4_is_packed(layers_[0].wo);
    for (int il = 0; il < hp_.n_layer; ++il) {
        const Layer& L = layers_[il];
        // (the norm through the product's input: product_after_norm(w, x) = w RMSNorm(x) * norm_w)
        auto product_after_norm = [&](ggml_tensor* norm_w) -> Product {
            return [&, norm_w](ggml_tensor* w, ggml_tensor* a) {
                return step_rms_norm_product(ctx, a, norm_w, &hp_.ln_eps, w);
            };
        };
        ggml_tensor *q, *k, *v;
        if (fuse)
            attention_inputs(ctx, L, x, n_new, rows, rc, rs, product_after_norm(L.attn_norm), join, &q, &k, &v);
        else
            attention_inputs(ctx, L, ggml_mul(ctx, ggml_rms_norm(ctx, x, hp_.ln_eps), L.attn_norm), n_cols, rows, rc, rs,
                             product, join, &q, &k, &v);

        ggml_tensor* att;
        if (step) {
            att = step_attention(ctx, gf, cache, il, q, k, v, step->kv_row, n_kv, rows, mask);
        } else if (tail) {
            // Each row's columns to its own cache row and attention, the kernel the two-row prompt takes.
            const bool own = decode_attention_applies(cache.k(il), att_queries, backend_is_cpu(backend_));
            auto attend = [&](int seq, int c0, int n, ggml_tensor* m) {
                auto cols = [&](ggml_tensor* t) {
                    return ggml_view_4d(ctx, t, D, H, n, 1, t->nb[1], t->nb[2], t->nb[3], c0 * t->nb[2]);
                };
                for (auto [t, c] : {std::pair{k, cache.k(il)}, std::pair{v, cache.v(il)}})
                    ggml_build_forward_expand(
                        gf, ggml_cpy(ctx, ggml_permute(ctx, cols(t), 0, 2, 1, 3), cache_view(c, n_kv - n, n, seq, 1)));
                ggml_tensor *k_all = cache_view(cache.k(il), 0, n_kv, seq, 1), *v_all = cache_view(cache.v(il), 0, n_kv, seq, 1);
                ggml_tensor* a;
                if (own) {
                    a = decode_attention(ctx, cols(q), k_all, v_all, m);
                } else {
                    a = ggml_flash_attn_ext(ctx, ggml_permute(ctx, cols(q), 0, 2, 1, 3), k_all, v_all, m, scale, 0.0f, 0.0f);
                    ggml_flash_attn_ext_set_prec(a, GGML_PREC_F32);
                }
                return ggml_reshape_2d(ctx, a, E, n);
            };
            att = ggml_concat(ctx, attend(0, 0, n_new, mask), attend(1, n_new, tail->n, tail->mask), 1);
        } else {
            // Append this call's keys and values (expanded first: the attention below reads
            // the cache through views, after these copies in graph order).
            ggml_tensor* k_new = ggml_permute(ctx, k, 0, 2, 1, 3);  // [D, n_new, H, rows]
            ggml_tensor* v_new = ggml_permute(ctx, v, 0, 2, 1, 3);
            for (int s = 0; s < (all_seqs ? cache.n_seq() : 1); ++s) {
                ggml_build_forward_expand(gf, ggml_cpy(ctx, k_new, cache_view(cache.k(il), cache.n_past, n_new, s, rows)));
                ggml_build_forward_expand(gf, ggml_cpy(ctx, v_new, cache_view(cache.v(il), cache.n_past, n_new, s, rows)));
            }
            ggml_tensor *k_all = cache_view(cache.k(il), 0, n_kv, 0, rows), *v_all = cache_view(cache.v(il), 0, n_kv, 0, rows);
            if (decode_attention_applies(cache.k(il), att_queries, backend_is_cpu(backend_))) {  // a short or guided prompt
                att = decode_attention(ctx, q, k_all, v_all, mask);
            } else {
                att = ggml_flash_attn_ext(ctx, ggml_permute(ctx, q, 0, 2, 1, 3), k_all, v_all, mask, scale, 0.0f, 0.0f);
                ggml_flash_attn_ext_set_prec(att, GGML_PREC_F32);
            }
        }
        ggml_tensor* att2 = ggml_reshape_2d(ctx, att, E, n_cols * rows);
        x = fuse ? step_linear_residual(ctx, att2, L.wo, nullptr, x) : ggml_add(ctx, x, product(L.wo, att2));
        ggml_tensor* h = fuse ? ffn_hidden(ctx, L, x, product_after_norm(L.ffn_norm), join)
                              : ffn_hidden(ctx, L, ggml_mul(ctx, ggml_rms_norm(ctx, x, hp_.ln_eps), L.ffn_norm), product, join);
        x = fuse ? step_linear_residual(ctx, h, L.down, nullptr, x) : ggml_add(ctx, x, product(L.down, h));

        // The alignment heads of row 0: softmax(q K^T * scale + mask) over every key (the
        // eager attention the reference's analyzer reads), kept for the text columns.
        for (size_t a = 0; taps && a < align_.size(); ++a) {
            if (align_[a].layer != il) continue;
            const int hd = align_[a].head;
            ggml_tensor* qh = ggml_view_2d(ctx, q, D, n_new, q->nb[2], hd * q->nb[1]);
            ggml_tensor* kh = ggml_view_2d(ctx, cache.k(il), D, n_kv, cache.k(il)->nb[1], hd * cache.k(il)->nb[2]);
            ggml_tensor* p = ggml_soft_max_ext(ctx, ggml_mul_mat(ctx, kh, qh), mask, scale, 0.0f);  // [n_kv, n_new]
            p = ggml_view_2d(ctx, p, taps->n_cols, taps->n_rows, p->nb[1],
                             taps->col0 * p->nb[0] + taps->row0 * p->nb[1]);
            taps->out[a] = ggml_cont(ctx, p);
        }
    }
    return x;
}

ggml_tensor* T3Llama::step_attention(ggml_context* ctx, ggml_cgraph* gf, T3Cache& cache, int il, ggml_tensor* q,
                                     ggml_tensor* k, ggml_tensor* v, ggml_tensor* kv_row, int n_kv, int rows,
                                     ggml_tensor* mask) {
    const int D = hp_.head_dim(), H = hp_.n_head;
    auto cache_view = [&](ggml_tensor* c, int n) {  // [D, n, H, rows]: the first n positions of each row
        return ggml_view_4d(ctx, c, D, n, H, rows, c->nb[1], c->nb[2], c->nb[3], 0);
    };
    ggml_tensor *k_all = cache_view(cache.k(il), n_kv), *v_all = cache_view(cache.v(il), n_kv);
    const bool own = decode_attention_applies(cache.k(il), 1, backend_is_cpu(backend_));
    if (own && step_fusion_enabled()) return decode_attention(ctx, q, k_all, v_all, mask, k, v, kv_row);
    ggml_build_forward_expand(
        gf, ggml_set_rows(ctx, cache_view(cache.k(il), cache.size()), ggml_permute(ctx, k, 0, 2, 1, 3), kv_row));
    ggml_build_forward_expand(
        gf, ggml_set_rows(ctx, cache_view(cache.v(il), cache.size()), ggml_permute(ctx, v, 0, 2, 1, 3), kv_row));
    if (own) return decode_attention(ctx, q, k_all, v_all, mask);
    ggml_tensor* att = ggml_flash_attn_ext(ctx, ggml_permute(ctx, q, 0, 2, 1, 3), k_all, v_all, mask,
                                           1.0f / std::sqrt(static_cast<float>(D)), 0.0f, 0.0f);
    ggml_flash_attn_ext_set_prec(att, GGML_PREC_F32);
    return att;
}

// Final RMSNorm and speech head on the last n_out positions of each row -> [V, n_out * rows].
ggml_tensor* T3Llama::head(ggml_context* ctx, ggml_tensor* x, int n_new, int rows, int n_out) {
    if (n_new == 1 && backend_is_cpu(backend_))  // a step: the norm folded into the product (t3/decode_step.h)
        return step_rms_norm_product(ctx, ggml_reshape_2d(ctx, x, hp_.n_embd, rows), norm_, &hp_.ln_eps, head_w_);
    ggml_tensor* x3 = ggml_reshape_3d(ctx, x, hp_.n_embd, n_new, rows);
    x3 = ggml_view_3d(ctx, x3, hp_.n_embd, n_out, rows, x3->nb[1], x3->nb[2], (n_new - n_out) * x3->nb[1]);
    ggml_tensor* h = ggml_reshape_2d(ctx, ggml_cont(ctx, x3), hp_.n_embd, n_out * rows);
    h = ggml_mul(ctx, ggml_rms_norm(ctx, h, hp_.ln_eps), norm_);
    return mul_mat_weight(ctx, head_w_, h);
}

// Keys and values of the conditioning at positions 0 .. cond_len - 1, in every row.
void T3Llama::run_prefix(T3Cache& cache, const T3Conditioning& cond) {
    const int n_cond = cond_len(cond);
    cache.n_past = 0;
    cache.clear_prefix();
    ggml_context* ctx = runner_.begin();
    ggml_cgraph* gf = runner_.graph();
    GraphInputs in;
    ggml_tensor* x = build_cond(ctx, in, cond);
    x = transformer(ctx, gf, in, cache, x, n_cond, 1, true, causal_mask(ctx, in, n_cond, n_cond), nullptr);
    runner_.compute(ggml_view_1d(ctx, x, 1, 0), in);  // the graph's point is the cache writes
    cache.set_prefix(cond, n_cond);
}

std::vector<float> T3Llama::finish(T3Cache& cache, ggml_tensor* logits, TapSpec& taps, const GraphInputs& in) {
    std::vector<ggml_tensor*> outs{logits};
    outs.insert(outs.end(), taps.out.begin(), taps.out.end());
    std::vector<std::vector<float>> r = runner_.compute(outs, in);
    keep_taps(cache, r, taps.n_rows);
    return std::move(r[0]);
}

void T3Llama::keep_taps(T3Cache& cache, std::vector<std::vector<float>>& outs, int n_rows) {
    cache.align.clear();
    for (size_t a = 1; a < outs.size(); ++a) cache.align.insert(cache.align.end(), outs[a].begin(), outs[a].end());
    cache.align_rows = n_rows;
}

int T3Llama::guided_prompt_class(const T3Cache& cache, int n_new) const {
    // A quantised model's products on the CPU run per column alike whatever the columns, once the
    // kernel is chosen; an f32 model's (ggml's) may not: it always runs both rows.
    static const bool reuse = [] {  // CBS_T3_UNCOND=0: both rows always run (benchmarks)
        const char* v = std::getenv("CBS_T3_UNCOND");
        return !v || std::strcmp(v, "0") != 0;
    }();
    if (!reuse || !backend_is_cpu(backend_) || !q4_is_packed(layers_[0].wo) || !decode_attention_applies(cache.k(0), 1, true))
        return -1;
    return 2 * int64_t{n_new} >= q4_kernel_max_columns() ? 1 : 0;
}

std::vector<float> T3Llama::prompt(T3Cache& cache, const T3Conditioning& cond, const std::vector<int32_t>& text,
                                   const std::vector<int32_t>& speech, int n_out, int reserve_tokens) {
    validate(cond, text, speech);
    if (n_out < 1 || n_out > static_cast<int>(speech.size())) throw EngineError("n_out must be within the speech tokens");
    if (cache.n_seq() < 2 && cond.guidance) throw EngineError("guidance needs a two-row T3 cache");
    const int rows = cond.guidance ? 2 : 1;
    const int n_cond = cond_len(cond), S = static_cast<int>(text.size());
    const int n_new = S + 1 + static_cast<int>(speech.size());
    std::lock_guard<std::mutex> lock(mutex_);
    cache.reserve(n_cond + n_new + std::max(0, reserve_tokens));
    if (!cache.holds_prefix(cond)) run_prefix(cache, cond);

    ggml_context* ctx = runner_.begin();
    ggml_cgraph* gf = runner_.graph();
    GraphInputs in;
    TapSpec taps{S, n_new - S, n_cond, S, std::vector<ggml_tensor*>(align_.size())};
    // The unconditional row's text already in the cache (an earlier guided prompt with this
    // prefix and at least this much text, whose kernels this prompt takes too): that row runs
    // from there on, its columns beside row 0's in one graph (a quantised model on the CPU).
    const int klass = rows == 2 ? guided_prompt_class(cache, n_new) : -1;
    const int U = klass >= 0 && cache.uncond_class == klass ? std::min(cache.uncond_text, S) : 0;
    cache.n_past = n_cond;
    ggml_tensor* logits;
    if (U > 0) {
        ggml_tensor* x1 = speech_inputs(ctx, in, speech, 0);
        if (U < S) x1 = ggml_concat(ctx, ggml_get_rows(ctx, text_pos_, in.ids(ctx, arange(U, S - U))), x1, 1);
        const RowTail tail{n_new - U, causal_mask(ctx, in, n_cond + n_new, n_new - U)};
        ggml_tensor* x = ggml_concat(ctx, build_inputs(ctx, in, text, speech, 0, 1), x1, 1);
        x = transformer(ctx, gf, in, cache, x, n_new, 1, false, causal_mask(ctx, in, n_cond + n_new, n_new), &taps,
                        nullptr, &tail);
        // each row's last n_out positions, as head() takes them from two rows
        auto last = [&](int end) {
            return ggml_view_2d(ctx, x, hp_.n_embd, n_out, x->nb[1], static_cast<size_t>(end - n_out) * x->nb[1]);
        };
        ggml_tensor* h = ggml_concat(ctx, last(n_new), last(n_new + tail.n), 1);
        logits = mul_mat_weight(ctx, head_w_, ggml_mul(ctx, ggml_rms_norm(ctx, h, hp_.ln_eps), norm_));
    } else {
        ggml_tensor* x = build_inputs(ctx, in, text, speech, 0, rows);
        x = transformer(ctx, gf, in, cache, x, n_new, rows, false, causal_mask(ctx, in, n_cond + n_new, n_new), &taps);
        logits = head(ctx, x, n_new, rows, n_out);
    }
    std::vector<float> out = finish(cache, logits, taps, in);
    if (rows == 2) cache.uncond_text = S, cache.uncond_class = klass;
    cache.n_past = n_cond + n_new;
    cache.n_rows = rows;
    cache.n_speech = static_cast<int>(speech.size());
    cache.align_col0 = n_cond;
    cache.align_cols = S;
    return out;
}

std::vector<float> T3Llama::step(T3Cache& cache, int32_t speech_token) {
    check_token_ids({speech_token}, hp_.speech_vocab, "speech");
    std::lock_guard<std::mutex> lock(mutex_);
    if (cache.n_past == 0) throw EngineError("T3 step() before prompt()");
    if (cache.n_past + 1 > cache.size())
        throw EngineError("T3 context is full (" + std::to_string(cache.size()) + " positions)");
    if (cache.n_speech >= speech_pos_len_)
        throw EngineError("T3's speech position table is full (" + std::to_string(speech_pos_len_) + " tokens)");
    const int rows = cache.n_rows;
    // The new token sees every cached position and itself; the attention reads a view padded
    // to kStepKvPad positions (masked), the same graph for that many tokens.
    const int n_kv = cache.step_view(kStepKvPad);
    std::vector<ggml_fp16_t> mask = cache.step_mask(n_kv);
    std::vector<float> cos, sin;
    rope_tables(cache.n_past, 1, cos, sin);
    std::vector<float> out;
    const StepGraph& g = step_;
    if (g.outs.size() && g.generation == runner_.generation() && g.cache_serial == cache.serial() && g.n_kv == n_kv &&
        g.rows == rows && g.align_col0 == cache.align_col0 && g.align_cols == cache.align_cols) {
        GraphInputs in;
        in.ints.emplace_back(g.token, std::vector<int32_t>{speech_token});
        in.ints.emplace_back(g.speech_pos, std::vector<int32_t>{cache.n_speech});
        in.ints.emplace_back(g.kv_row, std::vector<int32_t>{cache.n_past});
        in.floats.emplace_back(g.cos, std::move(cos));
        in.floats.emplace_back(g.sin, std::move(sin));
        in.halves.emplace_back(g.mask, std::move(mask));
        std::vector<std::vector<float>> r = runner_.rerun(g.outs, in);
        keep_taps(cache, r, 1);
        out = std::move(r[0]);
    } else {
        step_ = {};
        ggml_context* ctx = runner_.begin();
        ggml_cgraph* gf = runner_.graph();
        GraphInputs in;
        ggml_tensor* token = in.ids(ctx, {speech_token});
        ggml_tensor* speech_pos = in.ids(ctx, {cache.n_speech});
        ggml_tensor* x = ggml_add(ctx, ggml_get_rows(ctx, speech_emb_, token), ggml_get_rows(ctx, speech_pos_, speech_pos));
        if (rows == 2) x = ggml_concat(ctx, x, x, 1);
        const StepInputs step{in.ids(ctx, {cache.n_past}), in.f32(ctx, std::move(cos), hp_.head_dim()),
                              in.f32(ctx, std::move(sin), hp_.head_dim()), n_kv};
        ggml_tensor* mask_t = in.f16_mask(ctx, std::move(mask), n_kv, 1);
        TapSpec taps{0, 1, cache.align_col0, cache.align_cols, std::vector<ggml_tensor*>(align_.size())};
        x = transformer(ctx, gf, in, cache, x, 1, rows, false, mask_t, &taps, &step);
        std::vector<ggml_tensor*> outs{head(ctx, x, 1, rows, 1)};
        outs.insert(outs.end(), taps.out.begin(), taps.out.end());
        std::vector<std::vector<float>> r = runner_.compute(outs, in);
        keep_taps(cache, r, taps.n_rows);
        out = std::move(r[0]);
        step_ = {runner_.generation(), cache.serial(), n_kv, rows, cache.align_col0, cache.align_cols,
                 token, speech_pos, step.kv_row, step.cos, step.sin, mask_t, std::move(outs)};
    }
    cache.n_past += 1;
    cache.n_speech += 1;
    return out;
}

std::vector<float> T3Llama::conditioning(const T3Conditioning& cond) {
    validate(cond, {0}, {hp_.start_speech_token});
    std::lock_guard<std::mutex> lock(mutex_);
    ggml_context* ctx = runner_.begin();
    GraphInputs in;
    return runner_.compute(build_cond(ctx, in, cond), in);
}

std::vector<float> T3Llama::input_embeddings(const T3Conditioning& cond, const std::vector<int32_t>& text,
                                             const std::vector<int32_t>& speech) {
    validate(cond, text, speech);
    const int rows = cond.guidance ? 2 : 1;
    const int E = hp_.n_embd, n_cond = cond_len(cond), n_new = static_cast<int>(text.size() + 1 + speech.size());
    std::lock_guard<std::mutex> lock(mutex_);
    ggml_context* ctx = runner_.begin();
    GraphInputs in;
    ggml_tensor* c = build_cond(ctx, in, cond);
    ggml_tensor* x = ggml_reshape_3d(ctx, build_inputs(ctx, in, text, speech, 0, rows), E, n_new, rows);
    if (rows == 2) c = ggml_concat(ctx, ggml_reshape_3d(ctx, c, E, n_cond, 1), ggml_reshape_3d(ctx, c, E, n_cond, 1), 2);
    return runner_.compute(ggml_concat(ctx, ggml_reshape_3d(ctx, c, E, n_cond, rows), x, 1), in);
}

}  // namespace cbs
