#include "core/ggml_ops.h"

#include <cstring>

#include "core/backend.h"
#include "core/model_file.h"
#include "core/system_info.h"

namespace cbs {

ggml_tensor* layer_norm(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, float eps) {
    return ggml_add(ctx, ggml_mul(ctx, ggml_norm(ctx, x, eps), w), b);
}

ggml_tensor* linear(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b) {
    ggml_tensor* y = ggml_mul_mat(ctx, w, x);
    return b ? ggml_add(ctx, y, b) : y;
}

ggml_tensor* conv1d(ggml_context* ctx, ggml_tensor* x, ggml_tensor* w, ggml_tensor* b, int stride, int pad, int dilation) {
    ggml_tensor* cols = ggml_im2col(ctx, w, x, stride, 0, pad, 0, dilation, 0, false, GGML_TYPE_F32);  // [K*C_in, L_out]
    ggml_tensor* y = ggml_mul_mat(ctx, cols, ggml_reshape_2d(ctx, w, w->ne[0] * w->ne[1], w->ne[2]));  // [L_out, C_out]
    return b ? ggml_add(ctx, y, ggml_reshape_2d(ctx, b, 1, b->ne[0])) : y;
}

ggml_tensor* GraphInputs::ids(ggml_context* ctx, std::vector<int32_t> v) {
    ggml_tensor* t = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, static_cast<int64_t>(v.size()));
    ggml_set_input(t);
    ints.emplace_back(t, std::move(v));
    return t;
}

ggml_tensor* GraphInputs::f32(ggml_context* ctx, std::vector<float> v, int64_t ne0, int64_t ne1) {
    ggml_tensor* t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, ne0, ne1);
    ggml_set_input(t);
    floats.emplace_back(t, std::move(v));
    return t;
}

ggml_tensor* GraphInputs::f16_mask(ggml_context* ctx, std::vector<ggml_fp16_t> v, int64_t ne0, int64_t ne1) {
    ggml_tensor* t = ggml_new_tensor_2d(ctx, GGML_TYPE_F16, ne0, ne1);
    ggml_set_input(t);
    halves.emplace_back(t, std::move(v));
    return t;
}

void GraphInputs::upload() const {
    for (auto& [t, v] : ints) ggml_backend_tensor_set(t, v.data(), 0, ggml_nbytes(t));
    for (auto& [t, v] : floats) ggml_backend_tensor_set(t, v.data(), 0, ggml_nbytes(t));
    for (auto& [t, v] : halves) ggml_backend_tensor_set(t, v.data(), 0, ggml_nbytes(t));
}

GraphRunner::GraphRunner(ggml_backend_t backend, size_t max_nodes) : backend_(backend), max_nodes_(max_nodes) {
    meta_.resize(ggml_tensor_overhead() * max_nodes_ + ggml_graph_overhead_custom(max_nodes_, false));
    if (backend_is_cpu(backend_)) {
        alloc_ = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend_));
        return;
    }
    cpu_ = make_backend("cpu", default_thread_count()).release();
    ggml_backend_t backends[2] = {backend_, cpu_};  // the CPU last: sched's fallback
    sched_ = ggml_backend_sched_new(backends, nullptr, 2, max_nodes_, false, false);
    if (!sched_) {
        free_backend(cpu_);
        throw DeviceError(std::string("could not create a scheduler for ") + ggml_backend_name(backend_));
    }
}

GraphRunner::~GraphRunner() {
    if (ctx_) ggml_free(ctx_);
    if (alloc_) ggml_gallocr_free(alloc_);
    if (sched_) ggml_backend_sched_free(sched_);
    if (cpu_) free_backend(cpu_);
}

// A compute buffer kept between computations saves its allocation (page faults of a few ms
// per 100 MB); one larger than this is freed once its results are read, so the S3Gen
// encoder's and HiFT's buffers for a long sentence (about 120 MB each at 10 s) are not
// all held at once between passes.
static constexpr size_t kKeepComputeBytes = 64u << 20;

