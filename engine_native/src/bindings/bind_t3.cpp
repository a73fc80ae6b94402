// Python bindings of T3: the model, its KV caches (one per generation session), token
// streams, and the teacher-forced logits / greedy decoding parity seams (and, for the
// Multilingual T3, its conditioning / input embeddings and alignment-head seams).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "bindings/helpers.h"
#include "core/graph_runner.h"
#include "cpu/products.h"
#include "cpu/q4_matmul.h"
#include "t3/decode_attention.h"
#include "t3/sampler.h"
#include "t3/t3_llama.h"
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

// A sampling value: the argument, else the model file's (chatterbox.sampling.KEY). The
// converter writes the reference's defaults there, the one place they are kept; the engine
// passes every value, the parity seams leave some None.
float sampling_value(const ModelFile& mf, const py::object& v, const char* key) {
    if (!v.is_none()) return v.cast<float>();
    return static_cast<float>(mf.get_float(std::string("chatterbox.sampling.") + key));
}
int sampling_int(const ModelFile& mf, const py::object& v, const char* key) {
    if (!v.is_none()) return v.cast<int>();
    return static_cast<int>(mf.get_int(std::string("chatterbox.sampling.") + key));
}
// The classifier-free guidance weight: the argument, else the file's; 0 (none) for a model
// without guidance (Turbo, Nano: no such key).
float cfg_weight_value(const ModelFile& mf, const py::object& v) {
    return v.is_none() && !mf.has_key("chatterbox.sampling.cfg_weight") ? 0.0f : sampling_value(mf, v, "cfg_weight");
}

// The voice's T3 conditioning: given arrays, or the model's built-in voice; the
// exaggeration (Multilingual) given or the model file's (a file without the key is a T3
// that does not read it).
T3Conditioning conditioning(const ModelFile& mf, int speaker_size, const py::object& speaker_emb,
                            const py::object& prompt_tokens, const py::object& exaggeration = py::none()) {
    T3Conditioning c;
    c.speaker_emb = speaker_emb.is_none() ? mf.read_f32(mf.tensor("voice.speaker_emb", {speaker_size}))
                                          : optional_vector<float>(speaker_emb);
    c.prompt_tokens = prompt_tokens.is_none() ? read_ids(mf, "voice.cond_prompt_speech_tokens")
                                              : optional_vector<int32_t>(prompt_tokens);
    if (!exaggeration.is_none() || mf.has_key("chatterbox.sampling.exaggeration"))
        c.exaggeration = sampling_value(mf, exaggeration, "exaggeration");
    return c;
}

T3Llama& llama(T3Model& t3) {
    auto* l = dynamic_cast<T3Llama*>(&t3);
    if (!l) throw EngineError("this seam needs the Multilingual (llama) T3; the model's T3 is " + t3.hp().arch);
    return *l;
}

using PyT3 = Component<T3Model>;

struct PyT3Cache {
    py::object t3_ref;  // keeps the model (and its backend) alive
    std::shared_ptr<T3Cache> cache;
    ~PyT3Cache() { without_gil([this] { cache.reset(); }); }
};

struct PyTokenStream {
    py::object t3_ref;     // keeps the T3 (and its weights) alive
    py::object cache_ref;  // the T3Cache object when one was given
    std::unique_ptr<SpeechTokenStream> stream;
    ~PyTokenStream() { without_gil([this] { stream.reset(); }); }
};

SamplingParams params(float temperature, int top_k, float top_p, float repetition_penalty, float min_p,
                      float cfg_weight = 0.0f) {
    return SamplingParams{temperature, top_k, top_p, repetition_penalty, min_p, cfg_weight};
}

// Sampling arguments left None take the model file's defaults (chatterbox.sampling.*).
SamplingParams params(const ModelFile& mf, const py::object& temperature, const py::object& top_k,
                      const py::object& top_p, const py::object& repetition_penalty, const py::object& min_p,
                      const py::object& cfg_weight) {
    return params(sampling_value(mf, temperature, "temperature"), sampling_int(mf, top_k, "top_k"),
                  sampling_value(mf, top_p, "top_p"), sampling_value(mf, repetition_penalty, "repetition_penalty"),
                  sampling_value(mf, min_p, "min_p"), cfg_weight_value(mf, cfg_weight));
}

}  // namespace

