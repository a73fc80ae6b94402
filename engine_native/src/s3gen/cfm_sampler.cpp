#include "s3gen/cfm_sampler.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/backend.h"
#include "core/errors.h"

namespace cbs {

// ---------------------------------------------------------------------------
// The Euler integration (CfmEstimator's, on the device)
// ---------------------------------------------------------------------------

std::vector<float> CfmEstimator::euler(std::vector<float> x, int T, const std::vector<float>& ts,
                                       const std::function<StepVelocity(ggml_context*, GraphInputs&)>& inputs,
                                       bool replay) {
    const int M = out_channels_;
    const int n_steps = static_cast<int>(ts.size()) - 1;
    if (replay && n_steps >= kReplayMinSteps) return euler_replayed(std::move(x), T, ts, inputs);
    int nodes_per_step = 0;
    for (int s = 0; s < n_steps;) {
        ggml_context* ctx = runner_.begin();
        ggml_cgraph* gf = runner_.graph();
        GraphInputs in;
        ggml_tensor* xt = in.f32(ctx, x, T, M);
        const StepVelocity velocity_at = inputs(ctx, in);
        // As many steps as the graph holds (all of them for the usual few): x += (r - t) v.
        do {
            const int before = ggml_graph_n_nodes(gf);
            const float t = ts[s], r = ts[s + 1];
            xt = ggml_add(ctx, xt, ggml_scale(ctx, velocity_at(xt, t, r), r - t));
            ggml_build_forward_expand(gf, xt);
            nodes_per_step = std::max(nodes_per_step, ggml_graph_n_nodes(gf) - before);
            ++s;
        } while (s < n_steps && ggml_graph_n_nodes(gf) + 2 * nodes_per_step < ggml_graph_size(gf));
        x = runner_.compute(xt, in);
    }
    return x;
}

// GraphRunner::rerun: no rebuild, no re-allocation. ggml-cuda replays a graph computed twice
// unchanged as a CUDA graph, so from the third step on a step costs its kernels, not the
// host's launch of each node. The step size is an input (ggml_scale's factor would change the
// graph); v * dt is the same f32 product as ggml_scale's.
std::vector<float> CfmEstimator::euler_replayed(std::vector<float> x, int T, const std::vector<float>& ts,
                                                const std::function<StepVelocity(ggml_context*, GraphInputs&)>& inputs) {
    const int M = out_channels_;
    const int n_steps = static_cast<int>(ts.size()) - 1;
    ggml_context* ctx = runner_.begin();
    GraphInputs in;
    ggml_tensor* xt = in.f32(ctx, x, T, M);
    const size_t x_input = in.floats.size() - 1;
    const StepVelocity velocity_at = inputs(ctx, in);
    const size_t first_time = in.floats.size();
    ggml_tensor* v = velocity_at(xt, ts[0], ts[1]);
    const size_t n_time = in.floats.size() - first_time;
    ggml_tensor* dt = in.f32(ctx, {ts[1] - ts[0]}, 1);
    const size_t dt_input = in.floats.size() - 1;
    ggml_tensor* next = ggml_add(ctx, xt, ggml_mul(ctx, v, dt));
    x = runner_.compute(next, in, /*keep_buffer=*/true);
    for (int s = 1; s < n_steps; ++s) {
        const std::vector<std::vector<float>> times = time_inputs(ts[s], ts[s + 1]);
        for (size_t i = 0; i < n_time; ++i) in.floats[first_time + i].second = times[i % times.size()];
        in.floats[x_input].second = std::move(x);
        in.floats[dt_input].second = {ts[s + 1] - ts[s]};
        x = runner_.rerun(next, in);
    }
    runner_.release_large_buffer();
    return x;
}

std::vector<float> CfmEstimator::integrate(const std::vector<float>& x0, const std::vector<float>& mu,
                                           const std::vector<float>& spks, const std::vector<float>& cond, int T,
                                           const std::vector<float>& ts) {
    check_inputs(x0.size(), mu.size(), spks.size(), cond.size(), T);
    return euler(x0, T, ts, conditioned(mu, spks, cond, T), replay_steps_);
}

std::function<CfmEstimator::StepVelocity(ggml_context*, GraphInputs&)> CfmEstimator::conditioned(
    const std::vector<float>& mu, const std::vector<float>& spks, const std::vector<float>& cond, int T) const {
    const int M = out_channels_;
    return [this, &mu, &spks, &cond, T, M](ggml_context* ctx, GraphInputs& in) -> StepVelocity {
        ggml_tensor *mut = in.f32(ctx, mu, T, M), *spt = in.f32(ctx, spks, 1, M), *condt = in.f32(ctx, cond, T, M);
        return [this, ctx, &in, mut, spt, condt](ggml_tensor* x, float t, float r) {
            return velocity(ctx, in, x, mut, spt, condt, t, r);
        };
    };
}

std::vector<float> CfmEstimator::integrate_guided(const std::vector<float>& x0, const std::vector<float>& mu,
                                                  const std::vector<float>& spks, const std::vector<float>& cond,
                                                  int T, const std::vector<float>& ts, double rate, bool batched) {
    check_inputs(x0.size(), mu.size(), spks.size(), cond.size(), T);
    return euler(x0, T, ts, guided(mu, spks, cond, T, rate, batched), replay_steps_);
}

// Guidance as solve_euler computes it, in float32: the rows' weights are the float32 values
// of the Python floats (1.0 + inference_cfg_rate) and inference_cfg_rate.
std::function<CfmEstimator::StepVelocity(ggml_context*, GraphInputs&)> CfmEstimator::guided(
    const std::vector<float>& mu, const std::vector<float>& spks, const std::vector<float>& cond, int T, double rate,
    bool batched) const {
    const int M = out_channels_;
    const float w_cond = static_cast<float>(1.0 + rate), w_uncond = static_cast<float>(rate);
    return [this, &mu, &spks, &cond, T, M, w_cond, w_uncond, batched](ggml_context* ctx, GraphInputs& in) -> StepVelocity {
        // The rows' conditioning [mu; spks; cond] (channels 1..3 of the input) and the
        // unconditional row's zeros in their place.
        ggml_tensor* mut = in.f32(ctx, mu, T, M);
        ggml_tensor* c_cond = ggml_concat(ctx, ggml_concat(ctx, mut, ggml_repeat(ctx, in.f32(ctx, spks, 1, M), mut), 1),
                                          in.f32(ctx, cond, T, M), 1);
        ggml_tensor* c_uncond = in.f32(ctx, std::vector<float>(static_cast<size_t>(3) * M * T, 0.0f), T, 3 * M);
        return [this, ctx, &in, c_cond, c_uncond, batched, T, M, w_cond, w_uncond](ggml_tensor* x, float t, float r) {
            ggml_tensor* h_cond = ggml_concat(ctx, x, c_cond, 1);  // [T, 4M]
            ggml_tensor* h_uncond = ggml_concat(ctx, x, c_uncond, 1);
            ggml_tensor *v_cond, *v_uncond;
            if (batched) {
                ggml_tensor* v = estimate(ctx, in, ggml_concat(ctx, h_cond, h_uncond, 2), t, r);  // [T, M, 2]
                v_cond = ggml_view_2d(ctx, v, T, M, v->nb[1], 0);
                v_uncond = ggml_view_2d(ctx, v, T, M, v->nb[1], v->nb[2]);
            } else {
                v_cond = estimate(ctx, in, h_cond, t, r);
                v_uncond = estimate(ctx, in, h_uncond, t, r);
            }
            return ggml_sub(ctx, ggml_scale(ctx, v_cond, w_cond), ggml_scale(ctx, v_uncond, w_uncond));
        };
    };
}

// ---------------------------------------------------------------------------
// The flow's sampler
// ---------------------------------------------------------------------------

S3GenCfm::S3GenCfm(const ModelFile& mf, ggml_backend_t backend) : est_(mf, backend) {
    n_timesteps_ = static_cast<int>(mf.get_int("chatterbox.s3gen.cfm.n_timesteps"));
    meanflow_ = mf.get_bool("chatterbox.s3gen.cfm.meanflow");
    if (n_timesteps_ <= 0) throw ModelError(mf.path() + ": s3gen.cfm.n_timesteps must be positive");
    // The standard CFM's schedule and guidance (CFM_PARAMS' values where a file lacks them).
    if (mf.has_key("chatterbox.s3gen.cfm.t_scheduler"))
        cosine_ = mf.get_string("chatterbox.s3gen.cfm.t_scheduler") == "cosine";
    if (mf.has_key("chatterbox.s3gen.cfm.inference_cfg_rate"))
        cfg_rate_ = mf.get_float("chatterbox.s3gen.cfm.inference_cfg_rate");
    if (!std::isfinite(cfg_rate_)) throw ModelError(mf.path() + ": s3gen.cfm.inference_cfg_rate must be finite");
    const ggml_tensor* w = mf.tensor("s3gen.flow.spk_embed_affine_layer.weight", {-1, est_.n_mels()});
    spk_in_ = static_cast<int>(w->ne[0]);
    spk_out_ = static_cast<int>(w->ne[1]);
    spk_w_ = mf.read_f32(w);
    spk_b_ = mf.read_f32(mf.tensor("s3gen.flow.spk_embed_affine_layer.bias", {spk_out_}));
    guidance_batched_ = !backend_is_cpu(backend);
}

std::vector<float> S3GenCfm::t_span(int n_steps) const {
    // torch.linspace(0, 1, n + 1, float32) as torch 2.x's CPU kernel computes it (checked for
    // every n up to 300): a float32 step, each value start + step * i (first half) or
    // end - step * (steps - 1 - i) (second half) in double, rounded to float32.
    const int steps = n_steps + 1;
    std::vector<float> ts(steps);
    const double step = 1.0f / static_cast<float>(n_steps);
    const int halfway = steps / 2;
    for (int i = 0; i < steps; ++i)
        ts[i] = static_cast<float>(i < halfway ? step * i : 1.0 - step * (steps - 1 - i));
    // meanflow uses it as is (CausalConditionalCFM.forward skips the scheduler).
    if (meanflow_ || !cosine_) return ts;
    // 1 - cos(t * 0.5 * pi) in float32 (torch.pi a float32 scalar). torch's float32 cos
    // (MKL's vector cos in the oracle's wheel) is within one ulp of the correctly rounded
    // value used here; the two agree on every value for the default 10 steps.
    const float pi = static_cast<float>(M_PI);
    for (float& t : ts) t = 1.0f - static_cast<float>(std::cos(static_cast<double>((t * 0.5f) * pi)));
    return ts;
}

int S3GenCfm::conditioning(const std::vector<float>& mu, int T, const std::vector<float>& prompt_feat,
                           const std::vector<float>& embedding, const std::vector<float>& x0, std::vector<float>& spks,
                           std::vector<float>& cond) const {
    const int M = est_.n_mels();
    const size_t n = static_cast<size_t>(M) * T;
    if (T <= 0 || mu.size() != n) throw EngineError("mu must be [" + std::to_string(M) + ", T] with T > 0");
    if (x0.size() != n)
        throw EngineError("x0 must be [" + std::to_string(M) + ", " + std::to_string(T) + "] (n_mels x mel frames of mu), got " +
                          std::to_string(x0.size()) + " values");
    if (prompt_feat.size() % M != 0) throw EngineError("prompt_feat must be [T_prompt, " + std::to_string(M) + "]");
    const int P = static_cast<int>(prompt_feat.size() / M);
    if (P > T) throw EngineError("prompt_feat has more frames (" + std::to_string(P) + ") than mu (" + std::to_string(T) + ")");
    if (embedding.size() != static_cast<size_t>(spk_in_))
        throw EngineError("speaker embedding must have " + std::to_string(spk_in_) + " values");

    // spks = spk_embed_affine_layer(F.normalize(embedding)).
    double ss = 0.0;
    for (float v : embedding) ss += static_cast<double>(v) * v;
    const float norm = std::max(static_cast<float>(std::sqrt(ss)), 1e-12f);
    std::vector<float> e(spk_in_);
    for (int k = 0; k < spk_in_; ++k) e[k] = embedding[k] / norm;
    spks.assign(M, 0.0f);
    for (int o = 0; o < M; ++o) {
        double acc = spk_b_[o];
        for (int k = 0; k < spk_in_; ++k) acc += static_cast<double>(spk_w_[static_cast<size_t>(o) * spk_in_ + k]) * e[k];
        spks[o] = static_cast<float>(acc);
    }

    // cond: the prompt mel in the first P frames, zeros after; row-major [M][T].
    cond.assign(n, 0.0f);
    for (int f = 0; f < P; ++f)
        for (int c = 0; c < M; ++c) cond[static_cast<size_t>(c) * T + f] = prompt_feat[static_cast<size_t>(f) * M + c];
    return P;
}

std::vector<float> S3GenCfm::sample(const std::vector<float>& mu, int T, const std::vector<float>& prompt_feat,
                                    const std::vector<float>& embedding, const std::vector<float>& x0, int n_steps) {
    if (n_steps < 0 || n_steps > 100) throw EngineError("cfm_steps must be between 1 and 100");
    if (n_steps == 0) n_steps = n_timesteps_;
    std::vector<float> spks, cond;
    const int P = conditioning(mu, T, prompt_feat, embedding, x0, spks, cond);
    const int M = est_.n_mels();

    // Euler over t_span on the device: meanflow x += (r - t) v(x, t, r); the standard CFM
    // with classifier-free guidance inside every step.
    const std::vector<float> x = meanflow_ ? est_.integrate(x0, mu, spks, cond, T, t_span(n_steps))
                                           : est_.integrate_guided(x0, mu, spks, cond, T, t_span(n_steps), cfg_rate_,
                                                                   guidance_batched_);

    std::vector<float> out(static_cast<size_t>(M) * (T - P));
    for (int c = 0; c < M; ++c)
        std::copy(x.begin() + static_cast<size_t>(c) * T + P, x.begin() + static_cast<size_t>(c + 1) * T,
                  out.begin() + static_cast<size_t>(c) * (T - P));
    return out;
}

std::shared_ptr<CfmPrefix> S3GenCfm::make_prefix(const std::vector<float>& mu, int P,
                                                  const std::vector<float>& prompt_feat,
                                                  const std::vector<float>& embedding, const std::vector<float>& x0,
                                                  int n_steps) {
    if (n_steps < 0 || n_steps > 100) throw EngineError("cfm_steps must be between 1 and 100");
    if (n_steps == 0) n_steps = n_timesteps_;
    std::vector<float> spks, cond;
    if (conditioning(mu, P, prompt_feat, embedding, x0, spks, cond) != P)
        throw EngineError("a stream prefix is the prompt's frames alone: prompt_feat must have mu's frames");
    std::shared_ptr<CfmPrefix> prefix = est_.record_prefix(x0, mu, spks, cond, P, t_span(n_steps),
                                                                  meanflow_ ? std::nullopt : std::optional<double>(cfg_rate_));
    prefix->spks_ = std::move(spks);
    return prefix;
}

std::vector<float> S3GenCfm::sample_after_prefix(const CfmPrefix& prefix, const std::vector<float>& mu, int T,
                                                 const std::vector<float>& x0) {
    const size_t n = static_cast<size_t>(est_.n_mels()) * T;
    if (T <= 0 || mu.size() != n || x0.size() != n)
        throw EngineError("mu and x0 after the prefix must be [" + std::to_string(est_.n_mels()) + ", T] with T > 0");
    return est_.integrate_after_prefix(prefix, x0, mu, prefix.spks_, T);
}

std::vector<std::vector<float>> S3GenCfm::velocities(const std::vector<float>& mu, int T,
                                                     const std::vector<float>& prompt_feat,
                                                     const std::vector<float>& embedding, const std::vector<float>& x,
                                                     float t, float r) {
    std::vector<float> spks, cond;
    conditioning(mu, T, prompt_feat, embedding, x, spks, cond);
    std::vector<std::vector<float>> v{est_.forward(x, mu, spks, cond, T, t, r)};
    if (!meanflow_) {
        const std::vector<float> zeros(mu.size(), 0.0f);
        v.push_back(est_.forward(x, zeros, std::vector<float>(spks.size(), 0.0f), zeros, T, t, r));
    }
    return v;
}

}  // namespace cbs
