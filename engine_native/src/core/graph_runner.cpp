#include "core/graph_runner.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>

#include "core/backend.h"
#include "core/errors.h"
#include "core/system_info.h"

namespace cbs {

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
// all held at once between passes, nor the CFM's for a voice prompt's cached prefix (about
// 50 MB) beside the prefix itself.
static constexpr size_t kKeepComputeBytes = 16u << 20;

void GraphRunner::release_large_buffer() {
    if (!alloc_ || ggml_gallocr_get_buffer_size(alloc_, 0) <= kKeepComputeBytes) return;
    ggml_gallocr_free(alloc_);
    alloc_ = ggml_gallocr_new(ggml_backend_get_default_buffer_type(backend_));
}

ggml_context* GraphRunner::begin() {
    begun_ = std::chrono::steady_clock::now();
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

// CBS_PROFILE_OPS=1 (a diagnostic, device graphs only): every node of a graph computed and
// waited for on its own through the scheduler's eval callback, the time per operation summed
// by kind and printed to stderr after each graph (kernel time plus one launch and one sync
// each; the graph's own time, all nodes launched at once, is printed beside it).
static bool profile_ops() {
    static const bool on = [] {
        const char* e = std::getenv("CBS_PROFILE_OPS");
        return e && *e && std::string(e) != "0";
    }();
    return on;
}

namespace {
struct OpProfile {
    std::chrono::steady_clock::time_point start;
    std::map<std::string, std::pair<int, double>> by_kind;  // kind -> (nodes, ms)
};

bool profile_node(ggml_tensor* t, bool ask, void* data) {
    auto* p = static_cast<OpProfile*>(data);
    const auto now = std::chrono::steady_clock::now();
    if (ask) {
        p->start = now;
        return true;
    }
    std::string kind = ggml_op_desc(t);
    if (t->op == GGML_OP_MUL_MAT && t->src[0])
        kind += std::string(" ") + ggml_type_name(t->src[0]->type) + (ggml_is_contiguous(t->src[0]) ? "" : " view") +
                (t->ne[2] * t->ne[3] > 1 ? " batched" : "");
    auto& e = p->by_kind[kind];
    e.first += 1;
    e.second += std::chrono::duration<double, std::milli>(now - p->start).count();
    return true;
}
}  // namespace

static void print_profile(const OpProfile& p, int n_nodes, double node_by_node_ms, double whole_ms) {
    std::vector<std::pair<std::string, std::pair<int, double>>> rows(p.by_kind.begin(), p.by_kind.end());
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.second > b.second.second; });
    std::fprintf(stderr, "[ops] graph of %d nodes: %.2f ms node by node, %.2f ms as one graph\n", n_nodes,
                 node_by_node_ms, whole_ms);
    for (size_t i = 0; i < rows.size() && i < 14; ++i)
        std::fprintf(stderr, "[ops]   %-32s %5d nodes %8.2f ms\n", rows[i].first.c_str(), rows[i].second.first,
                     rows[i].second.second);
}

void GraphRunner::assign_lacking_ops() {
    for (int i = 0; i < ggml_graph_n_nodes(graph_); ++i) {
        ggml_tensor* node = ggml_graph_node(graph_, i);
        if (device_lacks(backend_, node)) ggml_backend_sched_set_tensor_backend(sched_, node, cpu_);
    }
}

size_t GraphRunner::reserve(ggml_tensor* out) {
    if (!sched_) return 0;
    ggml_build_forward_expand(graph_, out);
    ggml_backend_sched_reset(sched_);
    assign_lacking_ops();
    if (!ggml_backend_sched_reserve(sched_, graph_))
        throw EngineError(std::string("not enough memory for the computation on ") + ggml_backend_name(backend_));
    ggml_backend_sched_reset(sched_);
    return ggml_backend_sched_get_buffer_size(sched_, backend_);
}

// CBS_PROFILE_GRAPH=1 (a diagnostic, device graphs only): each graph's host time by phase on
// stderr: building it (from begin()), the scheduler's split and allocation, the inputs' upload,
// the computation (waited for).
static bool profile_graph() {
    static const bool on = [] {
        const char* e = std::getenv("CBS_PROFILE_GRAPH");
        return e && *e && std::string(e) != "0";
    }();
    return on;
}