// (ours, ggml's, w dequantised) for the products of w (f32 [N, K], quantised to Q4_0 here) and x (f32 [M, K]) on a
// CPU backend: ours through matmul() on the weight in cpu/q4_matmul's packed layout (the
// kernel below q4_kernel_max_columns(), sgemm or AMX from there), ggml's through ggml_mul_mat on plain Q4_0.
static py::tuple q4_matmul_pair(F32Array w, F32Array x, int threads) {
    if (w.ndim() != 2 || x.ndim() != 2 || w.shape(1) != x.shape(1) || w.shape(1) % 32 != 0 || w.shape(0) < 1 ||
        x.shape(0) < 1)
        throw ParameterError("w [N, K] and x [M, K] with K a multiple of 32");
    const int64_t N = w.shape(0), K = w.shape(1), M = x.shape(0);
    std::vector<uint8_t> raw(ggml_row_size(GGML_TYPE_Q4_0, K) * N), packed(raw.size());
    {
        py::gil_scoped_release nogil;
        ggml_quantize_chunk(GGML_TYPE_Q4_0, w.data(), raw.data(), 0, N, K, nullptr);
        q4_pack(raw.data(), packed.data(), N, K);
    }
    BackendPtr backend = make_backend("cpu", threads);
    ggml_init_params params{ggml_tensor_overhead() * 2, nullptr, true};
    std::unique_ptr<ggml_context, void (*)(ggml_context*)> weights(ggml_init(params), ggml_free);
    ggml_tensor* plain = ggml_new_tensor_2d(weights.get(), GGML_TYPE_Q4_0, K, N);
    ggml_tensor* ours = ggml_new_tensor_2d(weights.get(), GGML_TYPE_Q4_0, K, N);
    std::unique_ptr<ggml_backend_buffer, void (*)(ggml_backend_buffer_t)> buffer(
        ggml_backend_alloc_ctx_tensors(weights.get(), backend.get()), ggml_backend_buffer_free);
    ggml_backend_tensor_set(plain, raw.data(), 0, raw.size());
    ggml_backend_tensor_set(ours, packed.data(), 0, packed.size());
    q4_mark_packed(ours, true);
    std::vector<std::vector<float>> out;
    try {
        py::gil_scoped_release nogil;
        GraphRunner runner(backend.get());
        ggml_context* ctx = runner.begin();
        GraphInputs in;
        ggml_tensor* xt = in.f32(ctx, std::vector<float>(x.data(), x.data() + M * K), K, M);
        out = runner.compute({matmul(ctx, ours, xt, false), ggml_mul_mat(ctx, plain, xt)}, in);
    } catch (...) {
        q4_mark_packed(ours, false);
        throw;
    }
    q4_mark_packed(ours, false);
    auto arr = [&](const std::vector<float>& v) {
        py::array_t<float> a({M, N});
        std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(float));
        return a;
    };
    py::array_t<float> dequantised({N, K});
    ggml_get_type_traits(GGML_TYPE_Q4_0)->to_float(raw.data(), dequantised.mutable_data(), N * K);
    return py::make_tuple(arr(out[0]), arr(out[1]), dequantised);
}

// Milliseconds per product of our Q4_0 kernel (the packed weight built once, the graph
// computed `repeat` times): benchmarks/bench_q4_kernel.py.
static double q4_kernel_ms(F32Array w, F32Array x, int threads, int repeat) {
    if (w.ndim() != 2 || x.ndim() != 2 || w.shape(1) != x.shape(1) || w.shape(1) % 32 != 0 || repeat < 1)
        throw ParameterError("w [N, K] and x [M, K] with K a multiple of 32, repeat >= 1");
    if (!q4_packed_available()) throw EngineError("this CPU does not run the Q4_0 kernel");
    const int64_t N = w.shape(0), K = w.shape(1), M = x.shape(0);
    py::gil_scoped_release nogil;
    std::vector<uint8_t> raw(ggml_row_size(GGML_TYPE_Q4_0, K) * N), packed(raw.size());
    ggml_quantize_chunk(GGML_TYPE_Q4_0, w.data(), raw.data(), 0, N, K, nullptr);
    q4_pack(raw.data(), packed.data(), N, K);
    BackendPtr backend = make_backend("cpu", threads);
    ggml_init_params params{ggml_tensor_overhead(), nullptr, true};
    std::unique_ptr<ggml_context, void (*)(ggml_context*)> weights(ggml_init(params), ggml_free);
    ggml_tensor* ours = ggml_new_tensor_2d(weights.get(), GGML_TYPE_Q4_0, K, N);
    std::unique_ptr<ggml_backend_buffer, void (*)(ggml_backend_buffer_t)> buffer(
        ggml_backend_alloc_ctx_tensors(weights.get(), backend.get()), ggml_backend_buffer_free);
    ggml_backend_tensor_set(ours, packed.data(), 0, packed.size());
    struct Unmark {  // the packed mark goes with the tensor
        const ggml_tensor* t;
        ~Unmark() { q4_mark_packed(t, false); }
    } unmark{ours};
    q4_mark_packed(ours, true);
    GraphRunner runner(backend.get());
    ggml_context* ctx = runner.begin();
    GraphInputs in;
    ggml_tensor* xt = in.f32(ctx, std::vector<float>(x.data(), x.data() + M * K), K, M);
    ggml_tensor* y = matmul(ctx, ours, xt, false);
    runner.compute(y, in, true);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < repeat; ++i) runner.rerun(y, in);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / repeat;
}

