// Python bindings of the audio feature extractors (voice-cloning seams).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>

#include "cloning/audio_features.h"
#include "bindings/helpers.h"
#include "core/system_info.h"
#include "cloning/voice_encoder.h"

namespace py = pybind11;

// Audio arrives as a float32 array (converted once if it is not; a list works too):
// no per-sample Python conversion. The caller's reference keeps it alive while the GIL is released.
using WavArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

static const float* wav_data(const WavArray& wav) {
    if (wav.ndim() != 1) throw cbs::EngineError("audio must be mono (a 1-D array)");
    return wav.data();
}

struct PyKaldiFbank {
    py::object model_ref;
    std::unique_ptr<cbs::KaldiFbank> fbank;
};

static py::array_t<float> frames_array(const std::vector<float>& v, py::ssize_t n_mels) {
    py::array_t<float> arr({static_cast<py::ssize_t>(v.size()) / n_mels, n_mels});
    std::memcpy(arr.mutable_data(), v.data(), v.size() * sizeof(float));
    return arr;
}

struct PyVoiceEncoder {
    py::object model_ref;
    std::unique_ptr<cbs::VoiceEncoder> ve;
};

struct PyS3TokLogMel {
    py::object model_ref;
    std::unique_ptr<cbs::S3TokLogMel> logmel;
};

struct PyMel24k {
    py::object model_ref;  // keeps the weights alive
    std::unique_ptr<cbs::Mel24k> mel;
};

void bind_features(py::module_& m) {
    py::class_<PyMel24k>(m, "Mel24k", "S3Gen's 24 kHz 80-bin log-mel (prompt_feat).")
        .def(py::init([](py::object model) {
                 auto p = std::make_unique<PyMel24k>();
                 auto* pm = model.cast<cbs::PyModel*>();
                 p->model_ref = model;
                 p->mel = std::make_unique<cbs::Mel24k>(*pm->file);
                 return p;
             }), py::arg("model"))
        .def("compute", [](PyMel24k& self, const WavArray& wav) {
            const float* x = wav_data(wav);
            std::vector<float> out;
            {
                py::gil_scoped_release release;
                out = self.mel->compute(x, wav.size());
            }
            return frames_array(out, self.mel->n_mels());
        }, py::arg("wav"), "log-mel [frames, n_mels] of 24 kHz audio.");

    py::class_<PyKaldiFbank>(m, "KaldiFbank", "Kaldi 80-bin log fbank at 16 kHz (CAMPPlus input).")
        .def(py::init([](py::object model) {
                 auto p = std::make_unique<PyKaldiFbank>();
                 p->model_ref = model;
                 p->fbank = std::make_unique<cbs::KaldiFbank>(*model.cast<cbs::PyModel*>()->file);
                 return p;
             }), py::arg("model"))
        .def("compute", [](PyKaldiFbank& self, const WavArray& wav) {
            const float* x = wav_data(wav);
            std::vector<float> out;
            {
                py::gil_scoped_release release;
                out = self.fbank->compute(x, wav.size());
            }
            return frames_array(out, self.fbank->n_mels());
        }, py::arg("wav"), "log fbank [frames, n_mels] of 16 kHz audio.");

    py::class_<PyVoiceEncoder>(m, "VoiceEncoder", "T3's speaker encoder (VoiceEncoder.embeds_from_wavs).")
        .def(py::init([](py::object model) {
                 auto p = std::make_unique<PyVoiceEncoder>();
                 p->model_ref = model;
                 p->ve = std::make_unique<cbs::VoiceEncoder>(*model.cast<cbs::PyModel*>()->file);
                 return p;
             }), py::arg("model"))
        .def("embed", [](PyVoiceEncoder& self, const WavArray& wav, int threads) {
            if (threads < 0) throw cbs::EngineError("threads must be >= 0 (0: one per core)");
            const float* x = wav_data(wav);
            std::vector<float> e;
            {
                py::gil_scoped_release release;
                e = self.ve->embed(x, wav.size(), threads > 0 ? threads : cbs::default_thread_count());
            }
            py::array_t<float> arr(static_cast<py::ssize_t>(e.size()));
            std::memcpy(arr.mutable_data(), e.data(), e.size() * sizeof(float));
            return arr;
        }, py::arg("wav16k"), py::arg("threads") = 0,
           "L2-normalised speaker embedding [embed_dim] of 16 kHz audio; the partial windows are "
           "split over `threads` threads (0: one per core; the result does not depend on it).");

    py::class_<PyS3TokLogMel>(m, "S3TokLogMel", "S3TokenizerV2's 128-bin log-mel at 16 kHz.")
        .def(py::init([](py::object model) {
                 auto p = std::make_unique<PyS3TokLogMel>();
                 p->model_ref = model;
                 p->logmel = std::make_unique<cbs::S3TokLogMel>(*model.cast<cbs::PyModel*>()->file);
                 return p;
             }), py::arg("model"))
        .def("compute", [](PyS3TokLogMel& self, const WavArray& wav) {
            const float* x = wav_data(wav);
            std::vector<float> out;
            int64_t frames = 0;
            {
                py::gil_scoped_release release;
                out = self.logmel->compute(x, wav.size(), &frames);
            }
            py::array_t<float> arr({static_cast<py::ssize_t>(self.logmel->n_mels()), static_cast<py::ssize_t>(frames)});
            std::memcpy(arr.mutable_data(), out.data(), out.size() * sizeof(float));
            return arr;
        }, py::arg("wav"), "log-mel [128, frames] of 16 kHz audio.");
}
