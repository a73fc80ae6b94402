// Python bindings of the Perth watermarker and detector (watermark/perth.h) and of the two
// resamplers under them (the `watermark`, `watermark_bits` seams; engine_native.watermark).
#include <pybind11/stl.h>

#include "bindings/helpers.h"
#include "core/system_info.h"
#include "watermark/perth.h"
#include "watermark/resampler.h"

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
        .def("min_samples", [](const PyPerth& p, int rate) { return p.impl->min_samples(rate); }, py::arg("sample_rate"),
             "The shortest audio (samples at sample_rate) apply and decode accept.")
        .def("apply", [](const PyPerth& p, const F32Array& samples, int rate, int threads) {
            const float* x = mono(samples);
            const int64_t n = samples.size();
            const int t = thread_count(threads);
            return to_numpy(released([&] { return p.impl->apply(x, n, rate, t); }));
        }, py::arg("samples"), py::arg("sample_rate"), py::arg("threads") = 0,
           "PerthImplicitWatermarker.apply_watermark(samples, sample_rate): the marked audio (float32).")
        .def("decode", [](const PyPerth& p, const F32Array& samples, int rate, int threads, bool fast) {
            const float* x = mono(samples);
            const int64_t n = samples.size();
            const int t = thread_count(threads);
            const PerthDecoding d = released([&] { return p.impl->decode(x, n, rate, t, fast); });
            py::dict out;
            out["score"] = d.score;
            out["slow"] = branch_dict(d.branches[0]);
            out["normal"] = branch_dict(d.branches[1]);
            out["fast"] = branch_dict(d.branches[2]);
            return out;
        }, py::arg("samples"), py::arg("sample_rate"), py::arg("threads") = 0, py::arg("fast") = false,
           "The detector (fast: its products on AMX where the CPU has it, ~1e-4 from f32): {score: get_watermark(samples, sample_rate, round=False), and per branch (slow, "
           "normal, fast) its frames' attention, mark and mask with their masked means}.");

    m.def("resample_like_librosa", [](const F32Array& samples, int in_rate, int out_rate, const std::string& method,
                                      int threads) {
        const float* x = mono(samples);
        const int64_t n = samples.size();
        const int t = thread_count(threads);
        return to_numpy(released([&] {
            if (method == "soxr_hq") return RationalResampler::soxr_hq(in_rate, out_rate).process(x, n, t);
            if (method == "polyphase") return RationalResampler::polyphase(in_rate, out_rate).process(x, n, t);
            throw ParameterError("method must be 'soxr_hq' or 'polyphase', got '" + method + "'");
        }));
    }, py::arg("samples"), py::arg("in_rate"), py::arg("out_rate"), py::arg("method") = "soxr_hq",
       py::arg("threads") = 0,
       "librosa.resample(samples, orig_sr=in_rate, target_sr=out_rate, res_type=method) for float32 "
       "samples, as the watermarker runs it (soxr_hq: single-stage ratios only).");
}
