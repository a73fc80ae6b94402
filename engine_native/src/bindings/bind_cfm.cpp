// Python binding of S3Gen's conditional flow matching decoder (the `s3gen_mel` seam).
#include "bindings/helpers.h"
#include "s3gen/s3gen_cfm.h"

namespace py = pybind11;
using namespace cbs;

void bind_cfm(py::module_& m) {
    using PyS3GenCfm = Component<S3GenCfm>;
    py::class_<PyS3GenCfm>(m, "S3GenCfm", "S3Gen conditional flow matching decoder (estimator + sampler).")
        .def(py::init(&build_on_backend<S3GenCfm>), py::arg("model"))
        .def_property_readonly("n_timesteps", [](const PyS3GenCfm& s) { return s->n_timesteps(); })
        .def("sample", [](PyS3GenCfm& self, const F32Array& mu, const F32Array& prompt_feat, const F32Array& embedding,
                          const F32Array& x0, int n_steps) {
            const int M = self->n_mels();
            if (mu.ndim() != 2 || mu.shape(0) != M)
                throw EngineError("mu must be [" + std::to_string(M) + ", T], got " + shape_of(mu));
            if (x0.ndim() != 2 || x0.shape(0) != mu.shape(0) || x0.shape(1) != mu.shape(1))
                throw EngineError("x0 must have mu's shape [" + std::to_string(M) + ", " + std::to_string(mu.shape(1)) +
                                  "], got " + shape_of(x0));
            if (prompt_feat.ndim() != 2 || prompt_feat.shape(1) != M)
                throw EngineError("prompt_feat must be [T_prompt, " + std::to_string(M) + "], got " + shape_of(prompt_feat));
            if (n_steps != 0) check_option("cfm_steps", n_steps);
            const int T = static_cast<int>(mu.shape(1));
            std::vector<float> vmu = to_vector(mu), vpf = to_vector(prompt_feat), vemb = to_vector(embedding),
                               vx0 = to_vector(x0);
            std::vector<float> mel =
                compute(self, [&](S3GenCfm& cfm) { return cfm.sample(vmu, T, vpf, vemb, vx0, n_steps); });
            return to_numpy(mel, {M, static_cast<py::ssize_t>(mel.size()) / M});
        }, py::arg("mu"), py::arg("prompt_feat"), py::arg("embedding"), py::arg("x0"), py::arg("n_steps") = 0,
           "mu [n_mels, T], prompt_feat [T_prompt, n_mels], embedding [192], x0 [n_mels, T] (initial noise as the "
           "estimator first sees it) -> mel [n_mels, T - T_prompt]; n_steps 0: the model's default.");
}
