// What this build of the engine can do: ggml version, CPU features, backends.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace cbs {

struct SystemInfo {
    std::string ggml_version;
    std::vector<std::string> cpu_features;  // features the CPU backend was built for and found
    std::vector<std::string> backends;      // registered ggml backends ("CPU", "CUDA", ...)
    std::vector<std::pair<std::string, std::string>> devices;  // (name, description)
    int default_threads = 1;
};

SystemInfo system_info();

// Threads used when the caller does not say: every hardware thread, at most 16
// (beyond that ggml's CPU matmuls stop scaling for batch-1 decoding).
int default_thread_count();

}  // namespace cbs
