// S3Gen's conditional flow matching estimator: the ConditionalDecoder U-Net (causal ResNet
// blocks + BasicTransformerBlocks, full-context attention), one velocity evaluation per graph,
// and its Euler integration on the device (cfm_sampler.cpp) and over a cached prefix
// (cfm_prefix.cpp).
//
// Layouts: every [T, C] tensor is time-fastest (ggml ne0 = T), i.e. row-major
// (C, T) on the host, as PyTorch's (B=1, C, T). Inside the graph the U-Net keeps
// activations as [C, T] (channel-fastest, ggml ne0 = C) and transposes only to
// feed the causal convolutions' im2col.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/graph_runner.h"
#include "core/model_file.h"
#include "cpu/products.h"
#include "s3gen/cfm_prefix.h"

namespace cbs {

// Causal 1-D convolution of x [C_in, T] (channel fastest) with w ne [K, C_in, C_out]:
// left pad K-1, stride 1, full f32. Returns [C_out, T]; b [C_out] may be null. left
// [C_in, K-1], where given, stands in for the zero padding (the frames before x).
ggml_tensor* causal_conv1d_ct(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b,
                              CpuProducts blas = false, ggml_tensor* left = nullptr);

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
    // steps. Arguments as forward(); returns x row-major [n_mels][T]. The integrations are
    // the sampler's loops (cfm_sampler.cpp).
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

    // A stream's cached prefix. The U-Net's convolutions are causal, so frames that attend
    // only to themselves (a chunk-causal mask whose first chunk is the prefix: the voice
    // prompt) follow an Euler trajectory of their own, fixed by their x0, mu, spks and cond.
    // record_prefix integrates that trajectory once and keeps what later frames need of it
    // (CfmPrefix); integrate_after_prefix then integrates only later frames, which attend to
    // the prefix's cached keys and values and to each other (cond zero there, as after any
    // prompt). With `guidance` (the standard CFM's rate), every step is integrate_guided's,
    // two evaluations of one row each, and the prefix keeps both rows' tensors. Arguments as
    // integrate(), over the prefix's P frames or the later T (cfm_prefix.cpp).
    std::shared_ptr<CfmPrefix> record_prefix(const std::vector<float>& x0, const std::vector<float>& mu,
                                             const std::vector<float>& spks, const std::vector<float>& cond, int P,
                                             const std::vector<float>& ts, std::optional<double> guidance);
    std::vector<float> integrate_after_prefix(const CfmPrefix& prefix, const std::vector<float>& x0,
                                              const std::vector<float>& mu, const std::vector<float>& spks, int T);
    // A step keeps about 30 MB per row for a 10 s prompt (56 attentions' keys and values in
    // Q8_0): a guided model's default 10 steps about 600 MB. More steps than this stream
    // without the cache (every pass over the whole prompt).
    static constexpr int kMaxPrefixSteps = 10;

    int n_mels() const { return out_channels_; }
    // A pass of kReplayMinSteps or more as one step's graph computed again per step (euler's
    // `replay`): a device's default (CBS_CFM_REPLAY=0: off); the same mel on the CPU.
    bool replay_steps() const { return replay_steps_; }
    void set_replay_steps(bool on) { replay_steps_ = on; }
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
    // A velocity's time inputs in the order time_embedding adds them: t's sinusoid (meanflow:
    // then r's).
    std::vector<std::vector<float>> time_inputs(float t, float r) const;

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
    // the step velocity v built on that graph (whose only inputs of its own are the time's).
    // `replay` (replay_steps()) with kReplayMinSteps or more: euler_replayed.
    using StepVelocity = std::function<ggml_tensor*(ggml_tensor* x, float t, float r)>;
    std::vector<float> euler(std::vector<float> x, int T, const std::vector<float>& ts,
                             const std::function<StepVelocity(ggml_context*, GraphInputs&)>& inputs,
                             bool replay = false);
    // The same as one step's graph, computed again for each step with the step's x, time and
    // size as inputs.
    std::vector<float> euler_replayed(std::vector<float> x, int T, const std::vector<float>& ts,
                                      const std::function<StepVelocity(ggml_context*, GraphInputs&)>& inputs);
    static constexpr int kReplayMinSteps = 3;
    void check_inputs(size_t x, size_t mu, size_t spks, size_t cond, int T) const;
    // A graph's inputs for the conditional velocity (mu, spks, cond; the vectors outlive it).
    std::function<StepVelocity(ggml_context*, GraphInputs&)> conditioned(const std::vector<float>& mu,
                                                                          const std::vector<float>& spks,
                                                                          const std::vector<float>& cond, int T) const;
    // The same with classifier-free guidance (integrate_guided's step velocity).
    std::function<StepVelocity(ggml_context*, GraphInputs&)> guided(const std::vector<float>& mu,
                                                                     const std::vector<float>& spks,
                                                                     const std::vector<float>& cond, int T, double rate,
                                                                     bool batched) const;
    // On a GPU: each transformer's q, k and v weights as one [C, 3A] weight in a buffer of
    // our own, so the three projections are one product (a GPU's CFM time is mostly the
    // per-operation cost of its ~4000 small operations). Skipped (the three products kept)
    // where their types differ or the device has no room.
    void fuse_qkv(const ModelFile& mf, ggml_backend_t backend);
    // On the CPU in the fast products: each f32 causal convolution's weight [k, C_in, C_out]
    // as [k * C_in, C_out] with its k frames in order of time (cpu/products.h
    // causal_conv_product, which needs no im2col), in a buffer of our own (a second copy of
    // the convolutions' weights: ~30 MB for the full-size estimator).
    void order_convs_by_time(const ModelFile& mf, ggml_backend_t backend);

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
    // A prefix's step velocity: conditioned(), or guided() unbatched with a guidance rate.
    std::function<StepVelocity(ggml_context*, GraphInputs&)> step_inputs(const std::vector<float>& mu,
                                                                         const std::vector<float>& spks,
                                                                         const std::vector<float>& cond, int T,
                                                                         std::optional<double> guidance) const;
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
    std::unordered_map<const ggml_tensor*, ggml_tensor*> time_ordered_;  // conv weight -> its time-ordered copy
    ggml_context* conv_ctx_ = nullptr;  // order_convs_by_time's tensors and buffer
    ggml_backend_buffer_t conv_buf_ = nullptr;
    GraphRunner runner_;
    bool on_cpu_;  // the CPU's element-wise ops (cpu/activations.h)
    bool replay_steps_;  // euler's `replay` for integrate() (replay_steps())
    CpuProducts products_ = false;  // exact for an f32 model, fast (AMX) for a quantised one
    CpuProducts attention_products_ = false;  // products_, or on a GPU device_default (constructor)
};

}  // namespace cbs
