// Python bindings of the voice-cloning front ends: the three log-mel/fbank features and
// the VoiceEncoder (the `mel_24k`, `fbank80`, `s3tok_logmel` and `ve_embed` seams), and
// the engine's FFT under them (the `fft` seam).
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

using F64Array = py::array_t<double, py::array::c_style | py::array::forcecast>;

// FftPlan<T> on one complex vector re + i im (T = double, or float as in HiFT's tiles).
template <class T>
py::tuple fft_seam(const F64Array& re, const F64Array& im, bool inverse) {
    if (re.ndim() != 1 || im.ndim() != 1 || re.size() != im.size())
        throw EngineError("fft takes the real and imaginary parts as two 1-D arrays of one length");
    const int n = static_cast<int>(re.size());
    std::vector<T> buf(6 * static_cast<size_t>(n));  // x, y, scratch, real and imaginary parts
    T *xr = buf.data(), *xi = xr + n, *yr = xi + n, *yi = yr + n;
    for (int i = 0; i < n; ++i) xr[i] = static_cast<T>(re.data()[i]), xi[i] = static_cast<T>(im.data()[i]);
    {
        py::gil_scoped_release release;
        const FftPlan<T> plan(n);
        if (inverse)
            plan.inverse(xr, xi, yr, yi, yi + n, yi + 2 * n);
        else
            plan.forward(xr, xi, yr, yi, yi + n, yi + 2 * n);
    }
    return py::make_tuple(to_numpy(std::vector<double>(yr, yr + n)), to_numpy(std::vector<double>(yi, yi + n)));
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

    m.def("fft", [](const F64Array& re, const F64Array& im, bool inverse, bool single) {
        return single ? fft_seam<float>(re, im, inverse) : fft_seam<double>(re, im, inverse);
    }, py::arg("re"), py::arg("im"), py::arg("inverse") = false, py::arg("single") = false,
       "The engine's FFT (core/fft.h) of re + i im: (real, imaginary) of the forward DFT, or the "
       "unscaled inverse; single: float twiddles and arithmetic, as HiFT's convolution tiles.");
}
