// Devices through ggml's backend registry. The backends are modules (GGML_BACKEND_DL)
// beside the ggml library: load_backends() loads them once, from that folder, picking
// the CPU variant the running CPU supports best. Environment:
//   CBS_GPU=auto|none|cuda|vulkan   which GPU modules to load (auto: every one present)
//   CBS_CPU_VARIANT=NAME            that CPU variant (x64, sse42, haswell, ...) instead
//                                   of the best; an error names those present when it
//                                   is missing or the CPU lacks its instructions
//   CBS_THREAD_POLL=0..100          how long a CPU thread spins before it sleeps, at a
//                                   barrier or between graphs, in units of 10 us
//                                   (default 0: about 6 us of spinning at a barrier)
// A device is named "<backend>:<index>" in lower case ("cpu", "cuda:0", "vulkan:0").
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ggml-backend.h"

namespace cbs {

// Frees a backend made by make_backend() and the CPU thread pool it owns.
void free_backend(ggml_backend_t backend);

struct BackendDeleter {
    void operator()(ggml_backend_t b) const { free_backend(b); }
};
using BackendPtr = std::unique_ptr<ggml_backend, BackendDeleter>;

// Loads the backend modules (once; every later call is a no-op). Throws EngineError when
// no CPU backend could be loaded (the modules are missing beside the ggml library).
void load_backends();

struct DeviceInfo {
    std::string id;           // "cpu", "cuda:0", "vulkan:1"
    std::string name;         // ggml's device name ("CPU", "CUDA0", "Vulkan0")
    std::string backend;      // the registry's name ("CPU", "CUDA", "Vulkan")
    std::string description;  // the hardware ("NVIDIA H200", the CPU model)
    std::string type;         // "cpu", "gpu", "igpu", "accel"
    size_t memory_free = 0, memory_total = 0;  // bytes
};

// Every device present, the fastest first (auto's choice is the first).
std::vector<DeviceInfo> list_devices();
// The CPU module loaded ("haswell", "x64", ...; "" for a CPU backend of one variant) and
// the folder the modules were loaded from.
std::string cpu_variant();
std::string backend_dir();

// A backend on `device`: "auto" (the first of list_devices()), "cpu", "gpu" (the first
// GPU), "<backend>" (its first device) or "<backend>:<index>". DeviceError naming the
// devices present for one that is not; DeviceError when it fails to start.
BackendPtr make_backend(const std::string& device, int threads);
// The id (as list_devices() names it) of a backend's device.
std::string device_id(ggml_backend_t backend);

bool backend_is_cpu(ggml_backend_t backend);
// CPU backends only (no-op on others): the thread count and the abort callback, through
// the CPU module's registry (the module is not linked). Unless the CPU module is built
// with OpenMP, set_threads gives the backend a persistent thread pool of that many
// threads (without one, ggml starts and joins its threads for every graph).
void set_threads(ggml_backend_t backend, int threads);
void set_abort_callback(ggml_backend_t backend, ggml_abort_callback callback, void* data);

// While one lives, ggml's log lines from this thread are kept in text() instead of going to
// stderr: a file ggml cannot read fails with one error of ours that says why, not a stray
// ggml line before it.
class GgmlLogCapture {
public:
    GgmlLogCapture();
    ~GgmlLogCapture();
    GgmlLogCapture(const GgmlLogCapture&) = delete;
    GgmlLogCapture& operator=(const GgmlLogCapture&) = delete;
    // What was logged, its lines joined by "; " without the function names ggml puts first.
    std::string text() const;

private:
    std::string text_;
    std::string* previous_;
};

}  // namespace cbs
