// Python bindings of the HiFT vocoder: the `hift_f0` and `hift_decode` parity seams,
// the excitation source and the whole inference.
#include <pybind11/stl.h>

#include "bindings/helpers.h"
#include "hift/hift.h"
#include "hift/hift_source.h"

namespace py = pybind11;
using namespace cbs;

namespace {

struct HiftPair {
    HiftPair(const ModelFile& mf, ggml_backend_t backend) : hift(mf, backend), source(mf) {}
    Hift hift;
    HiftSource source;
};
using PyHift = Component<HiftPair>;

// mel must be [in_channels, T] with T >= 1; returns T.
int64_t check_mel(const Hift& h, const F32Array& mel) {
    const int C = h.hp().in_channels;
    if (mel.ndim() != 2 || mel.shape(0) != C || mel.shape(1) < 1)
        throw EngineError("mel must have shape (" + std::to_string(C) + ", T) with T >= 1; got " + shape_of(mel));
    return mel.shape(1);
}

}  // namespace

void bind_hift(py::module_& m) {
    py::class_<HiftSourceState>(m, "HiftSourceState",
                                     "An utterance's excitation state (phases, phase sums, noise generator).")
        .def("copy", [](const HiftSourceState& s) { return HiftSourceState(s); },
             "An independent copy (to look ahead without advancing this one).");

    py::class_<PyHift>(m, "HiFT", "S3Gen's HiFT vocoder (HiFTGenerator) over a loaded ModelFile.")
        .def(py::init(&build_on_cpu<HiftPair>), py::arg("model"))  // CPU kernels: on the CPU whatever the device
        .def_property_readonly("in_channels", [](const PyHift& s) { return s->hift.hp().in_channels; })
        .def_property_readonly("samples_per_frame", [](const PyHift& s) { return s->hift.hp().samples_per_frame(); })
        .def_property_readonly("sample_rate", [](const PyHift& s) { return s->hift.hp().sample_rate; })
        .def("f0", [](PyHift& self, F32Array mel) {
            const int64_t T = check_mel(self->hift, mel);
            return to_numpy(compute(self, [&](HiftPair& h) { return h.hift.f0(mel.data(), T); }));
        }, py::arg("mel"), "f0_predictor (ConvRNNF0Predictor) on mel [80, T]: f0 [T] float32.")
        .def("decode", [](PyHift& self, F32Array mel, F32Array source) {
            const int64_t T = check_mel(self->hift, mel);
            // The m_source output is (1, 1, N); accept any shape whose leading dimensions are 1.
            for (py::ssize_t i = 0; i + 1 < source.ndim(); ++i)
                if (source.shape(i) != 1)
                    throw EngineError("source must be (N,), (1, N) or (1, 1, N)");
            if (source.ndim() < 1) throw EngineError("source must be (N,), (1, N) or (1, 1, N)");
            const int64_t N = source.shape(source.ndim() - 1);
            return to_numpy(compute(self, [&](HiftPair& h) { return h.hift.decode(mel.data(), T, source.data(), N); }));
        }, py::arg("mel"), py::arg("source"),
           "HiFTGenerator.decode(x=mel, s=source), clamp to audio_limit included: waveform [N] float32.")
        .def("excitation", [](PyHift& self, const F32Array& f0, const F32Array& phases, const F32Array& noise) {
            std::vector<float> f = to_vector(f0), ph = to_vector(phases), no = to_vector(noise);
            return to_numpy(released([&] { return self->source.excitation(f, ph, no); }));
        }, py::arg("f0"), py::arg("phases"), py::arg("noise"),
           "m_source's excitation from f0 [T] with given phases [H] and standard-normal noise [H, 480 T].")
        .def("source_state", [](PyHift& self, uint64_t seed) {
            return HiftSourceState(self->source.n_harmonics(), seed);
        }, py::arg("seed"), "A fresh excitation state for one utterance.")
        .def("excitation_continue", [](PyHift& self, F32Array f0, HiftSourceState& state) {
            std::vector<float> f = to_vector(f0);
            return to_numpy(released([&] { return self->source.excitation(f, state); }));
        }, py::arg("f0"), py::arg("state"),
           "The excitation for the next f0 frames, advancing `state` (pieces join exactly).")
        .def("inference", [](PyHift& self, F32Array mel, uint64_t seed) {
            const int64_t T = check_mel(self->hift, mel);
            return to_numpy(compute(self, [&](HiftPair& h) {
                HiftSourceState state(h.source.n_harmonics(), seed);
                std::vector<float> source = h.source.excitation(h.hift.f0(mel.data(), T), state);
                return h.hift.decode(mel.data(), T, source.data(), static_cast<int64_t>(source.size()));
            }));
        }, py::arg("mel"), py::arg("seed") = 0,
           "HiFTGenerator.inference: f0 -> seeded excitation -> decode; waveform [480 T] float32.");
}
