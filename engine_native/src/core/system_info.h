// What this build of the engine can do: ggml version, CPU features, backends.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"

namespace cbs {

struct SystemInfo {
    std::string ggml_version;
    std::vector<std::string> cpu_features;  // features the CPU backend was built for and found
    std::vector<std::string> backends;      // registered ggml backends ("CPU", "CUDA", ...)
    std::vector<DeviceInfo> devices;        // the fastest first
    std::string cpu_variant;                // the CPU module loaded ("haswell", ...)
    std::string backend_dir;                // where the backend modules were loaded from
    int default_threads = 1;
};

SystemInfo system_info();

// Threads used when the caller does not say: every hardware thread, at most 16
// (beyond that ggml's CPU matmuls stop scaling for batch-1 decoding).
int default_thread_count();

// One core's L2 cache in bytes (512 KB where the system does not say): kernels size the
// blocks they keep in cache from it.
long l2_cache_bytes();

}  // namespace cbs
