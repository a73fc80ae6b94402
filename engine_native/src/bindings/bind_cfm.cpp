// Python binding of S3Gen's conditional flow matching decoder (the `s3gen_mel` seam).
#include "bindings/helpers.h"
#include "s3gen/cfm_sampler.h"

namespace py = pybind11;
using namespace cbs;

void bind_cfm(py::module_& m) {
    py::class_<CfmPrefix, std::shared_ptr<CfmPrefix>>(m, "CfmPrefix", "a stream's cached CFM prefix (S3GenCfm.make_prefix)")
        .def_property_readonly("frames", &CfmPrefix::frames)
        .def_property_readonly("bytes", &CfmPrefix::bytes, "its keys, values and convolution context on the device");
    using PyS3GenCfm = Component<S3GenCfm>;
    py::class_<PyS3GenCfm>(m, "S3GenCfm", "S3Gen conditional flow matching decoder (estimator + sampler).")
        .def(py::init(&build_on_backend<S3GenCfm>), py::arg("model"))
        .def_property_readonly("n_timesteps", [](const PyS3GenCfm& s) { return s->n_timesteps(); })
        .def_property_readonly("guided", [](const PyS3GenCfm& s) { return s->guided(); },
                               "True for the standard CFM (classifier-free guidance inside every Euler step)")
        .def_property_readonly("cfg_rate", [](const PyS3GenCfm& s) { return s->cfg_rate(); },
                               "the standard CFM's inference_cfg_rate")
        .def_property("guidance_batched", [](const PyS3GenCfm& s) { return s->guidance_batched(); },
                      [](PyS3GenCfm& s, bool b) {
                          std::lock_guard<std::mutex> lock(s.mutex);
                          s->set_guidance_batched(b);
                      },
                      "guidance rows in one batch-of-two evaluation (else two evaluations; same result)")
        .def_property("replay_steps", [](const PyS3GenCfm& s) { return s->replay_steps(); },
                      [](PyS3GenCfm& s, bool on) {
                          std::lock_guard<std::mutex> lock(s.mutex);
                          s->set_replay_steps(on);
                      },
                      "a pass of 3+ steps as one step's graph computed again per step (a GPU's default: CUDA "
                      "graphs replay it; CBS_CFM_REPLAY=0 turns it off) instead of one graph; the same mel")
        .def("t_span", [](const PyS3GenCfm& self, int n_steps) {
            check_option("cfm_steps", n_steps);
            std::vector<float> ts = self->t_span(n_steps);
            return to_numpy(ts, {static_cast<py::ssize_t>(ts.size())});
        }, py::arg("n_steps"), "the Euler times [n_steps + 1] (float32, as the reference computes them)")
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
           "estimator first sees it) -> mel [n_mels, T - T_prompt]; n_steps 0: the model's default.")
        .def("make_prefix", [](PyS3GenCfm& self, const F32Array& mu, const F32Array& prompt_feat,
                               const F32Array& embedding, const F32Array& x0, int n_steps) {
            const int M = self->n_mels();
            if (mu.ndim() != 2 || mu.shape(0) != M || x0.ndim() != 2 || x0.shape(0) != M || x0.shape(1) != mu.shape(1))
                throw EngineError("mu and x0 must be [" + std::to_string(M) + ", P], got " + shape_of(mu) + " and " +
                                  shape_of(x0));
            if (prompt_feat.ndim() != 2 || prompt_feat.shape(1) != M || prompt_feat.shape(0) != mu.shape(1))
                throw EngineError("prompt_feat must be [P, " + std::to_string(M) + "] with mu's P frames, got " +
                                  shape_of(prompt_feat));
            if (n_steps != 0) check_option("cfm_steps", n_steps);
            const int P = static_cast<int>(mu.shape(1));
            std::vector<float> vmu = to_vector(mu), vpf = to_vector(prompt_feat), vemb = to_vector(embedding),
                               vx0 = to_vector(x0);
            return compute(self, [&](S3GenCfm& cfm) { return cfm.make_prefix(vmu, P, vpf, vemb, vx0, n_steps); });
        }, py::arg("mu"), py::arg("prompt_feat"), py::arg("embedding"), py::arg("x0"), py::arg("n_steps") = 0,
           "a stream's cached prefix (both rows of a guided CFM): the voice prompt's frames alone, mu and x0 [n_mels, P], "
           "prompt_feat [P, n_mels], integrated once; sample_after_prefix then computes only later frames, which "
           "attend to the prompt's cached keys and values (the prompt does not attend to them)")
        .def("sample_after_prefix", [](PyS3GenCfm& self, const CfmPrefix& prefix, const F32Array& mu, const F32Array& x0) {
            const int M = self->n_mels();
            if (mu.ndim() != 2 || mu.shape(0) != M || x0.ndim() != 2 || x0.shape(0) != M || x0.shape(1) != mu.shape(1))
                throw EngineError("mu and x0 must be [" + std::to_string(M) + ", T], got " + shape_of(mu) + " and " +
                                  shape_of(x0));
            const int T = static_cast<int>(mu.shape(1));
            std::vector<float> vmu = to_vector(mu), vx0 = to_vector(x0);
            std::vector<float> mel =
                compute(self, [&](S3GenCfm& cfm) { return cfm.sample_after_prefix(prefix, vmu, T, vx0); });
            return to_numpy(mel, {M, T});
        }, py::arg("prefix"), py::arg("mu"), py::arg("x0"),
           "mu and x0 [n_mels, T] for the frames after the prefix -> their mel [n_mels, T]")
        .def_property_readonly("prefix_max_steps", [](const PyS3GenCfm&) { return CfmEstimator::kMaxPrefixSteps; },
                               "the most Euler steps a cached stream prefix takes")
        .def("velocities", [](PyS3GenCfm& self, const F32Array& mu, const F32Array& prompt_feat,
                              const F32Array& embedding, const F32Array& x, float t, float r) {
            const int M = self->n_mels();
            if (mu.ndim() != 2 || mu.shape(0) != M || x.ndim() != 2 || x.shape(0) != M || x.shape(1) != mu.shape(1))
                throw EngineError("mu and x must be [" + std::to_string(M) + ", T], got " + shape_of(mu) + " and " +
                                  shape_of(x));
            if (prompt_feat.ndim() != 2 || prompt_feat.shape(1) != M)
                throw EngineError("prompt_feat must be [T_prompt, " + std::to_string(M) + "], got " + shape_of(prompt_feat));
            const int T = static_cast<int>(mu.shape(1));
            std::vector<float> vmu = to_vector(mu), vpf = to_vector(prompt_feat), vemb = to_vector(embedding),
                               vx = to_vector(x);
            std::vector<std::vector<float>> v =
                compute(self, [&](S3GenCfm& cfm) { return cfm.velocities(vmu, T, vpf, vemb, vx, t, r); });
            py::list out;
            for (const auto& row : v) out.append(to_numpy(row, {M, T}));
            return out;
        }, py::arg("mu"), py::arg("prompt_feat"), py::arg("embedding"), py::arg("x"), py::arg("t"), py::arg("r"),
           "one estimator evaluation at time t (r: meanflow's second time) on x [n_mels, T]: [v_cond] for meanflow, "
           "[v_cond, v_uncond] (mu, spks, cond zero) for the standard CFM, each [n_mels, T].");
}
