// Python bindings of T3: teacher-forced logits and greedy decoding (the parity seams).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>

#include "py_model.h"
#include "t3_gpt2.h"

namespace py = pybind11;
using cbs::EngineError;

static std::vector<int32_t> read_ids(const cbs::ModelFile& mf, const char* name) {
    const ggml_tensor* t = mf.tensor(name);
    if (t->type != GGML_TYPE_I32) throw EngineError(mf.path() + ": " + name + " is not an I32 tensor");
    std::vector<int32_t> v(ggml_nelements(t));
    ggml_backend_tensor_get(t, v.data(), 0, ggml_nbytes(t));
    return v;
}

// The voice's T3 conditioning: given arrays, or the model's built-in voice.
static cbs::T3Conditioning conditioning(const cbs::ModelFile& mf, py::object speaker_emb, py::object prompt_tokens) {
    cbs::T3Conditioning c;
    c.speaker_emb = speaker_emb.is_none() ? mf.read_f32(mf.tensor("voice.speaker_emb"))
                                          : speaker_emb.cast<std::vector<float>>();
    c.prompt_tokens = prompt_tokens.is_none() ? read_ids(mf, "voice.cond_prompt_speech_tokens")
                                              : prompt_tokens.cast<std::vector<int32_t>>();
    return c;
}

struct PyT3 {
    py::object model_ref;  // keeps the weights alive
    cbs::PyModel* model;
    std::unique_ptr<cbs::T3Gpt2> t3;
};

void bind_t3(py::module_& m) {
    py::class_<PyT3>(m, "T3", "GPT-2 T3 over a loaded ModelFile.")
        .def(py::init([](py::object model) {
                 auto p = std::make_unique<PyT3>();
                 p->model_ref = model;
                 p->model = model.cast<cbs::PyModel*>();
                 p->t3 = std::make_unique<cbs::T3Gpt2>(*p->model->file, p->model->backend.get());
                 return p;
             }), py::arg("model"))
        .def("logits", [](PyT3& self, std::vector<int32_t> text, std::vector<int32_t> speech,
                          py::object speaker_emb, py::object prompt_tokens) {
            cbs::T3Conditioning c = conditioning(*self.model->file, speaker_emb, prompt_tokens);
            if (speech.empty()) throw EngineError("speech_ids must hold at least the start-of-speech token");
            std::vector<float> out;
            {
                py::gil_scoped_release release;
                out = self.t3->prompt(c, text, speech, static_cast<int>(speech.size()), 0);
            }
            const int V = self.t3->hp().speech_vocab;
            py::array_t<float> arr({static_cast<py::ssize_t>(speech.size()), static_cast<py::ssize_t>(V)});
            std::memcpy(arr.mutable_data(), out.data(), out.size() * sizeof(float));
            return arr;
        }, py::arg("text_ids"), py::arg("speech_ids"), py::arg("speaker_emb") = py::none(),
           py::arg("prompt_tokens") = py::none(),
           "Teacher-forced speech logits [len(speech_ids), speech_vocab].")
        .def("generate_greedy", [](PyT3& self, std::vector<int32_t> text, int n,
                                   py::object speaker_emb, py::object prompt_tokens) {
            if (n < 1) throw EngineError("n must be at least 1");
            cbs::T3Conditioning c = conditioning(*self.model->file, speaker_emb, prompt_tokens);
            const auto& hp = self.t3->hp();
            std::vector<int32_t> tokens;
            {
                py::gil_scoped_release release;
                auto argmax = [](const std::vector<float>& l) {
                    return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
                };
                std::vector<float> logits = self.t3->prompt(c, text, {hp.start_speech_token}, 1, n);
                tokens.push_back(argmax(logits));
                while (static_cast<int>(tokens.size()) < n && tokens.back() != hp.stop_speech_token) {
                    tokens.push_back(argmax(self.t3->step(tokens.back())));
                }
            }
            return tokens;
        }, py::arg("text_ids"), py::arg("n"), py::arg("speaker_emb") = py::none(), py::arg("prompt_tokens") = py::none(),
           "The first n greedy (argmax) speech tokens, stop token included if reached.");
}
