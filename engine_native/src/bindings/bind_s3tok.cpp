// Python binding of S3TokenizerV2 (the `s3tok_tokens` parity seam; voice cloning).
#include "bindings/helpers.h"
#include "cloning/s3tokenizer.h"

namespace py = pybind11;
using namespace cbs;

namespace {

int max_len_arg(const py::object& max_len) { return max_len.is_none() ? -1 : max_len.cast<int>(); }

std::vector<float> mono(const F32Array& wav) {
    if (wav.ndim() != 1) throw EngineError("the speech tokenizer expects mono audio (a 1-D array)");
    return to_vector(wav);
}

}  // namespace

void bind_s3tok(py::module_& m) {
    using PyS3Tokenizer = Component<S3TokenizerV2>;
    py::class_<PyS3Tokenizer>(m, "S3Tokenizer", "S3TokenizerV2: 16 kHz speech to 25 Hz speech tokens.")
        .def(py::init(&build_on_backend<S3TokenizerV2>), py::arg("model"))
        .def("tokens", [](PyS3Tokenizer& self, const F32Array& wav, const py::object& max_len) {
            std::vector<float> w = mono(wav);
            const int ml = max_len_arg(max_len);
            return to_numpy(compute(self, [&](S3TokenizerV2& tok) { return tok.tokens(w, ml); }));
        }, py::arg("wav16k"), py::arg("max_len") = py::none(),
           "Speech tokens (int32) of 16 kHz audio; max_len keeps the first 4 x max_len mel frames.")
        .def("projection", [](PyS3Tokenizer& self, const F32Array& wav, const py::object& max_len) {
            std::vector<float> w = mono(wav);
            const int ml = max_len_arg(max_len);
            std::vector<float> out = compute(self, [&](S3TokenizerV2& tok) { return tok.projection(w, ml); });
            const py::ssize_t d = self->n_digits();
            return to_numpy(out, {static_cast<py::ssize_t>(out.size()) / d, d});
        }, py::arg("wav16k"), py::arg("max_len") = py::none(),
           "The FSQ input (project_down output before tanh), f32 [n_tokens, n_digits].");
}
