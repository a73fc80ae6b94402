// S3Gen's conditional flow matching decoder: the ConditionalDecoder U-Net estimator
// (causal ResNet blocks + BasicTransformerBlocks, full-context attention) and the
// sampler that integrates it from the initial noise x0 to the mel spectrogram.
//
// Layouts: every [T, C] tensor is time-fastest (ggml ne0 = T), i.e. row-major
// (C, T) on the host, as PyTorch's (B=1, C, T). Inside the graph the U-Net keeps
// activations as [C, T] (channel-fastest, ggml ne0 = C) and transposes only to
// feed the causal convolutions' im2col.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/ggml_ops.h"
#include "core/model_file.h"

namespace cbs {

// Causal 1-D convolution of x [C_in, T] (channel fastest) with w ne [K, C_in, C_out]:
// left pad K-1, stride 1, full f32. Returns [C_out, T]; b [C_out] may be null. left
// [C_in, K-1], where given, stands in for the zero padding (the frames before x).
ggml_tensor* causal_conv1d_ct(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b,
                              CpuProducts blas = false, ggml_tensor* left = nullptr);

// A stream's cached CFM prefix (CfmEstimator::record_prefix): for every Euler step, the
// tensors an estimator evaluation meets over the prefix, in graph order: each attention's
// keys and values [A, P] (Q8_0) and each causal convolution's last K-1 input frames
// [C_in, K-1], in a buffer of its own on the estimator's device. Freed with its last owner.
class CfmPrefix {
public:
    CfmPrefix() = default;
    ~CfmPrefix();
    CfmPrefix(const CfmPrefix&) = delete;
    CfmPrefix& operator=(const CfmPrefix&) = delete;
    int frames() const { return frames_; }
    size_t bytes() const;

private:
    friend class CfmEstimator;
    friend class S3GenCfm;
    int frames_ = 0;
    std::vector<float> ts_, spks_;  // its Euler times; S3GenCfm: its speaker (spks)
    ggml_context* ctx_ = nullptr;
    ggml_backend_buffer_t buf_ = nullptr;
    std::vector<std::vector<ggml_tensor*>> steps_;
};

// The ConditionalDecoder estimator: one velocity evaluation.
class CfmEstimator {
public:
    CfmEstimator(const ModelFile& mf, ggml_backend_t backend);
    ~CfmEstimator();
    CfmEstimator(const CfmEstimator&) = delete;
    CfmEstimator& operator=(const CfmEstimator&) = delete;

    // x, mu, cond: row-major [n_mels][T]; spks: [n_mels] (already projected);
    // t, r: the flow times (r only used by meanflow models). Returns dxdt row-major [n_mels][T].
    std::vector<float> forward(const std::vector<float>& x, const std::vector<float>& mu, const std::vector<float>& spks,
                               const std::vector<float>& cond, int T, float t, float r);
    // Euler from x0 over the times ts (x += (ts[s+1] - ts[s]) v(x, ts[s], ts[s+1])), every
    // step in one graph (as many as it holds): the state never leaves the device between
    // steps. Arguments as forward(); returns x row-major [n_mels][T].
    std::vector<float> integrate(const std::vector<float>& x0, const std::vector<float>& mu,
                                 const std::vector<float>& spks, const std::vector<float>& cond, int T,
                                 const std::vector<float>& ts);
    // The standard CFM's Euler with classifier-free guidance inside every step:
    // x += (ts[s+1] - ts[s]) ((1 + rate) v(x | mu, spks, cond) - rate v(x | 0, 0, 0)), all
    // steps on the device as integrate(). batched: both rows in one estimator evaluation
    // (a batch of two, as the reference), else two evaluations of one row each.
    std::vector<float> integrate_guided(const std::vector<float>& x0, const std::vector<float>& mu,
                                        const std::vector<float>& spks, const std::vector<float>& cond, int T,
                                        const std::vector<float>& ts, double rate, bool batched);

