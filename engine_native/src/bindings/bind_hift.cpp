// Python bindings of the HiFT vocoder: the `hift_f0` and `hift_decode` parity seams.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <mutex>

#include "hift/hift.h"
#include "hift/hift_source.h"
#include "bindings/helpers.h"

namespace py = pybind11;
using cbs::EngineError;

namespace {

using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;

struct PyHift {
    py::object model_ref;  // keeps the weights alive
    cbs::PyModel* model;
    std::unique_ptr<cbs::Hift> hift;
    std::unique_ptr<cbs::HiftSource> source;
    std::mutex mutex;  // one graph allocator: one call at a time (the GIL is released)
};

// mel must be [in_channels, T] with T >= 1; returns T.
int64_t check_mel(const cbs::Hift& h, const F32Array& mel) {
    const int C = h.hp().in_channels;
    if (mel.ndim() != 2 || mel.shape(0) != C || mel.shape(1) < 1) {
        std::string shape = "(";
        for (py::ssize_t i = 0; i < mel.ndim(); ++i) shape += (i ? ", " : "") + std::to_string(mel.shape(i));
        throw EngineError("mel must have shape (" + std::to_string(C) + ", T) with T >= 1; got " + shape +
                          (mel.ndim() == 1 ? ",)" : ")"));
    }
    return mel.shape(1);
}

py::array_t<float> to_numpy(const std::vector<float>& v) {
    py::array_t<float> out(static_cast<py::ssize_t>(v.size()));
    std::memcpy(out.mutable_data(), v.data(), v.size() * sizeof(float));
    return out;
}

}  // namespace

void bind_hift(py::module_& m) {
    py::class_<cbs::HiftSourceState>(m, "HiftSourceState",
                                     "An utterance's excitation state (phases, phase sums, noise generator).")
        .def("copy", [](const cbs::HiftSourceState& s) { return cbs::HiftSourceState(s); },
             "An independent copy (to look ahead without advancing this one).");

    py::class_<PyHift>(m, "HiFT", "S3Gen's HiFT vocoder (HiFTGenerator) over a loaded ModelFile.")
        .def(py::init([](py::object model) {
                 auto p = std::make_unique<PyHift>();
                 p->model_ref = model;
                 p->model = model.cast<cbs::PyModel*>();
                 p->hift = std::make_unique<cbs::Hift>(*p->model->file, p->model->backend.get());
                 p->source = std::make_unique<cbs::HiftSource>(*p->model->file);
                 return p;
             }), py::arg("model"))
        .def_property_readonly("in_channels", [](const PyHift& s) { return s.hift->hp().in_channels; })
        .def_property_readonly("samples_per_frame", [](const PyHift& s) { return s.hift->hp().samples_per_frame(); })
        .def_property_readonly("sample_rate", [](const PyHift& s) { return s.hift->hp().sample_rate; })
        .def("f0", [](PyHift& self, F32Array mel) {
            const int64_t T = check_mel(*self.hift, mel);
            std::vector<float> out;
            {
                py::gil_scoped_release release;
                std::lock_guard<std::mutex> lock(self.mutex);
                out = self.hift->f0(mel.data(), T);
            }
            return to_numpy(out);
        }, py::arg("mel"), "f0_predictor (ConvRNNF0Predictor) on mel [80, T]: f0 [T] float32.")
        .def("decode", [](PyHift& self, F32Array mel, F32Array source) {
            const int64_t T = check_mel(*self.hift, mel);
            // The m_source output is (1, 1, N); accept any shape whose leading dimensions are 1.
            for (py::ssize_t i = 0; i + 1 < source.ndim(); ++i)
                if (source.shape(i) != 1)
                    throw EngineError("source must be (N,), (1, N) or (1, 1, N)");
            if (source.ndim() < 1) throw EngineError("source must be (N,), (1, N) or (1, 1, N)");
            const int64_t N = source.shape(source.ndim() - 1);
            std::vector<float> out;
            {
                py::gil_scoped_release release;
                std::lock_guard<std::mutex> lock(self.mutex);
                out = self.hift->decode(mel.data(), T, source.data(), N);
            }
            return to_numpy(out);
        }, py::arg("mel"), py::arg("source"),
           "HiFTGenerator.decode(x=mel, s=source), clamp to audio_limit included: waveform [N] float32.")
        .def("excitation", [](PyHift& self, std::vector<float> f0, std::vector<float> phases, std::vector<float> noise) {
            return to_numpy(self.source->excitation(f0, phases, noise));
        }, py::arg("f0"), py::arg("phases"), py::arg("noise"),
           "m_source's excitation from f0 [T] with given phases [H] and standard-normal noise [H, 480 T].")
        .def("source_state", [](PyHift& self, uint64_t seed) {
            return cbs::HiftSourceState(self.source->n_harmonics(), seed);
        }, py::arg("seed"), "A fresh excitation state for one utterance.")
        .def("excitation_continue", [](PyHift& self, F32Array f0, cbs::HiftSourceState& state) {
            std::vector<float> f(f0.data(), f0.data() + f0.size());
            std::vector<float> out;
            {
                py::gil_scoped_release release;
                out = self.source->excitation(f, state);
            }
            return to_numpy(out);
        }, py::arg("f0"), py::arg("state"),
           "The excitation for the next f0 frames, advancing `state` (pieces join exactly).")
        .def("inference", [](PyHift& self, F32Array mel, uint64_t seed) {
            const int64_t T = check_mel(*self.hift, mel);
            std::vector<float> wav;
            {
                py::gil_scoped_release release;
                std::lock_guard<std::mutex> lock(self.mutex);
                cbs::HiftSourceState state(self.source->n_harmonics(), seed);
                std::vector<float> source = self.source->excitation(self.hift->f0(mel.data(), T), state);
                wav = self.hift->decode(mel.data(), T, source.data(), static_cast<int64_t>(source.size()));
            }
            return to_numpy(wav);
        }, py::arg("mel"), py::arg("seed") = 0,
           "HiFTGenerator.inference: f0 -> seeded excitation -> decode; waveform [480 T] float32.");
}