void GraphRunner::release_large_buffer() {
    if (!alloc_ || ggml_gallocr_get_buffer_size(alloc_, 0) <= kKeepComputeBytes) return;
    ggml_gallocr_free(alloc_);
    alloc_ = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend_));
}

ggml_context* GraphRunner::begin() {
    if (ctx_) ggml_free(ctx_);
    ++generation_;
    ctx_ = ggml_init({meta_.size(), meta_.data(), /*no_alloc=*/true});
    graph_ = ggml_new_graph_custom(ctx_, max_nodes_, false);
    return ctx_;
}

// An operation a device accepts (supports_op) but whose kernel aborts on these shapes
// (ggml 0.20.2): it goes to the CPU instead. CUDA's ssm_conv (S3Tokenizer's FSMN memory)
// has kernels for widths 3, 4, 5, 9 and 15 only.
static bool device_lacks(ggml_backend_t backend, const ggml_tensor* node) {
    if (node->op == GGML_OP_SSM_CONV && std::strncmp(ggml_backend_name(backend), "CUDA", 4) == 0) {
        const int64_t k = node->src[1]->ne[0];
        return k != 3 && k != 4 && k != 5 && k != 9 && k != 15;
    }
    return false;
}

void GraphRunner::run(const GraphInputs& in) {
    ggml_status status;
    if (sched_) {
        ggml_backend_sched_reset(sched_);
        for (int i = 0; i < ggml_graph_n_nodes(graph_); ++i) {
            ggml_tensor* node = ggml_graph_node(graph_, i);
            if (device_lacks(backend_, node)) ggml_backend_sched_set_tensor_backend(sched_, node, cpu_);
        }
        if (!ggml_backend_sched_alloc_graph(sched_, graph_))
            throw EngineError(std::string("not enough memory for the computation on ") + ggml_backend_name(backend_));
        in.upload();
        status = ggml_backend_sched_graph_compute(sched_, graph_);
    } else {
        if (!ggml_gallocr_alloc_graph(alloc_, graph_)) throw EngineError("not enough memory for the computation");
        in.upload();
        status = ggml_backend_graph_compute(backend_, graph_);
    }
    if (status == GGML_STATUS_ABORTED) throw CancelledError("cancelled");
    if (status == GGML_STATUS_ALLOC_FAILED) throw EngineError(std::string("out of memory on ") + ggml_backend_name(backend_));
    if (status != GGML_STATUS_SUCCESS) throw EngineError("graph computation failed");
}

std::vector<float> GraphRunner::rerun(ggml_tensor* out, const GraphInputs& in) {
    in.upload();
    const ggml_status status =
        sched_ ? ggml_backend_sched_graph_compute(sched_, graph_) : ggml_backend_graph_compute(backend_, graph_);
    if (status == GGML_STATUS_ABORTED) throw CancelledError("cancelled");
    if (status != GGML_STATUS_SUCCESS) throw EngineError(std::string("graph computation failed on ") + ggml_backend_name(backend_));
    std::vector<float> result(ggml_nelements(out));
    ggml_backend_tensor_get(out, result.data(), 0, ggml_nbytes(out));
    return result;
}

std::vector<float> GraphRunner::compute(ggml_tensor* out, const GraphInputs& in) {
    return std::move(compute(std::vector<ggml_tensor*>{out}, in)[0]);
}

std::vector<std::vector<float>> GraphRunner::compute(const std::vector<ggml_tensor*>& outs, const GraphInputs& in) {
    for (ggml_tensor* out : outs) {
        ggml_set_output(out);
        ggml_build_forward_expand(graph_, out);
    }
    run(in);
    std::vector<std::vector<float>> results;
    for (ggml_tensor* out : outs) {
        results.emplace_back(ggml_nelements(out));
        ggml_backend_tensor_get(out, results.back().data(), 0, ggml_nbytes(out));
    }
    release_large_buffer();
    return results;
}

}  // namespace cbs