    // A stream's cached prefix (meanflow only). The U-Net's convolutions are causal, so frames
    // that attend only to themselves (a chunk-causal mask whose first chunk is the prefix: the
    // voice prompt) follow an Euler trajectory of their own, fixed by their x0, mu, spks and
    // cond. record_prefix integrates that trajectory once and keeps what later frames need
    // of it (CfmPrefix); integrate_after_prefix then integrates only later frames, which
    // attend to the prefix's cached keys and values and to each other (cond zero there, as
    // after any prompt). Arguments as integrate(), over the prefix's P frames or the later T.
    std::shared_ptr<CfmPrefix> record_prefix(const std::vector<float>& x0, const std::vector<float>& mu,
                                             const std::vector<float>& spks, const std::vector<float>& cond, int P,
                                             const std::vector<float>& ts);
    std::vector<float> integrate_after_prefix(const CfmPrefix& prefix, const std::vector<float>& x0,
                                              const std::vector<float>& mu, const std::vector<float>& spks, int T);
    // Each step keeps about 30 MB for a 10 s prompt (56 attentions' keys and values in Q8_0):
    // more steps than this stream the old way (every pass over the whole prompt).
    static constexpr int kMaxPrefixSteps = 4;

    int n_mels() const { return out_channels_; }
    bool meanflow() const { return meanflow_; }

private:
    struct Resnet {
        ggml_tensor *c1_w, *c1_b, *ln1_w, *ln1_b, *c2_w, *c2_b, *ln2_w, *ln2_b, *mlp_w, *mlp_b, *res_w, *res_b;
    };
    struct Transformer {
        ggml_tensor *n1_w, *n1_b, *q_w, *k_w, *v_w, *o_w, *o_b, *n3_w, *n3_b, *ff1_w, *ff1_b, *ff2_w, *ff2_b;
        ggml_tensor* qkv_w = nullptr;  // on a GPU: [q; k; v] as one weight (fuse_qkv)
    };
    struct Stage {  // one U-Net level: resnet, transformers, then an optional causal conv
        Resnet res;
        std::vector<Transformer> tfm;
        ggml_tensor *conv_w = nullptr, *conv_b = nullptr;
    };

    Resnet load_resnet(const ModelFile& mf, const std::string& p, int64_t cin) const;
    Stage load_stage(const ModelFile& mf, const std::string& p, int64_t cin, bool with_conv);
    std::vector<float> time_sinusoid(float t) const;  // SinusoidalPosEmb(in_channels), scale 1000

    ggml_tensor* time_mlp(ggml_context* ctx, ggml_tensor* s) const;
    ggml_tensor* block1d(ggml_context* ctx, ggml_tensor* x, ggml_tensor* cw, ggml_tensor* cb, ggml_tensor* lw,
                         ggml_tensor* lb) const;
    ggml_tensor* resnet(ggml_context* ctx, ggml_tensor* x, ggml_tensor* temb, const Resnet& r) const;
    ggml_tensor* transformer(ggml_context* ctx, ggml_tensor* x, const Transformer& b) const;
    // causal_conv1d_ct with the prefix tap's left context (where one is active).
    ggml_tensor* causal_conv(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b) const;
    ggml_tensor* run_stage(ggml_context* ctx, ggml_tensor* x, ggml_tensor* temb, const Stage& s) const;
    // One velocity: x, mu, cond ne [T, n_mels] and spks ne [1, n_mels] already in the graph;
    // returns ne [T, n_mels].
    ggml_tensor* velocity(ggml_context* ctx, GraphInputs& in, ggml_tensor* x, ggml_tensor* mu, ggml_tensor* spks,
                          ggml_tensor* cond, float t, float r) const;
    // The U-Net on B rows at once: h ne [T, 4 n_mels, B] ([x; mu; spks; cond] along channels);
    // returns ne [T, n_mels, B].
    ggml_tensor* estimate(ggml_context* ctx, GraphInputs& in, ggml_tensor* h, float t, float r) const;
    ggml_tensor* time_embedding(ggml_context* ctx, GraphInputs& in, float t, float r) const;
    // Euler from x over ts on the device, every step x += (r - t) v(x, t, r), as many steps
    // in one graph as it holds. inputs(ctx, in) adds a graph's constant inputs and returns
    // the step velocity v built on that graph.
    using StepVelocity = std::function<ggml_tensor*(ggml_tensor* x, float t, float r)>;
    std::vector<float> euler(std::vector<float> x, int T, const std::vector<float>& ts,
                             const std::function<StepVelocity(ggml_context*, GraphInputs&)>& inputs);
    void check_inputs(size_t x, size_t mu, size_t spks, size_t cond, int T) const;
    // A graph's inputs for the conditional velocity (mu, spks, cond; the vectors outlive it).
    std::function<StepVelocity(ggml_context*, GraphInputs&)> conditioned(const std::vector<float>& mu,
                                                                          const std::vector<float>& spks,
                                                                          const std::vector<float>& cond, int T) const;
    // On a GPU: each transformer's q, k and v weights as one [C, 3A] weight in a buffer of
    // our own, so the three projections are one product (a GPU's CFM time is mostly the
    // per-operation cost of its ~4000 small operations). Skipped (the three products kept)
    // where their types differ or the device has no room.
    void fuse_qkv(const ModelFile& mf, ggml_backend_t backend);

