// Python bindings of the HiFT vocoder: the `hift_f0` and `hift_decode` parity seams,
// the excitation source and the whole inference.
#include <pybind11/stl.h>

#include "bindings/helpers.h"
#include "hift/hift.h"
#include "hift/hift_ggml.h"
#include "hift/hift_source.h"

namespace py = pybind11;
using namespace cbs;

namespace {

// HiFT on the model's device: the CPU kernels (hift.h) on the CPU, standard ggml
// operations (hift_ggml.h) on a GPU. A device that runs out of memory mid-synthesis
// hands this and every later call to the CPU kernels, saying so in `note`.
struct HiftPair {
    HiftPair(const ModelFile& mf, ggml_backend_t backend, ggml_backend_t cpu_backend, bool ggml_ops)
        : file(mf), cpu_backend(cpu_backend), source(mf) {
        if (backend_is_cpu(backend) && !ggml_ops) cpu = std::make_unique<Hift>(mf, backend);
        else {
            dev = std::make_unique<HiftGgml>(mf, backend);
            dev_backend = backend;
            device = ggml_backend_name(backend);
        }
    }
    const HiftHparams& hp() const { return cpu ? cpu->hp() : dev->hp(); }
    std::vector<float> f0(const float* mel, int64_t T) {
        return run([&] { return dev->f0(mel, T); }, [&] { return cpu->f0(mel, T); });
    }
    std::vector<float> decode(const float* mel, int64_t T, const float* src, int64_t n) {
        return run([&] { return dev->decode(mel, T, src, n); }, [&] { return cpu->decode(mel, T, src, n); });
    }

    const ModelFile& file;
    ggml_backend_t cpu_backend;
    std::unique_ptr<Hift> cpu;
    std::unique_ptr<HiftGgml> dev;
    ggml_backend_t dev_backend = nullptr;
    HiftSource source;
    std::string device = "CPU", note;
    bool warn = false;  // a note the caller has not reported yet

private:
    template <class D, class C>
    std::vector<float> run(D&& on_device, C&& on_cpu) {
        if (dev) {
            try {
                return on_device();
            } catch (const EngineError& e) {
                const std::string what = e.what();
                if (what.find("memory") == std::string::npos || backend_is_cpu(dev_backend)) throw;
                note = "HiFT: " + device + " ran out of memory (" + what + "); HiFT runs on the CPU from now on";
                warn = true;
                dev.reset();
                cpu = std::make_unique<Hift>(file, cpu_backend);
                device = "CPU";
            }
        }
        return on_cpu();
    }
};
using PyHift = Component<HiftPair>;

// A note of a device fallback made during the last call, as a RuntimeWarning.
void report(PyHift& self) {
    if (!self->warn) return;
    self->warn = false;
    if (PyErr_WarnEx(PyExc_RuntimeWarning, ("chatterbox-studio: " + self->note).c_str(), 1) != 0)
        throw py::error_already_set();
}

// mel must be [in_channels, T] with T >= 1; returns T.
int64_t check_mel(const HiftPair& h, const F32Array& mel) {
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
        .def(py::init([](const py::object& model, bool on_device, bool ggml_ops) {
                 return build<HiftPair>(model, [&](PyModel& m) {
                     ggml_backend_t cpu = m.cpu ? m.cpu.get() : m.backend.get();
                     return std::make_unique<HiftPair>(*m.file, on_device ? m.backend.get() : cpu, cpu, ggml_ops);
                 });
             }),
             py::arg("model"), py::arg("on_device") = true, py::arg("ggml_ops") = false,
             "On the model's device (a GPU: standard ggml operations; the CPU: its own kernels); "
             "on_device=False: the CPU whatever the device; ggml_ops=True: the GPU's graph of "
             "standard ggml operations on the CPU too (to test it there).")
        .def_property_readonly("device", [](const PyHift& s) { return s->device; },
                               "The backend HiFT runs on (\"CPU\" or the GPU's name).")
        .def_property_readonly("note", [](const PyHift& s) { return s->note; },
                               "Why HiFT left its device (empty while it has not).")
        .def_property_readonly("in_channels", [](const PyHift& s) { return s->hp().in_channels; })
        .def_property_readonly("samples_per_frame", [](const PyHift& s) { return s->hp().samples_per_frame(); })
        .def_property_readonly("sample_rate", [](const PyHift& s) { return s->hp().sample_rate; })
        .def("f0", [](PyHift& self, F32Array mel) {
            const int64_t T = check_mel(*self.impl, mel);
            auto out = to_numpy(compute(self, [&](HiftPair& h) { return h.f0(mel.data(), T); }));
            report(self);
            return out;
        }, py::arg("mel"), "f0_predictor (ConvRNNF0Predictor) on mel [80, T]: f0 [T] float32.")
        .def("decode", [](PyHift& self, F32Array mel, F32Array source) {
            const int64_t T = check_mel(*self.impl, mel);
            // The m_source output is (1, 1, N); accept any shape whose leading dimensions are 1.
            for (py::ssize_t i = 0; i + 1 < source.ndim(); ++i)
                if (source.shape(i) != 1)
                    throw EngineError("source must be (N,), (1, N) or (1, 1, N)");
            if (source.ndim() < 1) throw EngineError("source must be (N,), (1, N) or (1, 1, N)");
            const int64_t N = source.shape(source.ndim() - 1);
            auto out = to_numpy(compute(self, [&](HiftPair& h) { return h.decode(mel.data(), T, source.data(), N); }));
            report(self);
            return out;
        }, py::arg("mel"), py::arg("source"),
           "HiFTGenerator.decode(x=mel, s=source), clamp to audio_limit included: waveform [N] float32.")
        .def("excitation", [](PyHift& self, const F32Array& f0, const F32Array& phases, const F32Array& noise) {
            std::vector<float> f = to_vector(f0), ph = to_vector(phases), no = to_vector(noise);
            return to_numpy(released([&] { return self->source.excitation(f, ph, no); }));
        }, py::arg("f0"), py::arg("phases"), py::arg("noise"),
           "m_source's excitation from f0 [T] with given phases [H] and standard-normal noise [H, 480 T].")
        .def("source_state", [](PyHift& self, uint64_t seed) {
            return self->source.state(seed);
        }, py::arg("seed"), "A fresh excitation state for one utterance (its noise is drawn ahead on a thread).")
        .def("source_expect", [](PyHift& self, const HiftSourceState& state, int64_t frames) {
            self->source.expect(state, frames);
        }, py::arg("state"), py::arg("frames"),
           "Have the noise of the next `frames` mel frames of `state` drawn ahead (without waiting).")
        .def("excitation_continue", [](PyHift& self, F32Array f0, HiftSourceState& state) {
            std::vector<float> f = to_vector(f0);
            return to_numpy(released([&] { return self->source.excitation(f, state); }));
        }, py::arg("f0"), py::arg("state"),
           "The excitation for the next f0 frames, advancing `state` (pieces join exactly).")
        .def("inference", [](PyHift& self, F32Array mel, uint64_t seed) {
            const int64_t T = check_mel(*self.impl, mel);
            auto out = to_numpy(compute(self, [&](HiftPair& h) {
                HiftSourceState state = h.source.state(seed);
                std::vector<float> source = h.source.excitation(h.f0(mel.data(), T), state);
                return h.decode(mel.data(), T, source.data(), static_cast<int64_t>(source.size()));
            }));
            report(self);
            return out;
        }, py::arg("mel"), py::arg("seed") = 0,
           "HiFTGenerator.inference: f0 -> seeded excitation -> decode; waveform [480 T] float32.");
}
