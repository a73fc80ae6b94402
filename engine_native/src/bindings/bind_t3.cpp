// Python bindings of T3: the model, its KV caches (one per generation session), token
// streams, and the teacher-forced logits / greedy decoding parity seams.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "bindings/helpers.h"
#include "t3/sampler.h"
#include "t3/t3_model.h"
#include "t3/token_stream.h"

namespace py = pybind11;
using namespace cbs;

namespace {

std::vector<int32_t> read_ids(const ModelFile& mf, const char* name) {
    const ggml_tensor* t = mf.tensor(name, {-1});
    if (t->type != GGML_TYPE_I32) throw ModelError(mf.path() + ": " + name + " is not an I32 tensor");
    std::vector<int32_t> v(ggml_nelements(t));
    ggml_backend_tensor_get(t, v.data(), 0, ggml_nbytes(t));
    return v;
}

// The voice's T3 conditioning: given arrays, or the model's built-in voice.
T3Conditioning conditioning(const ModelFile& mf, int speaker_size, const py::object& speaker_emb,
                            const py::object& prompt_tokens) {
    T3Conditioning c;
    c.speaker_emb = speaker_emb.is_none() ? mf.read_f32(mf.tensor("voice.speaker_emb", {speaker_size}))
                                          : optional_vector<float>(speaker_emb);
    c.prompt_tokens = prompt_tokens.is_none() ? read_ids(mf, "voice.cond_prompt_speech_tokens")
                                              : optional_vector<int32_t>(prompt_tokens);
    return c;
}

using PyT3 = Component<T3Model>;

struct PyT3Cache {
    py::object t3_ref;  // keeps the model (and its backend) alive
    std::shared_ptr<T3Cache> cache;
};

struct PyTokenStream {
    py::object t3_ref;     // keeps the T3 (and its weights) alive
    py::object cache_ref;  // the T3Cache object when one was given
    std::unique_ptr<SpeechTokenStream> stream;
};

SamplingParams params(float temperature, int top_k, float top_p, float repetition_penalty, float min_p) {
    return SamplingParams{temperature, top_k, top_p, repetition_penalty, min_p};
}

}  // namespace

