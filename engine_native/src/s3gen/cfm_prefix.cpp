#include "s3gen/cfm_prefix.h"

#include <cstring>
#include <memory>
#include <string>

#include "core/backend.h"
#include "core/errors.h"
#include "s3gen/cfm_estimator.h"

namespace cbs {

// Enough frames for every convolution's left context (kernels of 3 here).
static constexpr int kMinPrefixFrames = 8;

CfmPrefix::~CfmPrefix() {
    if (buf_) ggml_backend_buffer_free(buf_);
    if (ctx_) ggml_free(ctx_);
}

size_t CfmPrefix::bytes() const { return buf_ ? ggml_backend_buffer_get_size(buf_) : 0; }

namespace {
// dst [A, P + T] f32: the cached prefix's P rows (src 0, Q8_0 or f16) as f32, then the T rows
// of kv (src 1, f32 [A, T], rows contiguous, a view's stride), each thread its own rows: the
// prefix's keys or values and a pass's own in one pass over memory, where get_rows and then
// ggml_concat's element-by-element loop cost a large share of a short pass's CFM time.
void prefix_then_rows(ggml_tensor* dst, int ith, int nth, void*) {
    const ggml_tensor *cached = dst->src[0], *kv = dst->src[1];
    const int64_t A = dst->ne[0], P = cached->ne[1], rows = dst->ne[1];
    const ggml_to_float_t to_float = ggml_get_type_traits(cached->type)->to_float;
    for (int64_t r = rows * ith / nth; r < rows * (ith + 1) / nth; ++r) {
        auto* out = reinterpret_cast<float*>(static_cast<char*>(dst->data) + r * dst->nb[1]);
        if (r < P)
            to_float(static_cast<const char*>(cached->data) + r * cached->nb[1], out, A);
        else
            std::memcpy(out, static_cast<const char*>(kv->data) + (r - P) * kv->nb[1], A * sizeof(float));
    }
}
}  // namespace

ggml_tensor* CfmEstimator::PrefixTap::take(ggml_type type, int64_t ne0, int64_t ne1) {
    std::vector<ggml_tensor*>& tensors = prefix->steps_.at(step);
    if (mode == Mode::Collect) {
        tensors.push_back(ggml_new_tensor_2d(prefix->ctx_, type, ne0, ne1));
        return tensors.back();
    }
    if (next >= tensors.size()) throw EngineError("the CFM's cached prefix does not match this graph");
    ggml_tensor* t = tensors[next++];
    if (t->type != type || t->ne[0] != ne0 || (mode == Mode::Record && t->ne[1] != ne1))
        throw EngineError("the CFM's cached prefix does not match this graph");
    return t;
}

ggml_tensor* CfmEstimator::tap_keys_values(ggml_context* ctx, ggml_tensor* kv) const {
    // Q8_0 (blocks of 32 along the channels) where the width allows, else f16.
    const ggml_type type = kv->ne[0] % ggml_blck_size(GGML_TYPE_Q8_0) == 0 ? GGML_TYPE_Q8_0 : GGML_TYPE_F16;
    ggml_tensor* cached = tap_->take(type, kv->ne[0], kv->ne[1]);
    switch (tap_->mode) {
        case PrefixTap::Mode::Collect: return kv;
        case PrefixTap::Mode::Record: ggml_build_forward_expand(tap_->graph, ggml_cpy(ctx, kv, cached)); return kv;
        case PrefixTap::Mode::Use: break;
    }
    // A device backend: its own cast and concat (the custom op below runs on the CPU only).
    if (!on_cpu_) return ggml_concat(ctx, ggml_cast(ctx, cached, GGML_TYPE_F32), kv, 1);
    ggml_tensor* args[2] = {cached, kv};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, kv->ne[0], cached->ne[1] + kv->ne[1], 1, 1, args, 2, prefix_then_rows,
                          GGML_N_TASKS_MAX, nullptr);
}

ggml_tensor* CfmEstimator::tap_conv_left(ggml_context* ctx, ggml_tensor* x, int k) const {
    ggml_tensor* cached = tap_->take(GGML_TYPE_F32, x->ne[0], k);
    switch (tap_->mode) {
        case PrefixTap::Mode::Collect: return nullptr;
        case PrefixTap::Mode::Record: {
            ggml_tensor* tail = ggml_view_2d(ctx, x, x->ne[0], k, x->nb[1], (x->ne[1] - k) * x->nb[1]);
            ggml_build_forward_expand(tap_->graph, ggml_cpy(ctx, tail, cached));
            return nullptr;
        }
        case PrefixTap::Mode::Use: break;
    }
    return cached;
}

