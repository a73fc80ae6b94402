// Python binding of CAMPPlus, S3Gen's x-vector speaker encoder (voice cloning).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "cloning/campplus.h"
#include "bindings/helpers.h"

namespace py = pybind11;

struct PyCampPlus {
    py::object model_ref;  // keeps the weights alive
    std::unique_ptr<cbs::CampPlus> net;
};

void bind_campplus(py::module_& m) {
    py::class_<PyCampPlus>(m, "CampPlus", "S3Gen's CAMPPlus x-vector speaker encoder (the voice's embedding).")
        .def(py::init([](py::object model) {
                 auto p = std::make_unique<PyCampPlus>();
                 auto* pm = model.cast<cbs::PyModel*>();
                 p->model_ref = model;
                 p->net = std::make_unique<cbs::CampPlus>(*pm->file, pm->backend.get());
                 return p;
             }), py::arg("model"))
        .def_property_readonly("embed_dim", [](const PyCampPlus& self) { return self.net->embed_dim(); })
        .def_property_readonly("min_samples", [](const PyCampPlus& self) { return self.net->min_samples(); },
                               "The shortest 16 kHz input the network accepts.")
        .def("embed", [](PyCampPlus& self, std::vector<float> wav) {
            std::vector<float> e;
            {
                py::gil_scoped_release release;
                e = self.net->embed(wav);
            }
            py::array_t<float> out(static_cast<py::ssize_t>(e.size()));
            std::memcpy(out.mutable_data(), e.data(), e.size() * sizeof(float));
            return out;
        }, py::arg("wav16k"), "x-vector [embed_dim] of 16 kHz audio (fbank, mean subtraction, CAMPPlus).");
}