void bind_t3(py::module_& m) {
    py::class_<PyT3Cache>(m, "T3Cache",
                          "A T3 KV cache for one generation session at a time; it keeps the voice prefix it holds.")
        .def(py::init([](py::object t3) {
                 auto c = std::make_unique<PyT3Cache>();
                 c->t3_ref = t3;
                 c->cache = std::shared_ptr<T3Cache>(t3.cast<PyT3&>().impl->new_cache());
                 return c;
             }), py::arg("t3"))
        .def_property_readonly("in_use", [](const PyT3Cache& c) { return c.cache->held(); },
                               "Whether a live stream holds this cache.")
        .def_property_readonly("size", [](const PyT3Cache& c) { return c.cache->size(); },
                               "Positions allocated (grows on demand).");

    py::class_<PyTokenStream>(m, "SpeechTokenStream", "T3 sampling as a resumable loop (streaming, cancellation).")
        .def("next", [](PyTokenStream& self, int n) {
            return released([&] { return self.stream->next(n); });
        }, py::arg("n"), "Samples up to n more speech tokens (fewer when it ends or is cancelled; stop token kept).")
        .def("cancel", [](PyTokenStream& self) { self.stream->cancel(); }, py::call_guard<py::gil_scoped_release>(),
             "Stops the stream before its next token step (any thread); next() then returns what it has.")
        .def("close", [](PyTokenStream& self) { released([&] { self.stream->close(); }); },
             "Ends the stream and releases its cache.")
        .def_property_readonly("done", [](const PyTokenStream& self) { return self.stream->done(); })
        .def_property_readonly("cancelled", [](const PyTokenStream& self) { return self.stream->cancelled(); })
        .def_property_readonly("tokens", [](const PyTokenStream& self) {
            return released([&] { return self.stream->tokens(); });
        });

    py::class_<PyT3>(m, "T3", "T3 (the model named by chatterbox.t3.arch) over a loaded ModelFile.")
        .def(py::init([](py::object model) {
                 return build<T3Model>(model, [](PyModel& pm) { return make_t3(*pm.file, pm.backend.get()); });
             }), py::arg("model"))
        .def_property_readonly("arch", [](const PyT3& self) { return self->hp().arch; })
        .def("logits", [](PyT3& self, std::vector<int32_t> text, std::vector<int32_t> speech,
                          py::object speaker_emb, py::object prompt_tokens) {
            T3Conditioning c = conditioning(*self.model->file, self->hp().speaker_embed_size, speaker_emb, prompt_tokens);
            if (speech.empty()) throw EngineError("speech_ids must hold at least the start-of-speech token");
            std::vector<float> out = released([&] {
                std::unique_ptr<T3Cache> cache = self->new_cache();
                return self->prompt(*cache, c, text, speech, static_cast<int>(speech.size()), 0);
            });
            return to_numpy(out, {static_cast<py::ssize_t>(speech.size()), self->hp().speech_vocab});
        }, py::arg("text_ids"), py::arg("speech_ids"), py::arg("speaker_emb") = py::none(),
           py::arg("prompt_tokens") = py::none(),
           "Teacher-forced speech logits [len(speech_ids), speech_vocab] (on a temporary cache).")
        .def("generate", [](PyT3& self, std::vector<int32_t> text, int max_tokens, uint64_t seed,
                            float temperature, int top_k, float top_p, float repetition_penalty, float min_p,
                            py::object speaker_emb, py::object prompt_tokens) {
            T3Conditioning c = conditioning(*self.model->file, self->hp().speaker_embed_size, speaker_emb, prompt_tokens);
            SamplingParams p = params(temperature, top_k, top_p, repetition_penalty, min_p);
            return released([&] { return generate_speech_tokens(*self.impl, c, text, p, max_tokens, seed); });
        }, py::arg("text_ids"), py::arg("max_tokens"), py::arg("seed") = 0, py::arg("temperature") = 0.8f,
           py::arg("top_k") = 1000, py::arg("top_p") = 0.95f, py::arg("repetition_penalty") = 1.2f,
           py::arg("min_p") = 0.0f, py::arg("speaker_emb") = py::none(), py::arg("prompt_tokens") = py::none(),
           "Speech tokens as T3.inference_turbo samples them (top_k=1 is greedy; temporary cache); stop token kept.")
        .def("stream", [](py::object self_obj, std::vector<int32_t> text, int max_tokens, uint64_t seed,
                          float temperature, int top_k, float top_p, float repetition_penalty, float min_p,
                          py::object speaker_emb, py::object prompt_tokens, py::object cache) {
            PyT3& self = self_obj.cast<PyT3&>();
            T3Conditioning c = conditioning(*self.model->file, self->hp().speaker_embed_size, speaker_emb, prompt_tokens);
            SamplingParams p = params(temperature, top_k, top_p, repetition_penalty, min_p);
            std::shared_ptr<T3Cache> kv;
            if (!cache.is_none()) {
                PyT3Cache& pc = cache.cast<PyT3Cache&>();
                if (!pc.t3_ref.is(self_obj)) throw EngineError("the cache belongs to another T3");
                kv = pc.cache;
            }
            auto out = std::make_unique<PyTokenStream>();
            out->t3_ref = self_obj;
            out->cache_ref = cache;
            out->stream = released(
                [&] { return std::make_unique<SpeechTokenStream>(*self.impl, kv, c, text, p, max_tokens, seed); });
            return out;
        }, py::arg("text_ids"), py::arg("max_tokens"), py::arg("seed") = 0, py::arg("temperature") = 0.8f,
           py::arg("top_k") = 1000, py::arg("top_p") = 0.95f, py::arg("repetition_penalty") = 1.2f,
           py::arg("min_p") = 0.0f, py::arg("speaker_emb") = py::none(), py::arg("prompt_tokens") = py::none(),
           py::arg("cache") = py::none(),
           "Starts sampling (runs the prompt) and returns a SpeechTokenStream; the same tokens as generate(). "
           "`cache` (a T3Cache of this T3) is held by the stream until it ends or is closed; None: a private one.");

    m.def("sampler_process", [](F32Array logits, I32Array history, float temperature, int top_k, float top_p,
                                float repetition_penalty, float min_p) {
        SamplingParams p = params(temperature, top_k, top_p, repetition_penalty, min_p);
        p.validate_processors();
        std::vector<float> s = to_vector(logits);
        std::vector<int32_t> h = to_vector(history);
        released([&] { process_logits(s, h, p); });
        return to_numpy(s);
    }, py::arg("logits"), py::arg("history"), py::arg("temperature"), py::arg("top_k"), py::arg("top_p"),
       py::arg("repetition_penalty"), py::arg("min_p") = 0.0f,
       "The reference's logits processors applied to one row of logits (-inf = removed).");
}