    // How a graph under construction meets a prefix: Collect creates step 0's tensors (their
    // shapes found), Record copies them in, Use reads them.
    struct PrefixTap {
        enum class Mode { Collect, Record, Use } mode;
        CfmPrefix* prefix;
        size_t step;
        size_t next = 0;
        ggml_cgraph* graph = nullptr;  // Record: the copies are expanded into it
        ggml_tensor* take(ggml_type type, int64_t ne0, int64_t ne1);
    };
    // kv [A, T, 1] -> Use: [A, P + T, 1] (the prefix's first); otherwise kv (recorded).
    ggml_tensor* tap_keys_values(ggml_context* ctx, ggml_tensor* kv) const;
    // Use: the conv input's cached left context; otherwise nullptr (x's last k frames recorded).
    ggml_tensor* tap_conv_left(ggml_context* ctx, ggml_tensor* x, int k) const;
    // Euler over the prefix's steps (as euler()) with the tap in `mode` for each.
    std::vector<float> euler_tapped(CfmPrefix& prefix, std::vector<float> x, int T, PrefixTap::Mode mode,
                                    const std::function<StepVelocity(ggml_context*, GraphInputs&)>& inputs);

    mutable PrefixTap* tap_ = nullptr;  // set only while a graph is being built
    int in_channels_, out_channels_, channels_, n_head_, head_dim_, time_dim_;
    int64_t ff_ = -1;  // transformer feed-forward width (from the first one)
    bool meanflow_;
    float ln_eps_ = 1e-5f;  // torch.nn.LayerNorm's default, as the reference builds every LayerNorm
    ggml_tensor *t_l1_w_, *t_l1_b_, *t_l2_w_, *t_l2_b_, *mixer_w_ = nullptr;
    ggml_tensor *final_c_w_, *final_c_b_, *final_ln_w_, *final_ln_b_, *proj_w_, *proj_b_;
    Stage down_, up_;
    std::vector<Stage> mid_;
    ggml_context* qkv_ctx_ = nullptr;  // fuse_qkv's tensors and buffer
    ggml_backend_buffer_t qkv_buf_ = nullptr;
    GraphRunner runner_;
    bool on_cpu_;  // the CPU's element-wise ops (ggml_ops)
    CpuProducts products_ = false;  // exact for an f32 model, fast (AMX) for a quantised one
};

// The flow's CFM: spk projection, cond from the prompt mel, and the Euler sampler.
class S3GenCfm {
public:
    S3GenCfm(const ModelFile& mf, ggml_backend_t backend);

