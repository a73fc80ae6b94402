// Backend selection: "cpu" always; "cuda"/"vulkan"/"metal"/"gpu" when compiled in.
#pragma once

#include <memory>
#include <string>

#include "ggml-backend.h"

namespace cbs {

struct BackendDeleter {
    void operator()(ggml_backend_t b) const { ggml_backend_free(b); }
};
using BackendPtr = std::unique_ptr<ggml_backend, BackendDeleter>;

// Throws EngineError naming what is available when `name` is not.
BackendPtr make_backend(const std::string& name, int threads);

}  // namespace cbs
