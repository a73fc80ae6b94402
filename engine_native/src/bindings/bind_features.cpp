// Python bindings of the voice-cloning front ends: the three log-mel/fbank features and
// the VoiceEncoder (the `mel_24k`, `fbank80`, `s3tok_logmel` and `ve_embed` seams).
#include "bindings/helpers.h"
#include "cloning/audio_features.h"
#include "cloning/voice_encoder.h"
#include "core/system_info.h"

namespace py = pybind11;
using namespace cbs;

namespace {

const float* wav_data(const F32Array& wav) {
    if (wav.ndim() != 1) throw EngineError("audio must be mono (a 1-D array)");
    return wav.data();
}

// A feature class with compute(wav, n) -> [frames][n_mels], bound as a numpy function.
template <class T>
void bind_frames(py::module_& m, const char* name, const char* doc, const char* compute_doc) {
    py::class_<Component<T>>(m, name, doc)
        .def(py::init(&build_on_host<T>), py::arg("model"))
        .def("compute", [](Component<T>& self, const F32Array& wav) {
            const float* x = wav_data(wav);
            std::vector<float> out = compute(self, [&](T& f) { return f.compute(x, wav.size()); });
            const py::ssize_t n_mels = self->n_mels();
            return to_numpy(out, {static_cast<py::ssize_t>(out.size()) / n_mels, n_mels});
        }, py::arg("wav"), compute_doc);
}

}  // namespace

void bind_features(py::module_& m) {
    bind_frames<Mel24k>(m, "Mel24k", "S3Gen's 24 kHz 80-bin log-mel (prompt_feat).",
                        "log-mel [frames, n_mels] of 24 kHz audio.");
    bind_frames<KaldiFbank>(m, "KaldiFbank", "Kaldi 80-bin log fbank at 16 kHz (CAMPPlus input).",
                            "log fbank [frames, n_mels] of 16 kHz audio.");

    using PyVoiceEncoder = Component<VoiceEncoder>;
    py::class_<PyVoiceEncoder>(m, "VoiceEncoder", "T3's speaker encoder (VoiceEncoder.embeds_from_wavs).")
        .def(py::init(&build_on_host<VoiceEncoder>), py::arg("model"))
        .def("embed", [](PyVoiceEncoder& self, const F32Array& wav, int threads) {
            if (threads != 0) check_option("threads", threads);
            const float* x = wav_data(wav);
            return to_numpy(compute(self, [&](VoiceEncoder& ve) {
                return ve.embed(x, wav.size(), threads > 0 ? threads : default_thread_count());
            }));
        }, py::arg("wav16k"), py::arg("threads") = 0,
           "L2-normalised speaker embedding [embed_dim] of 16 kHz audio; the partial windows are "
           "split over `threads` threads (0: one per core; the result does not depend on it).");

    using PyS3TokLogMel = Component<S3TokLogMel>;
    py::class_<PyS3TokLogMel>(m, "S3TokLogMel", "S3TokenizerV2's 128-bin log-mel at 16 kHz.")
        .def(py::init(&build_on_host<S3TokLogMel>), py::arg("model"))
        .def("compute", [](PyS3TokLogMel& self, const F32Array& wav) {
            const float* x = wav_data(wav);
            int64_t frames = 0;
            std::vector<float> out = compute(self, [&](S3TokLogMel& f) { return f.compute(x, wav.size(), &frames); });
            return to_numpy(out, {static_cast<py::ssize_t>(self->n_mels()), static_cast<py::ssize_t>(frames)});
        }, py::arg("wav"), "log-mel [128, frames] of 16 kHz audio.");
}