    // mu: row-major [n_mels][T] (encoder output for prompt + speech tokens);
    // prompt_feat: row-major [T_prompt][n_mels] (T_prompt <= T); embedding: the voice's
    // x-vector; x0: row-major [n_mels][T], the initial noise as the estimator first sees it.
    // Returns the mel for frames T_prompt.. T-1, row-major [n_mels][T - T_prompt].
    // n_steps overrides the model's Euler step count (0 = the model's; meanflow models
    // can be sampled in 1 step for speed, at some loss of detail).
    std::vector<float> sample(const std::vector<float>& mu, int T, const std::vector<float>& prompt_feat,
                              const std::vector<float>& embedding, const std::vector<float>& x0, int n_steps = 0);

    // One estimator evaluation at time t on x (row-major [n_mels][T]), arguments as sample():
    // the conditional velocity, and for the standard CFM the unconditional one (mu, spks and
    // cond zero), each row-major [n_mels][T]. The parity seam for every Euler step.
    std::vector<std::vector<float>> velocities(const std::vector<float>& mu, int T, const std::vector<float>& prompt_feat,
                                               const std::vector<float>& embedding, const std::vector<float>& x,
                                               float t, float r);

    // Streaming with the voice prompt as a cached prefix (meanflow models; CfmEstimator's
    // record_prefix says how). make_prefix takes the prompt's frames alone: mu, x0 row-major
    // [n_mels][P] and prompt_feat [P][n_mels], as sample() would over P frames. Then
    // sample_after_prefix(prefix, mu, T, x0) ([n_mels][T] each, the frames after the prompt)
    // returns their mel [n_mels][T] with the prefix's speaker and step count.
    std::shared_ptr<CfmPrefix> make_prefix(const std::vector<float>& mu, int P, const std::vector<float>& prompt_feat,
                                           const std::vector<float>& embedding, const std::vector<float>& x0,
                                           int n_steps = 0);
    std::vector<float> sample_after_prefix(const CfmPrefix& prefix, const std::vector<float>& mu, int T,
                                           const std::vector<float>& x0);

    int n_mels() const { return est_.n_mels(); }
    int n_timesteps() const { return n_timesteps_; }
    bool guided() const { return !meanflow_; }
    double cfg_rate() const { return cfg_rate_; }
    // The standard CFM's guidance rows in one batch-of-two evaluation per step (true, as the
    // reference) or two evaluations (false, the default). Same result; on the 2-core CPU the
    // batch took 0-7 % more CPU time (benchmarks/bench_mtl_cfm.py, three runs), as an earlier
    // port found (+11 %). A GPU may favour the batch: unmeasured here.
    bool guidance_batched() const { return guidance_batched_; }
    void set_guidance_batched(bool b) { guidance_batched_ = b; }
    // The Euler times for n_steps: torch.linspace(0, 1, n_steps + 1) in float32, then for the
    // standard CFM with the cosine scheduler 1 - cos(t * 0.5 * pi) in float32.
    std::vector<float> t_span(int n_steps) const;

private:
    // Validates sample()'s arguments; spks = spk_embed_affine_layer(F.normalize(embedding))
    // and cond = the prompt mel in the first T_prompt frames, zeros after ([n_mels][T]).
    // Returns T_prompt.
    int conditioning(const std::vector<float>& mu, int T, const std::vector<float>& prompt_feat,
                     const std::vector<float>& embedding, const std::vector<float>& x0, std::vector<float>& spks,
                     std::vector<float>& cond) const;

    CfmEstimator est_;
    std::vector<float> spk_w_, spk_b_;  // spk_embed_affine_layer, host copies
    int spk_in_, spk_out_, n_timesteps_;
    bool meanflow_, cosine_ = true, guidance_batched_ = false;
    double cfg_rate_ = 0.7;  // CFM_PARAMS.inference_cfg_rate, for files without the key
};

}  // namespace cbs