// An array's values rounded to f16 (an f16 cache's contents).
static std::vector<ggml_fp16_t> halves(const F32Array& a) {
    std::vector<ggml_fp16_t> h(static_cast<size_t>(a.size()));
    for (size_t i = 0; i < h.size(); ++i) h[i] = ggml_fp32_to_fp16(a.data()[i]);
    return h;
}

// (ours, ggml's flash attention) for one query over an f16 cache: q [H, D], k and v
// [H, n, D] (rounded to f16 here), the first n_valid positions unmasked -> [H, D] each.
static py::tuple t3_decode_attention_pair(F32Array q, F32Array k, F32Array v, int n_valid, int threads) {
    const bool rows_given = q.ndim() == 3;  // [rows, H, D]: a guided model's two rows, each over its own cache
    const py::ssize_t o = rows_given ? 1 : 0;
    if (q.ndim() != 2 + o || k.ndim() != 3 + o || v.ndim() != 3 + o || k.shape(o) != q.shape(o) ||
        k.shape(2 + o) != q.shape(1 + o) || (rows_given && (k.shape(0) != q.shape(0) || v.shape(0) != q.shape(0))) ||
        v.shape(o) != k.shape(o) || v.shape(1 + o) != k.shape(1 + o) || v.shape(2 + o) != k.shape(2 + o) || n_valid < 0 ||
        n_valid > k.shape(1 + o))
        throw ParameterError("q [(rows,) H, D], k and v [(rows,) H, n, D], 0 <= n_valid <= n");
    const int64_t rows = rows_given ? q.shape(0) : 1, H = q.shape(o), D = q.shape(1 + o), n = k.shape(1 + o);
    std::vector<ggml_fp16_t> mask(static_cast<size_t>(n));
    for (int64_t j = 0; j < n; ++j) mask[j] = ggml_fp32_to_fp16(j < n_valid ? 0.0f : -INFINITY);
    BackendPtr backend = make_backend("cpu", threads);
    std::vector<std::vector<float>> out;
    {
        py::gil_scoped_release nogil;
        GraphRunner runner(backend.get());
        ggml_context* ctx = runner.begin();
        GraphInputs in;
        ggml_tensor* qt = ggml_reshape_4d(ctx, in.f32(ctx, std::vector<float>(q.data(), q.data() + rows * H * D), D, H * rows),
                                          D, H, 1, rows);
        ggml_tensor* kt = ggml_reshape_4d(ctx, in.f16_mask(ctx, halves(k), D, n * H * rows), D, n, H, rows);
        ggml_tensor* vt = ggml_reshape_4d(ctx, in.f16_mask(ctx, halves(v), D, n * H * rows), D, n, H, rows);
        ggml_tensor* mt = in.f16_mask(ctx, std::move(mask), n, 1);
        ggml_tensor* flash = ggml_flash_attn_ext(ctx, ggml_permute(ctx, qt, 0, 2, 1, 3), kt, vt, mt,
                                                 1.0f / std::sqrt(static_cast<float>(D)), 0.0f, 0.0f);
        ggml_flash_attn_ext_set_prec(flash, GGML_PREC_F32);
        out = runner.compute({decode_attention(ctx, qt, kt, vt, mt), flash}, in);
    }
    auto arr = [&](const std::vector<float>& x) {
        std::vector<py::ssize_t> shape{H, D};
        if (rows_given) shape.insert(shape.begin(), rows);
        py::array_t<float> a(shape);
        std::memcpy(a.mutable_data(), x.data(), x.size() * sizeof(float));
        return a;
    };
    return py::make_tuple(arr(out[0]), arr(out[1]));
}

