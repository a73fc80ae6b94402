// Python bindings of T3: teacher-forced logits and greedy decoding (the parity seams).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>

#include "t3/sampler.h"
#include <cstring>

#include "bindings/helpers.h"
#include "t3/t3_gpt2.h"

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

struct PyTokenStream {
    py::object t3_ref;  // keeps the T3 (and its weights) alive
    std::unique_ptr<cbs::SpeechTokenStream> stream;
};

void bind_t3(py::module_& m) {
    py::class_<PyTokenStream>(m, "SpeechTokenStream", "T3 sampling as a resumable loop (streaming, cancellation).")
        .def("next", [](PyTokenStream& self, int n) {
            py::gil_scoped_release release;
            return self.stream->next(n);
        }, py::arg("n"), "Samples up to n more speech tokens (fewer when it ends; stop token kept).")
        .def_property_readonly("done", [](const PyTokenStream& self) { return self.stream->done(); })
        .def_property_readonly("tokens", [](const PyTokenStream& self) { return self.stream->tokens(); });

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
        .def("generate", [](PyT3& self, std::vector<int32_t> text, int max_tokens, uint64_t seed,
                            float temperature, int top_k, float top_p, float repetition_penalty, float min_p,
                            py::object speaker_emb, py::object prompt_tokens) {
            cbs::T3Conditioning c = conditioning(*self.model->file, speaker_emb, prompt_tokens);
            cbs::SamplingParams p{temperature, top_k, top_p, repetition_penalty, min_p};
            py::gil_scoped_release release;
            return cbs::generate_speech_tokens(*self.t3, c, text, p, max_tokens, seed);
        }, py::arg("text_ids"), py::arg("max_tokens"), py::arg("seed") = 0, py::arg("temperature") = 0.8f,
           py::arg("top_k") = 1000, py::arg("top_p") = 0.95f, py::arg("repetition_penalty") = 1.2f,
           py::arg("min_p") = 0.0f, py::arg("speaker_emb") = py::none(), py::arg("prompt_tokens") = py::none(),
           "Speech tokens as T3.inference_turbo samples them (top_k=1 is greedy); stop token kept if drawn.")
        .def("stream", [](py::object self_obj, std::vector<int32_t> text, int max_tokens, uint64_t seed,
                          float temperature, int top_k, float top_p, float repetition_penalty, float min_p,
                          py::object speaker_emb, py::object prompt_tokens) {
            PyT3& self = self_obj.cast<PyT3&>();
            cbs::T3Conditioning c = conditioning(*self.model->file, speaker_emb, prompt_tokens);
            cbs::SamplingParams p{temperature, top_k, top_p, repetition_penalty, min_p};
            auto out = std::make_unique<PyTokenStream>();
            out->t3_ref = self_obj;
            {
                py::gil_scoped_release release;
                out->stream = std::make_unique<cbs::SpeechTokenStream>(*self.t3, c, text, p, max_tokens, seed);
            }
            return out;
        }, py::arg("text_ids"), py::arg("max_tokens"), py::arg("seed") = 0, py::arg("temperature") = 0.8f,
           py::arg("top_k") = 1000, py::arg("top_p") = 0.95f, py::arg("repetition_penalty") = 1.2f,
           py::arg("min_p") = 0.0f, py::arg("speaker_emb") = py::none(), py::arg("prompt_tokens") = py::none(),
           "Starts sampling (runs the prompt) and returns a SpeechTokenStream; the same tokens as generate().");

    m.def("sampler_process", [](std::vector<float> logits, std::vector<int32_t> history, float temperature, int top_k,
                                float top_p, float repetition_penalty, float min_p) {
        cbs::SamplingParams p{temperature, top_k, top_p, repetition_penalty, min_p};
        p.validate();
        cbs::process_logits(logits, history, p);
        return py::array_t<float>(logits.size(), logits.data());
    }, py::arg("logits"), py::arg("history"), py::arg("temperature"), py::arg("top_k"), py::arg("top_p"),
       py::arg("repetition_penalty"), py::arg("min_p") = 0.0f,
       "The reference's logits processors applied to one row of logits (-inf = removed).");
}
