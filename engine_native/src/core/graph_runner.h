// Builds and runs one ggml graph at a time on a backend: its host inputs (GraphInputs) and
// the runner that allocates, uploads, computes and reads back (GraphRunner).
#pragma once

#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "ggml-alloc.h"
#include "ggml-backend.h"
#include "ggml.h"

namespace cbs {

// Host values for a graph's input tensors, uploaded once the graph is allocated.
struct GraphInputs {
    std::vector<std::pair<ggml_tensor*, std::vector<int32_t>>> ints;
    std::vector<std::pair<ggml_tensor*, std::vector<float>>> floats;
    std::vector<std::pair<ggml_tensor*, std::vector<ggml_fp16_t>>> halves;

    ggml_tensor* ids(ggml_context* ctx, std::vector<int32_t> v);
    ggml_tensor* f32(ggml_context* ctx, std::vector<float> v, int64_t ne0, int64_t ne1 = 1);
    ggml_tensor* f16_mask(ggml_context* ctx, std::vector<ggml_fp16_t> v, int64_t ne0, int64_t ne1);
    void upload() const;
};

// Builds and runs one graph at a time on a backend, reusing its allocator. On a device
// other than the CPU the graph goes through ggml_backend_sched with a CPU backend of its
// own behind the device: an operation the device lacks runs on the CPU (inputs are
// uploaded, the output read back, nothing else crosses to the host).
class GraphRunner {
public:
    explicit GraphRunner(ggml_backend_t backend, size_t max_nodes = 16384);
    ~GraphRunner();
    GraphRunner(const GraphRunner&) = delete;
    GraphRunner& operator=(const GraphRunner&) = delete;

    // A fresh (metadata-only) context and graph for the next computation.
    ggml_context* begin();
    ggml_cgraph* graph() const { return graph_; }
    // Allocates, uploads `in`, computes and reads `out` back as float32. `keep_buffer`: the
    // CPU's compute buffer is kept for rerun() whatever its size (release_large_buffer() after).
    std::vector<float> compute(ggml_tensor* out, const GraphInputs& in, bool keep_buffer = false);
    // The same for several outputs of one graph, in the order given.
    std::vector<std::vector<float>> compute(const std::vector<ggml_tensor*>& outs, const GraphInputs& in,
                                            bool keep_buffer = false);
    // Allocates, uploads `in` and computes graph() (its outputs stay on the device).
    void run(const GraphInputs& in);
    // A device: sizes the compute buffers for graph() with `out` (built, not computed), so
    // that later graphs up to that size allocate nothing. Returns the device buffer's
    // bytes (0 on the CPU, whose large buffers are freed after use anyway).
    size_t reserve(ggml_tensor* out);
    // Computes the last graph again as it was allocated (no rebuild, no re-allocation:
    // a device replays it as it stands), with new values for its inputs `in`, and reads
    // `out` back. Only while generation() is unchanged since that graph was computed.
    std::vector<float> rerun(ggml_tensor* out, const GraphInputs& in);
    std::vector<std::vector<float>> rerun(const std::vector<ggml_tensor*>& outs, const GraphInputs& in);
    // Counts begin() calls: a graph kept for rerun() is stale once this has moved on.
    uint64_t generation() const { return generation_; }
    ggml_backend_t backend() const { return backend_; }

    // On the CPU: frees a compute buffer above kKeepComputeBytes (graph_runner.cpp) after use.
    void release_large_buffer();

private:
    // The scheduler told to run on the CPU the ops the device accepts but aborts on.
    void assign_lacking_ops();
    // CBS_PROFILE_OPS=1: the graph computed, then computed again node by node, timed by kind.
    ggml_status profiled_compute(const GraphInputs& in);

    ggml_backend_t backend_;
    size_t max_nodes_;
    ggml_gallocr_t alloc_ = nullptr;        // the CPU: one backend, no scheduler
    ggml_backend_t cpu_ = nullptr;          // another device: its CPU fallback ...
    ggml_backend_sched_t sched_ = nullptr;  // ... and the scheduler over both
    std::vector<uint8_t> meta_;
    ggml_context* ctx_ = nullptr;
    ggml_cgraph* graph_ = nullptr;
    uint64_t generation_ = 0;
    std::chrono::steady_clock::time_point begun_;  // begin()'s time (CBS_PROFILE_GRAPH)
};

}  // namespace cbs
