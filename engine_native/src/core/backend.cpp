#include "core/backend.h"

#include <algorithm>
#include <cctype>

#include "ggml-cpu.h"
#include "core/errors.h"
#include "core/options.h"

namespace cbs {

static std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
}

BackendPtr make_backend(const std::string& name, int threads) {
    const std::string want = lower(name);
    check_option("threads", threads);
    if (want == "cpu") {
        ggml_backend_t b = ggml_backend_cpu_init();
        if (!b) throw EngineError("could not start the CPU backend");
        ggml_backend_cpu_set_n_threads(b, threads);
        return BackendPtr(b);
    }
    std::string available = "cpu";
    for (size_t i = 0; i < ggml_backend_dev_count(); ++i) {
        ggml_backend_dev_t dev = ggml_backend_dev_get(i);
        if (ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU) continue;
        const std::string reg = lower(ggml_backend_reg_name(ggml_backend_dev_backend_reg(dev)));
        available += ", " + reg;
        if (want == reg || want == "gpu") {
            ggml_backend_t b = ggml_backend_dev_init(dev, nullptr);
            if (!b) throw EngineError("could not start the " + reg + " backend");
            return BackendPtr(b);
        }
    }
    throw EngineError("backend '" + name + "' is not available in this build (available: " + available + ")");
}

}  // namespace cbs
