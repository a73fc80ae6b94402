// Python bindings of S3Gen's CFM (the s3gen_mel parity seam).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "bindings/helpers.h"
#include "s3gen/s3gen_cfm.h"

namespace py = pybind11;

namespace {

struct PyS3GenCfm {
    py::object model_ref;  // keeps the weights alive
    std::unique_ptr<cbs::S3GenCfm> cfm;
};

using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;

std::vector<float> to_vec(const F32Array& a) { return std::vector<float>(a.data(), a.data() + a.size()); }

}  // namespace

void bind_cfm(py::module_& m) {
    py::class_<PyS3GenCfm>(m, "S3GenCfm", "S3Gen conditional flow matching decoder (estimator + sampler).")
        .def(py::init([](py::object model) {
                 auto p = std::make_unique<PyS3GenCfm>();
                 auto* pm = model.cast<cbs::PyModel*>();
                 p->model_ref = model;
                 p->cfm = std::make_unique<cbs::S3GenCfm>(*pm->file, pm->backend.get());
                 return p;
             }), py::arg("model"))
        .def_property_readonly("n_timesteps", [](const PyS3GenCfm& s) { return s.cfm->n_timesteps(); })
        .def("sample", [](PyS3GenCfm& self, F32Array mu, F32Array prompt_feat, F32Array embedding, F32Array x0, int n_steps) {
            const int M = self.cfm->n_mels();
            if (mu.ndim() != 2 || mu.shape(0) != M) throw cbs::EngineError("mu must be [" + std::to_string(M) + ", T]");
            if (x0.ndim() != 2 || x0.shape(0) != mu.shape(0) || x0.shape(1) != mu.shape(1))
                throw cbs::EngineError("x0 must have mu's shape [" + std::to_string(M) + ", " + std::to_string(mu.shape(1)) +
                                       "], got [" + (x0.ndim() >= 1 ? std::to_string(x0.shape(0)) : std::string("")) +
                                       (x0.ndim() >= 2 ? ", " + std::to_string(x0.shape(1)) : std::string("")) +
                                       (x0.ndim() > 2 ? ", ..." : "") + "]");
            if (prompt_feat.ndim() != 2 || prompt_feat.shape(1) != M)
                throw cbs::EngineError("prompt_feat must be [T_prompt, " + std::to_string(M) + "]");
            const int T = static_cast<int>(mu.shape(1));
            std::vector<float> vmu = to_vec(mu), vpf = to_vec(prompt_feat), vemb = to_vec(embedding), vx0 = to_vec(x0);
            std::vector<float> mel;
            {
                py::gil_scoped_release release;
                mel = self.cfm->sample(vmu, T, vpf, vemb, vx0, n_steps);
            }
            const py::ssize_t frames = static_cast<py::ssize_t>(mel.size()) / M;
            py::array_t<float> out({static_cast<py::ssize_t>(M), frames});
            std::memcpy(out.mutable_data(), mel.data(), mel.size() * sizeof(float));
            return out;
        }, py::arg("mu"), py::arg("prompt_feat"), py::arg("embedding"), py::arg("x0"), py::arg("n_steps") = 0,
           "mu [n_mels, T], prompt_feat [T_prompt, n_mels], embedding [192], x0 [n_mels, T] (initial noise as the "
           "estimator first sees it) -> mel [n_mels, T - T_prompt].");
}