namespace {
// tap_ set for one estimator evaluation's construction (cleared however it ends).
template <class Tap>
struct TapScope {
    Tap*& slot;
    TapScope(Tap*& s, Tap* t) : slot(s) { slot = t; }
    ~TapScope() { slot = nullptr; }
};
}  // namespace

std::vector<float> CfmEstimator::euler_tapped(CfmPrefix& prefix, std::vector<float> x, int T, PrefixTap::Mode mode,
                                              const std::function<StepVelocity(ggml_context*, GraphInputs&)>& inputs) {
    size_t step = 0;
    return euler(std::move(x), T, prefix.ts_, [&](ggml_context* ctx, GraphInputs& in) -> StepVelocity {
        StepVelocity velocity_at = inputs(ctx, in);
        return [this, velocity_at, &step, &prefix, mode](ggml_tensor* xt, float t, float r) {
            PrefixTap tap{mode, &prefix, step++, 0, runner_.graph()};
            TapScope<PrefixTap> scope(tap_, &tap);
            return velocity_at(xt, t, r);
        };
    });
}

std::shared_ptr<CfmPrefix> CfmEstimator::record_prefix(const std::vector<float>& x0, const std::vector<float>& mu,
                                                       const std::vector<float>& spks, const std::vector<float>& cond,
                                                       int P, const std::vector<float>& ts,
                                                       std::optional<double> guidance) {
    check_inputs(x0.size(), mu.size(), spks.size(), cond.size(), P);
    const int n_steps = static_cast<int>(ts.size()) - 1;
    if (P < kMinPrefixFrames) throw EngineError("a cached stream prefix needs at least " + std::to_string(kMinPrefixFrames) + " frames");
    if (n_steps < 1 || n_steps > kMaxPrefixSteps)
        throw EngineError("a cached stream prefix takes 1 to " + std::to_string(kMaxPrefixSteps) + " CFM steps");
    const int M = out_channels_;
    auto prefix = std::make_shared<CfmPrefix>();
    prefix->ts_ = ts;
    prefix->guidance_ = guidance;
    const auto inputs = step_inputs(mu, spks, cond, P, guidance);
    prefix->ctx_ = ggml_init({ggml_tensor_overhead() * 2048 * static_cast<size_t>(n_steps), nullptr, /*no_alloc=*/true});
    prefix->steps_.assign(n_steps, {});
    {  // The tensors one step meets (a graph built and dropped), then as many for every step.
        ggml_context* ctx = runner_.begin();
        GraphInputs in;
        PrefixTap tap{PrefixTap::Mode::Collect, prefix.get(), 0};
        TapScope<PrefixTap> scope(tap_, &tap);
        inputs(ctx, in)(in.f32(ctx, x0, P, M), ts[0], ts[1]);
    }
    for (int s = 1; s < n_steps; ++s)
        for (ggml_tensor* t : prefix->steps_[0]) prefix->steps_[s].push_back(ggml_dup_tensor(prefix->ctx_, t));
    prefix->buf_ = ggml_backend_alloc_ctx_tensors(prefix->ctx_, runner_.backend());
    if (!prefix->buf_) throw EngineError("not enough memory for the stream's cached prefix");
    euler_tapped(*prefix, x0, P, PrefixTap::Mode::Record, inputs);
    prefix->frames_ = P;
    return prefix;
}

std::vector<float> CfmEstimator::integrate_after_prefix(const CfmPrefix& prefix, const std::vector<float>& x0,
                                                        const std::vector<float>& mu, const std::vector<float>& spks,
                                                        int T) {
    if (prefix.frames_ == 0) throw EngineError("the stream prefix was never completed");
    check_inputs(x0.size(), mu.size(), spks.size(), mu.size(), T);
    const std::vector<float> cond(mu.size(), 0.0f);  // after the prompt
    // Use only reads the prefix (its tensors and times).
    return euler_tapped(const_cast<CfmPrefix&>(prefix), x0, T, PrefixTap::Mode::Use,
                        step_inputs(mu, spks, cond, T, prefix.guidance_));
}

std::function<CfmEstimator::StepVelocity(ggml_context*, GraphInputs&)> CfmEstimator::step_inputs(
    const std::vector<float>& mu, const std::vector<float>& spks, const std::vector<float>& cond, int T,
    std::optional<double> guidance) const {
    // Guided: the two rows as two evaluations, so that each meets the prefix as one row does.
    return guidance ? guided(mu, spks, cond, T, *guidance, /*batched=*/false) : conditioned(mu, spks, cond, T);
}

}  // namespace cbs
