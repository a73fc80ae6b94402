// Python bindings of the audio feature extractors (voice-cloning seams).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "audio_features.h"
#include "py_model.h"

namespace py = pybind11;

struct PyMel24k {
    py::object model_ref;  // keeps the weights alive
    std::unique_ptr<cbs::Mel24k> mel;
};

void bind_features(py::module_& m) {
    py::class_<PyMel24k>(m, "Mel24k", "S3Gen's 24 kHz 80-bin log-mel (prompt_feat).")
        .def(py::init([](py::object model) {
                 auto p = std::make_unique<PyMel24k>();
                 auto* pm = model.cast<cbs::PyModel*>();
                 p->model_ref = model;
                 p->mel = std::make_unique<cbs::Mel24k>(*pm->file);
                 return p;
             }), py::arg("model"))
        .def("compute", [](PyMel24k& self, std::vector<float> wav) {
            std::vector<float> out;
            {
                py::gil_scoped_release release;
                out = self.mel->compute(wav);
            }
            const py::ssize_t n_mels = self.mel->n_mels(), frames = static_cast<py::ssize_t>(out.size()) / n_mels;
            py::array_t<float> arr({frames, n_mels});
            std::memcpy(arr.mutable_data(), out.data(), out.size() * sizeof(float));
            return arr;
        }, py::arg("wav"), "log-mel [frames, n_mels] of 24 kHz audio.");
}