// Ours for a short prompt's queries over an f16 cache: q [H, n_q, D], k and v [H, n, D] (rounded
// to f16 here), query i seeing positions < first + i + 1 (causal) -> [n_q, H, D].
static py::array_t<float> t3_prompt_attention(F32Array q, F32Array k, F32Array v, int first, int threads) {
    if (q.ndim() != 3 || k.ndim() != 3 || v.ndim() != 3 || k.shape(0) != q.shape(0) || v.shape(0) != q.shape(0) ||
        k.shape(2) != q.shape(2) || v.shape(2) != q.shape(2) || v.shape(1) != k.shape(1) || first < 0 ||
        first + q.shape(1) > k.shape(1))
        throw ParameterError("q [H, n_q, D], k and v [H, n, D], first + n_q <= n");
    const int64_t H = q.shape(0), n_q = q.shape(1), D = q.shape(2), n = k.shape(1);
    std::vector<float> qs(static_cast<size_t>(n_q * H * D));  // [n_q][H][D]: the op's q [D, H, n_q]
    for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < n_q; ++i)
            std::memcpy(&qs[(i * H + h) * D], q.data() + (h * n_q + i) * D, D * sizeof(float));
    std::vector<ggml_fp16_t> mask(static_cast<size_t>(n * n_q));
    for (int64_t i = 0; i < n_q; ++i)
        for (int64_t j = 0; j < n; ++j) mask[i * n + j] = ggml_fp32_to_fp16(j <= first + i ? 0.0f : -INFINITY);
    BackendPtr backend = make_backend("cpu", threads);
    std::vector<float> out;
    {
        py::gil_scoped_release nogil;
        GraphRunner runner(backend.get());
        ggml_context* ctx = runner.begin();
        GraphInputs in;
        ggml_tensor* qt = ggml_reshape_3d(ctx, in.f32(ctx, std::move(qs), D, H * n_q), D, H, n_q);
        ggml_tensor* kt = ggml_reshape_3d(ctx, in.f16_mask(ctx, halves(k), D, n * H), D, n, H);
        ggml_tensor* vt = ggml_reshape_3d(ctx, in.f16_mask(ctx, halves(v), D, n * H), D, n, H);
        out = runner.compute(decode_attention(ctx, qt, kt, vt, in.f16_mask(ctx, std::move(mask), n, n_q)), in);
    }
    py::array_t<float> a({n_q, H, D});
    std::memcpy(a.mutable_data(), out.data(), out.size() * sizeof(float));
    return a;
}