void GraphRunner::run(const GraphInputs& in) {
    ggml_status status;
    if (sched_) {
        using clock = std::chrono::steady_clock;
        const auto t0 = clock::now();
        ggml_backend_sched_reset(sched_);
        assign_lacking_ops();
        if (!ggml_backend_sched_alloc_graph(sched_, graph_))
            throw EngineError(std::string("not enough memory for the computation on ") + ggml_backend_name(backend_));
        const auto t1 = clock::now();
        in.upload();
        const auto t2 = clock::now();
        status = profile_ops() ? profiled_compute(in) : ggml_backend_sched_graph_compute(sched_, graph_);
        if (profile_graph()) {
            ggml_backend_sched_synchronize(sched_);
            auto ms = [](clock::time_point a, clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
            std::fprintf(stderr, "[graph] %d nodes, %d splits: build %.2f ms, split + alloc %.2f ms, upload %.2f ms, compute %.2f ms\n",
                         ggml_graph_n_nodes(graph_), ggml_backend_sched_get_n_splits(sched_), ms(begun_, t0), ms(t0, t1),
                         ms(t1, t2), ms(t2, clock::now()));
        }
    } else {
        if (!ggml_gallocr_alloc_graph(alloc_, graph_)) throw EngineError("not enough memory for the computation");
        in.upload();
        status = ggml_backend_graph_compute(backend_, graph_);
    }
    if (status == GGML_STATUS_ABORTED) throw CancelledError("cancelled");
    if (status == GGML_STATUS_ALLOC_FAILED) throw EngineError(std::string("out of memory on ") + ggml_backend_name(backend_));
    if (status != GGML_STATUS_SUCCESS) throw EngineError("graph computation failed");
}

// The graph as usual (timed), then again node by node (inputs uploaded again: the
// allocator may have reused their memory).
ggml_status GraphRunner::profiled_compute(const GraphInputs& in) {
    using clock = std::chrono::steady_clock;
    auto t0 = clock::now();
    ggml_status status = ggml_backend_sched_graph_compute(sched_, graph_);
    ggml_backend_sched_synchronize(sched_);
    const double whole = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    if (status != GGML_STATUS_SUCCESS) return status;
    OpProfile prof;
    ggml_backend_sched_set_eval_callback(sched_, profile_node, &prof);
    in.upload();
    t0 = clock::now();
    status = ggml_backend_sched_graph_compute(sched_, graph_);
    ggml_backend_sched_synchronize(sched_);
    const double by_node = std::chrono::duration<double, std::milli>(clock::now() - t0).count();
    ggml_backend_sched_set_eval_callback(sched_, nullptr, nullptr);
    print_profile(prof, ggml_graph_n_nodes(graph_), by_node, whole);
    return status;
}

std::vector<float> GraphRunner::rerun(ggml_tensor* out, const GraphInputs& in) {
    return std::move(rerun(std::vector<ggml_tensor*>{out}, in)[0]);
}

std::vector<std::vector<float>> GraphRunner::rerun(const std::vector<ggml_tensor*>& outs, const GraphInputs& in) {
    in.upload();
    const ggml_status status =
        sched_ ? ggml_backend_sched_graph_compute(sched_, graph_) : ggml_backend_graph_compute(backend_, graph_);
    if (status == GGML_STATUS_ABORTED) throw CancelledError("cancelled");
    if (status != GGML_STATUS_SUCCESS) throw EngineError(std::string("graph computation failed on ") + ggml_backend_name(backend_));
    std::vector<std::vector<float>> results;
    for (ggml_tensor* out : outs) {
        results.emplace_back(ggml_nelements(out));
        ggml_backend_tensor_get(out, results.back().data(), 0, ggml_nbytes(out));
    }
    return results;
}

std::vector<float> GraphRunner::compute(ggml_tensor* out, const GraphInputs& in, bool keep_buffer) {
    return std::move(compute(std::vector<ggml_tensor*>{out}, in, keep_buffer)[0]);
}

std::vector<std::vector<float>> GraphRunner::compute(const std::vector<ggml_tensor*>& outs, const GraphInputs& in,
                                                     bool keep_buffer) {
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
    if (!keep_buffer) release_large_buffer();
    return results;
}

}  // namespace cbs
