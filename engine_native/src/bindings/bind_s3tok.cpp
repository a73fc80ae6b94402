// Python binding of S3TokenizerV2 (16 kHz speech -> 25 Hz speech tokens).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstring>

#include "bindings/helpers.h"
#include "cloning/s3tokenizer.h"

namespace py = pybind11;

struct PyS3Tokenizer {
    py::object model_ref;  // keeps the weights alive
    std::unique_ptr<cbs::S3TokenizerV2> tok;
};

using WavArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

static std::vector<float> wav_vector(const WavArray& wav) {
    if (wav.ndim() != 1) throw cbs::EngineError("the speech tokenizer expects mono audio (a 1-D array)");
    return std::vector<float>(wav.data(), wav.data() + wav.size());
}

static int max_len_arg(const py::object& max_len) { return max_len.is_none() ? -1 : max_len.cast<int>(); }

void bind_s3tok(py::module_& m) {
    py::class_<PyS3Tokenizer>(m, "S3Tokenizer", "S3TokenizerV2: 16 kHz speech to 25 Hz speech tokens.")
        .def(py::init([](py::object model) {
                 auto p = std::make_unique<PyS3Tokenizer>();
                 auto* pm = model.cast<cbs::PyModel*>();
                 p->model_ref = model;
                 p->tok = std::make_unique<cbs::S3TokenizerV2>(*pm->file, pm->backend.get());
                 return p;
             }), py::arg("model"))
        .def("tokens", [](PyS3Tokenizer& self, const WavArray& wav, const py::object& max_len) {
            std::vector<float> w = wav_vector(wav);
            const int ml = max_len_arg(max_len);
            std::vector<int32_t> out;
            {
                py::gil_scoped_release release;
                out = self.tok->tokens(w, ml);
            }
            py::array_t<int32_t> arr(static_cast<py::ssize_t>(out.size()));
            std::memcpy(arr.mutable_data(), out.data(), out.size() * sizeof(int32_t));
            return arr;
        }, py::arg("wav16k"), py::arg("max_len") = py::none(),
           "Speech tokens (int32) of 16 kHz audio; max_len keeps the first 4 x max_len mel frames.")
        .def("projection", [](PyS3Tokenizer& self, const WavArray& wav, const py::object& max_len) {
            std::vector<float> w = wav_vector(wav);
            const int ml = max_len_arg(max_len);
            std::vector<float> out;
            {
                py::gil_scoped_release release;
                out = self.tok->projection(w, ml);
            }
            const py::ssize_t d = self.tok->n_digits();
            py::array_t<float> arr({static_cast<py::ssize_t>(out.size()) / d, d});
            std::memcpy(arr.mutable_data(), out.data(), out.size() * sizeof(float));
            return arr;
        }, py::arg("wav16k"), py::arg("max_len") = py::none(),
           "The FSQ input (project_down output before tanh), f32 [n_tokens, n_digits].");
}
