#include "core/system_info.h"

#include <algorithm>
#include <cstring>
#include <thread>

#include <unistd.h>

#include "ggml-backend.h"
#include "ggml.h"

namespace cbs {

int default_thread_count() {
    unsigned n = std::thread::hardware_concurrency();
    if (n == 0) n = 1;
    return static_cast<int>(std::min(n, 16u));
}

long l2_cache_bytes() {
#ifdef _SC_LEVEL2_CACHE_SIZE
    static const long bytes = [] {
        const long n = sysconf(_SC_LEVEL2_CACHE_SIZE);
        return n > 0 ? n : 512L * 1024;
    }();
    return bytes;
#else
    return 512L * 1024;
#endif
}

// A backend registry may expose "ggml_backend_get_features": a null-terminated
// list of (name, value) pairs. The CPU backend lists the ISA extensions in use.
static std::vector<std::string> backend_features(ggml_backend_reg_t reg) {
    std::vector<std::string> out;
    auto get = reinterpret_cast<ggml_backend_get_features_t>(
        ggml_backend_reg_get_proc_address(reg, "ggml_backend_get_features"));
    if (!get) return out;
    for (const ggml_backend_feature* f = get(reg); f && f->name; ++f) {
        // Boolean features report "1"; others (e.g. a CUDA arch list) carry their value.
        if (std::strcmp(f->value, "1") == 0) {
            out.emplace_back(f->name);
        } else if (f->value[0] != '\0' && std::strcmp(f->value, "0") != 0) {
            out.emplace_back(std::string(f->name) + "=" + f->value);
        }
    }
    return out;
}

SystemInfo system_info() {
    SystemInfo info;
    info.ggml_version = ggml_version();
    info.devices = list_devices();  // loads the backend modules first
    info.cpu_variant = cpu_variant();
    info.backend_dir = backend_dir();
    for (size_t i = 0; i < ggml_backend_reg_count(); ++i) {
        ggml_backend_reg_t reg = ggml_backend_reg_get(i);
        info.backends.emplace_back(ggml_backend_reg_name(reg));
        if (std::strcmp(ggml_backend_reg_name(reg), "CPU") == 0) {
            info.cpu_features = backend_features(reg);
        }
    }
    info.default_threads = default_thread_count();
    return info;
}

}  // namespace cbs
