// Python bindings of S3Gen's stages (parity seams).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "bindings/helpers.h"
#include "s3gen/s3gen_encoder.h"

namespace py = pybind11;

struct PyS3GenEncoder {
    py::object model_ref;  // keeps the weights alive
    std::unique_ptr<cbs::S3GenEncoder> enc;
};

void bind_s3gen(py::module_& m) {
    py::class_<PyS3GenEncoder>(m, "S3GenEncoder", "S3Gen token encoder + projection (mu for the CFM).")
        .def(py::init([](py::object model) {
                 auto p = std::make_unique<PyS3GenEncoder>();
                 auto* pm = model.cast<cbs::PyModel*>();
                 p->model_ref = model;
                 p->enc = std::make_unique<cbs::S3GenEncoder>(*pm->file, pm->backend.get());
                 return p;
             }), py::arg("model"))
        .def("encode", [](PyS3GenEncoder& self, std::vector<int32_t> tokens) {
            std::vector<float> mu;
            {
                py::gil_scoped_release release;
                mu = self.enc->encode(tokens);
            }
            const py::ssize_t n_mels = self.enc->n_mels(), frames = static_cast<py::ssize_t>(mu.size()) / n_mels;
            py::array_t<float> out({n_mels, frames});
            std::memcpy(out.mutable_data(), mu.data(), mu.size() * sizeof(float));
            return out;
        }, py::arg("tokens"), "mu [n_mels, 2 x len(tokens)] for prompt + speech tokens.");
}