void bind_t3(py::module_& m) {
    m.def("t3_prompt_attention", &t3_prompt_attention, py::arg("q"), py::arg("k"), py::arg("v"), py::arg("first"),
          py::arg("threads") = 2,
          "Ours for a short prompt's queries over an f16 cache (k, v rounded to f16), query i seeing positions "
          "<= first + i; q [H, n_q, D], k and v [H, n, D] -> [n_q, H, D] (tests).");
    m.def("t3_decode_attention_pair", &t3_decode_attention_pair, py::arg("q"), py::arg("k"), py::arg("v"),
          py::arg("n_valid"), py::arg("threads") = 2,
          "(ours, ggml's flash attention): one query's attention over an f16 cache (k, v rounded to f16), the first "
          "n_valid positions unmasked; q [(rows,) H, D], k and v [(rows,) H, n, D] -> like q each (tests).");
    m.def("q4_kernel_ms", &q4_kernel_ms, py::arg("w"), py::arg("x"), py::arg("threads") = 2, py::arg("repeat") = 20,
          "Milliseconds per product w [N, K] (Q4_0, packed once) x [M, K] through the engine's Q4_0 kernel on the CPU "
          "(benchmarks).");
    m.def("q4_matmul_pair", &q4_matmul_pair, py::arg("w"), py::arg("x"), py::arg("threads") = 2,
          "(ours, ggml's, w as Q4_0 dequantised): Q4_0 products of w [N, K] (f32, quantised here) and x [M, K] "
          "on the CPU, ours in the engine's packed layout (its kernel below system_info()['q4_kernel_max_columns'] "
          "columns, sgemm or AMX from there), ggml's on "
          "plain Q4_0 (tests).");
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
        .def_property_readonly("forced_stop", [](const PyTokenStream& self) { return self.stream->forced_stop(); },
                               "Multilingual: whether the alignment analyzer forced the stop token for the next draw.")
        .def_property_readonly("tokens", [](const PyTokenStream& self) {
            return released([&] { return self.stream->tokens(); });
        });

    py::class_<PyT3>(m, "T3", "T3 (the model named by chatterbox.t3.arch) over a loaded ModelFile.")
        .def(py::init([](py::object model, int threads) {
                 return build<T3Model>(model, [threads](PyModel& pm) {
                     if (threads > 0 && !pm.t3_backend) {
                         // Its own backend on a GPU too: ggml-cuda's context (stream, memory pool,
                         // captured CUDA graphs) serves one thread at a time, and a stream's T3
                         // worker computes while S3Gen renders on the model's.
                         const bool cpu = backend_is_cpu(pm.backend.get());
                         pm.t3_backend = make_backend(cpu ? "cpu" : device_id(pm.backend.get()), threads);
                         set_abort_callback(pm.t3_backend.get(), [](void* flag) {
                             return static_cast<std::atomic<bool>*>(flag)->load(std::memory_order_relaxed);
                         }, &pm.t3_abort);
                     }
                     return make_t3(*pm.file, pm.t3_backend && threads > 0 ? pm.t3_backend.get() : pm.backend.get());
                 });
             }), py::arg("model"), py::arg("threads") = 0,
             "threads > 0: T3 computes on a backend of its own on the model's device (shared by the model's T3s), "
             "so it can run beside S3Gen; 0: on the model's backend.")
        .def_property_readonly("own_backend", [](const PyT3& self) { return bool(self.model->t3_backend); })
        .def("abort_compute", [](PyT3& self, bool on) {
            (self.model->t3_backend ? self.model->t3_abort : self.model->abort).store(on);
        }, py::arg("on") = true, "As ModelFile.abort_compute, for T3's computations (its own backend's flag).")
        .def_property_readonly("arch", [](const PyT3& self) { return self->hp().arch; })
        .def("logits", [](py::object self_obj, std::vector<int32_t> text, std::vector<int32_t> speech,
                          py::object speaker_emb, py::object prompt_tokens, py::object exaggeration,
                          py::object cfg_weight, bool alignment, py::object given) -> py::object {
            PyT3& self = self_obj.cast<PyT3&>();
            const ModelFile& mf = *self.model->file;
            T3Conditioning c = conditioning(mf, self->hp().speaker_embed_size, speaker_emb, prompt_tokens, exaggeration);
            c.guidance = self->alignment() && cfg_weight_value(mf, cfg_weight) > 0.0f;
            if (speech.empty()) throw EngineError("speech_ids must hold at least the start-of-speech token");
            std::shared_ptr<T3Cache> cache;
            if (given.is_none()) {
                cache = self->new_cache();
            } else {
                PyT3Cache& pc = given.cast<PyT3Cache&>();
                if (!pc.t3_ref.is(self_obj)) throw EngineError("the cache belongs to another T3");
                cache = pc.cache;
                cache->acquire();
            }
            struct Release {
                T3Cache* c;
                ~Release() { if (c) c->release(); }
            } release{given.is_none() ? nullptr : cache.get()};
            std::vector<float> out = released([&] {
                return self->prompt(*cache, c, text, speech, static_cast<int>(speech.size()), 0);
            });
            const py::ssize_t n = static_cast<py::ssize_t>(speech.size()), V = self->hp().speech_vocab;
            py::array logits = self->alignment() ? to_numpy(out, {cache->n_rows, n, V}) : to_numpy(out, {n, V});
            if (!alignment) return logits;
            const py::ssize_t per_head = static_cast<py::ssize_t>(cache->align_rows) * cache->align_cols;
            const py::ssize_t heads = per_head ? static_cast<py::ssize_t>(cache->align.size()) / per_head : 0;
            return py::make_tuple(logits, to_numpy(cache->align, {heads, cache->align_rows, cache->align_cols}));
        }, py::arg("text_ids"), py::arg("speech_ids"), py::arg("speaker_emb") = py::none(),
           py::arg("prompt_tokens") = py::none(), py::arg("exaggeration") = py::none(),
           py::arg("cfg_weight") = py::none(), py::arg("alignment") = false, py::arg("cache") = py::none(),
           "Teacher-forced speech logits [len(speech_ids), speech_vocab] (on a temporary cache, or `cache`, a "
           "T3Cache of this T3 whose prefix it keeps as a stream does). The "
           "Multilingual T3 returns [rows, len(speech_ids), speech_vocab] (rows 2: cond, uncond, when "
           "cfg_weight > 0) as T3.inference computes them (the start token twice); alignment=True adds its "
           "alignment heads' attention over the text [heads, 1 + len(speech_ids), len(text_ids)].")
        .def("step_logits", [](PyT3& self, std::vector<int32_t> text, std::vector<int32_t> speech,
                               py::object speaker_emb, py::object prompt_tokens, py::object cfg_weight) {
            const ModelFile& mf = *self.model->file;
            T3Conditioning c = conditioning(mf, self->hp().speaker_embed_size, speaker_emb, prompt_tokens);
            c.guidance = !cfg_weight.is_none() && self->alignment() && cfg_weight_value(mf, cfg_weight) > 0.0f;
            if (speech.empty()) throw EngineError("speech_ids must hold at least the start-of-speech token");
            std::unique_ptr<T3Cache> cache = self->new_cache();
            std::vector<float> out = released([&] {
                std::vector<float> all = self->prompt(*cache, c, text, {speech[0]}, 1, static_cast<int>(speech.size()));
                for (size_t i = 1; i < speech.size(); ++i) {
                    const std::vector<float> step = self->step(*cache, speech[i]);
                    all.insert(all.end(), step.begin(), step.end());
                }
                return all;
            });
            const py::ssize_t n = static_cast<py::ssize_t>(speech.size());
            return to_numpy(out, {n, static_cast<py::ssize_t>(out.size()) / n});
        }, py::arg("text_ids"), py::arg("speech_ids"), py::arg("speaker_emb") = py::none(),
           py::arg("prompt_tokens") = py::none(), py::arg("cfg_weight") = py::none(),
           "The logits logits() gives, through the decoding step: the prompt with speech_ids[0], then one "
           "step() per later id -> [len(speech_ids), rows x speech_vocab] (rows 2 with the Multilingual T3's "
           "guidance, given cfg_weight > 0; tests of the step's kernels).")
        .def("step_logits_together", [](PyT3& self, std::vector<std::vector<int32_t>> texts,
                                        std::vector<std::vector<int32_t>> speeches, std::vector<int> join_at,
                                        py::object prompt_tokens) {
            const size_t B = texts.size();
            if (speeches.size() != B || (!join_at.empty() && join_at.size() != B))
                throw EngineError("texts, speech_ids and join_at must have one entry per session");
            if (join_at.empty()) join_at.assign(B, 0);
            T3Conditioning c = conditioning(*self.model->file, self->hp().speaker_embed_size, py::none(), prompt_tokens);
            std::vector<std::unique_ptr<T3Cache>> caches;
            int rounds = 0;
            for (size_t b = 0; b < B; ++b) {
                if (speeches[b].empty()) throw EngineError("every session needs at least the start-of-speech token");
                if (join_at[b] < 0) throw EngineError("join_at must be >= 0");
                caches.push_back(self->new_cache());
                rounds = std::max(rounds, join_at[b] + static_cast<int>(speeches[b].size()));
            }
            std::vector<std::vector<float>> out(B);
            released([&] {
                // Round r: a session prompts at join_at (its speech_ids[0]), then steps one id a round.
                for (int r = 0; r < rounds; ++r) {
                    std::vector<T3Cache*> step_caches;
                    std::vector<int32_t> tokens;
                    std::vector<size_t> who;
                    for (size_t b = 0; b < B; ++b) {
                        const int i = r - join_at[b];
                        if (i == 0) {
                            const std::vector<float> l = self->prompt(*caches[b], c, texts[b], {speeches[b][0]}, 1,
                                                                      static_cast<int>(speeches[b].size()));
                            out[b].insert(out[b].end(), l.begin(), l.end());
                        } else if (i > 0 && i < static_cast<int>(speeches[b].size())) {
                            step_caches.push_back(caches[b].get());
                            tokens.push_back(speeches[b][i]);
                            who.push_back(b);
                        }
                    }
                    const auto logits = self->step_batch(step_caches, tokens);
                    for (size_t k = 0; k < who.size(); ++k)
                        out[who[k]].insert(out[who[k]].end(), logits[k].begin(), logits[k].end());
                }
            });
            py::list result;
            for (size_t b = 0; b < B; ++b) {
                const py::ssize_t n = static_cast<py::ssize_t>(speeches[b].size());
                result.append(to_numpy(out[b], {n, static_cast<py::ssize_t>(out[b].size()) / n}));
            }
            return result;
        }, py::arg("text_ids"), py::arg("speech_ids"), py::arg("join_at") = std::vector<int>{},
           py::arg("prompt_tokens") = py::none(),
           "step_logits of several sessions (the built-in voice; prompt_tokens: its speech prompt) stepped together: session b prompts at round "
           "join_at[b] and steps one of its speech_ids a round with every session then active, in one "
           "step_batch -> a list of [len(speech_ids[b]), speech_vocab] (tests of the batched step).")
        .def("mtl_conditioning", [](PyT3& self, py::object speaker_emb, py::object prompt_tokens,
                                    py::object exaggeration) {
            T3Llama& t3 = llama(*self.impl);
            T3Conditioning c = conditioning(*self.model->file, self->hp().speaker_embed_size, speaker_emb,
                                            prompt_tokens, exaggeration);
            std::vector<float> out = released([&] { return t3.conditioning(c); });
            return to_numpy(out, {t3.cond_len(c), self->hp().n_embd});
        }, py::arg("speaker_emb") = py::none(), py::arg("prompt_tokens") = py::none(),
           py::arg("exaggeration") = py::none(),
           "The Multilingual conditioning embeddings [cond_len, n_embd] (T3.prepare_conditioning).")
        .def_property_readonly("mtl_inv_freq", [](PyT3& self) { return to_numpy(llama(*self.impl).inv_freq()); },
                               "The Multilingual T3's RoPE frequencies after llama3 scaling [head_dim / 2].")
        .def("mtl_inputs", [](PyT3& self, std::vector<int32_t> text, std::vector<int32_t> speech,
                              py::object speaker_emb, py::object prompt_tokens, py::object exaggeration,
                              py::object cfg_weight) {
            T3Llama& t3 = llama(*self.impl);
            const ModelFile& mf = *self.model->file;
            T3Conditioning c = conditioning(mf, self->hp().speaker_embed_size, speaker_emb, prompt_tokens, exaggeration);
            c.guidance = cfg_weight_value(mf, cfg_weight) > 0.0f;
            std::vector<float> out = released([&] { return t3.input_embeddings(c, text, speech); });
            const py::ssize_t rows = c.guidance ? 2 : 1, E = self->hp().n_embd;
            return to_numpy(out, {rows, static_cast<py::ssize_t>(out.size()) / (rows * E), E});
        }, py::arg("text_ids"), py::arg("speech_ids"), py::arg("speaker_emb") = py::none(),
           py::arg("prompt_tokens") = py::none(), py::arg("exaggeration") = py::none(),
           py::arg("cfg_weight") = py::none(),
           "The Multilingual prompt's input embeddings [rows, cond_len + len(text) + 1 + len(speech), n_embd] "
           "(prepare_input_embeds, then inference's second start token).")
        .def("generate", [](PyT3& self, std::vector<int32_t> text, int max_tokens, uint64_t seed,
                            py::object temperature, py::object top_k, py::object top_p, py::object repetition_penalty,
                            py::object min_p, py::object speaker_emb, py::object prompt_tokens, py::object cfg_weight,
                            py::object exaggeration) {
            const ModelFile& mf = *self.model->file;
            T3Conditioning c = conditioning(mf, self->hp().speaker_embed_size, speaker_emb, prompt_tokens, exaggeration);
            SamplingParams p = params(mf, temperature, top_k, top_p, repetition_penalty, min_p, cfg_weight);
            return released([&] { return generate_speech_tokens(*self.impl, c, text, p, max_tokens, seed); });
        }, py::arg("text_ids"), py::arg("max_tokens"), py::arg("seed") = 0, py::arg("temperature") = py::none(),
           py::arg("top_k") = py::none(), py::arg("top_p") = py::none(), py::arg("repetition_penalty") = py::none(),
           py::arg("min_p") = py::none(), py::arg("speaker_emb") = py::none(), py::arg("prompt_tokens") = py::none(),
           py::arg("cfg_weight") = py::none(), py::arg("exaggeration") = py::none(),
           "Speech tokens as the reference samples them (T3.inference_turbo, or T3.inference for the "
           "Multilingual T3; top_k=1 is greedy; temporary cache); stop token kept. Sampling values left None "
           "are the model file's defaults.")
        .def("stream", [](py::object self_obj, std::vector<int32_t> text, int max_tokens, uint64_t seed,
                          py::object temperature, py::object top_k, py::object top_p, py::object repetition_penalty,
                          py::object min_p, py::object speaker_emb, py::object prompt_tokens, py::object cache,
                          py::object cfg_weight, py::object exaggeration) {
            PyT3& self = self_obj.cast<PyT3&>();
            const ModelFile& mf = *self.model->file;
            T3Conditioning c = conditioning(mf, self->hp().speaker_embed_size, speaker_emb, prompt_tokens, exaggeration);
            SamplingParams p = params(mf, temperature, top_k, top_p, repetition_penalty, min_p, cfg_weight);
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
        }, py::arg("text_ids"), py::arg("max_tokens"), py::arg("seed") = 0, py::arg("temperature") = py::none(),
           py::arg("top_k") = py::none(), py::arg("top_p") = py::none(), py::arg("repetition_penalty") = py::none(),
           py::arg("min_p") = py::none(), py::arg("speaker_emb") = py::none(), py::arg("prompt_tokens") = py::none(),
           py::arg("cache") = py::none(), py::arg("cfg_weight") = py::none(), py::arg("exaggeration") = py::none(),
           "Starts sampling (runs the prompt) and returns a SpeechTokenStream; the same tokens as generate(). "
           "`cache` (a T3Cache of this T3) is held by the stream until it ends or is closed; None: a private one.")
        .def("next_together", [](py::object self_obj, std::vector<PyTokenStream*> streams, int n) {
            std::vector<SpeechTokenStream*> raw;
            for (PyTokenStream* s : streams) {
                if (!s) throw EngineError("next_together: None is not a stream");
                if (!s->t3_ref.is(self_obj)) throw EngineError("next_together: a stream of another T3");
                raw.push_back(s->stream.get());
            }
            return released([&] { return SpeechTokenStream::next_together(raw, n); });
        }, py::arg("streams"), py::arg("n") = 1,
           "Up to n more tokens of each of these streams (of this T3), their steps taken together: one graph "
           "steps them all. Per stream the tokens its "
           "next(n) would give, up to the rounding of batched products; a list of token lists, in order.");

    py::class_<AlignmentAnalyzer>(m, "AlignmentAnalyzer",
                                  "The Multilingual T3's AlignmentStreamAnalyzer (thresholds from the model file).")
        .def(py::init([](PyT3& t3, int n_text) {
                 const AlignmentParams* p = t3->alignment();
                 if (!p) throw EngineError("the model's T3 (" + t3->hp().arch + ") has no alignment analyzer");
                 if (n_text < 1) throw EngineError("n_text must be >= 1");
                 return std::make_unique<AlignmentAnalyzer>(*p, n_text, t3->hp().stop_speech_token);
             }), py::arg("t3"), py::arg("n_text"))
        .def("step", [](AlignmentAnalyzer& self, F32Array logits, F32Array heads, int32_t last_token) {
            // heads: [n_heads, rows, n_text], the alignment heads' attention over the text.
            if (heads.ndim() != 3) throw EngineError("heads must be [n_heads, rows, n_text], got " + shape_of(heads));
            std::vector<float> l = to_vector(logits), h = to_vector(heads);
            const int n_heads = static_cast<int>(heads.shape(0)), rows = static_cast<int>(heads.shape(1));
            if (rows < 1 || l.empty()) throw EngineError("empty logits or attention");
            const bool forced = self.step(l, AlignmentAnalyzer::head_mean(h, n_heads), rows, last_token);
            return py::make_tuple(to_numpy(l), forced);
        }, py::arg("logits"), py::arg("heads"), py::arg("last_token"),
           "One step: (logits as the analyzer leaves them, whether it forced the stop token).")
        .def_property_readonly("text_position", &AlignmentAnalyzer::text_position)
        .def_property_readonly("complete", &AlignmentAnalyzer::complete)
        .def_property_readonly("suppressed", &AlignmentAnalyzer::suppressed);

    m.def("apply_guidance", [](F32Array cond, F32Array uncond, float cfg_weight) {
        if (cond.size() != uncond.size()) throw EngineError("cond and uncond logits differ in size");
        std::vector<float> c = to_vector(cond), u = to_vector(uncond);
        apply_guidance(c.data(), u.data(), c.size(), cfg_weight);
        return to_numpy(c);
    }, py::arg("cond"), py::arg("uncond"), py::arg("cfg_weight"), "cond + w * (cond - uncond) in float32.");

    m.def("sampler_process_mtl", [](F32Array logits, I32Array history, float temperature, float top_p,
                                    float repetition_penalty, float min_p, int top_k) {
        SamplingParams p = params(temperature, top_k, top_p, repetition_penalty, min_p);
        p.validate_mtl();
        std::vector<float> s = to_vector(logits);
        std::vector<int32_t> h = to_vector(history);
        released([&] { process_logits_mtl(s, h, p); });
        return to_numpy(s);
    }, py::arg("logits"), py::arg("history"), py::arg("temperature"), py::arg("top_p"),
       py::arg("repetition_penalty"), py::arg("min_p"), py::arg("top_k") = 0,
       "The Multilingual processors (repetition penalty, temperature, min-p, top-p) on one row of logits.");

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
