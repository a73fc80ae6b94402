// The Python-side handle of a loaded model: the backend and the file whose weights it holds.
#pragma once

#include <memory>

#include "core/backend.h"
#include "core/model_file.h"

namespace cbs {

struct PyModel {
    BackendPtr backend;
    std::unique_ptr<ModelFile> file;
};

}  // namespace cbs
