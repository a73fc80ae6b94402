// Python binding of CAMPPlus, S3Gen's x-vector speaker encoder (voice cloning).
#include "bindings/helpers.h"
#include "cloning/campplus.h"

namespace py = pybind11;
using namespace cbs;

void bind_campplus(py::module_& m) {
    using PyCampPlus = Component<CampPlus>;
    py::class_<PyCampPlus>(m, "CampPlus", "S3Gen's CAMPPlus x-vector speaker encoder (the voice's embedding).")
        .def(py::init(&build_on_backend<CampPlus>), py::arg("model"))
        .def_property_readonly("embed_dim", [](const PyCampPlus& self) { return self->embed_dim(); })
        .def_property_readonly("min_samples", [](const PyCampPlus& self) { return self->min_samples(); },
                               "The shortest 16 kHz input the network accepts.")
        .def("embed", [](PyCampPlus& self, const F32Array& wav) {
            require_1d(wav, "audio");
            std::vector<float> w = to_vector(wav);
            return to_numpy(compute(self, [&](CampPlus& net) { return net.embed(w); }));
        }, py::arg("wav16k"), "x-vector [embed_dim] of 16 kHz audio (fbank, mean subtraction, CAMPPlus).");
}
