// Python bindings of the Perth watermarker and detector at the model's rate (watermark/perth.h;
// engine_native.watermark resamples, the `watermark`, `watermark_bits` seams go through it).
#include <pybind11/stl.h>

#include "bindings/helpers.h"
#include "core/system_info.h"
#include "watermark/perth.h"

namespace py = pybind11;
using namespace cbs;

namespace {

// The Perth model holds no state a computation changes: calls may run at the same time.
struct PyPerth {
    std::string path;
    std::unique_ptr<Perth> impl;
};

int thread_count(int threads) {
    if (threads < 0) throw ParameterError("threads must be >= 0 (0: one per core)");
    return threads > 0 ? threads : default_thread_count();
}

const float* mono(const F32Array& samples) {
    require_1d(samples, "audio");
    return samples.data();
}

py::dict branch_dict(const PerthBranch& b) {
    py::dict d;
    d["frames"] = b.frames;
    d["attention"] = to_numpy(b.attention);
    d["mark"] = to_numpy(b.mark);
    d["mask"] = to_numpy(b.mask);
    d["attention_mean"] = b.attention_mean;
    d["mark_mean"] = b.mark_mean;
    return d;
}

}  // namespace

void bind_watermark(py::module_& m) {
    py::class_<PyPerth>(m, "PerthWatermarker",
                        "Resemble AI's Perth implicit watermarker and detector (resemble-perth), from its GGUF.")
        .def(py::init([](const std::string& path) {
                 auto p = std::make_unique<PyPerth>();
                 p->path = path;
                 py::gil_scoped_release release;
                 p->impl = std::make_unique<Perth>(path);
                 return p;
             }),
             py::arg("path"))
        .def_property_readonly("path", [](const PyPerth& p) { return p.path; })
        .def_property_readonly("sample_rate", [](const PyPerth& p) { return p.impl->hparams().sample_rate; })
        .def_property_readonly("n_fft", [](const PyPerth& p) { return p.impl->hparams().n_fft; })
        .def_property_readonly("hop", [](const PyPerth& p) { return p.impl->hparams().hop; })
        .def_property_readonly("subband", [](const PyPerth& p) { return p.impl->hparams().subband; })
        .def_property_readonly("parameters", [](const PyPerth& p) { return p.impl->parameters(); })
        .def_property_readonly("min_length", [](const PyPerth& p) { return p.impl->min_length(); },
                               "The shortest audio (samples at sample_rate) apply and decode accept.")
        .def_property_readonly("encoder_radius", [](const PyPerth& p) { return p.impl->encoder_radius(); },
                               "Frames each side a frame's watermark residual depends on.")
        .def("apply", [](const PyPerth& p, const F32Array& samples, int threads, bool clip_start, bool clip_end,
                         double loudest) {
            const float* x = mono(samples);
            const int64_t n = samples.size();
            const int t = thread_count(threads);
            PerthWindow w{clip_start, clip_end, loudest};
            py::array_t<float> y = to_numpy(released([&] { return p.impl->apply(x, n, t, &w); }));
            return py::make_tuple(y, w.loudest);
        }, py::arg("samples"), py::arg("threads") = 0, py::arg("clip_start") = true, py::arg("clip_end") = true,
           py::arg("loudest") = 0.0,
           "apply_watermark's marking of float32 samples at sample_rate: (marked audio, the loudest frame). "
           "A stretch of a longer clip says which of its ends are the clip's own and the loudest frame so far.")
        .def("decode", [](const PyPerth& p, const F32Array& samples, int threads, bool fast) {
            const float* x = mono(samples);
            const int64_t n = samples.size();
            const int t = thread_count(threads);
            const PerthDecoding d = released([&] { return p.impl->decode(x, n, t, fast); });
            py::dict out;
            out["score"] = d.score;
            out["slow"] = branch_dict(d.branches[0]);
            out["normal"] = branch_dict(d.branches[1]);
            out["fast"] = branch_dict(d.branches[2]);
            return out;
        }, py::arg("samples"), py::arg("threads") = 0, py::arg("fast") = false,
           "The detector on float32 samples at sample_rate (fast: its products on AMX where the CPU has it, "
           "~1e-4 from f32): {score: get_watermark(samples, round=False), and per branch (slow, normal, fast) "
           "its frames' attention, mark and mask with their masked means}.");
}
