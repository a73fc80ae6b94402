// Test seams for the CPU's matrix products (cpu/products.h matmul, cpu/attention.h) in each of
// their modes, through a real graph on a CPU backend with the engine's own thread split.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "bindings/helpers.h"
#include "core/graph_runner.h"
#include "cpu/amx_gemm.h"
#include "cpu/attention.h"
#include "cpu/products.h"
#include "cpu/q4_matmul.h"
#include "cpu/vnni_gemm.h"

namespace cbs {

namespace {

CpuProducts products_named(const std::string& how) {
    if (how == "exact") return CpuProducts::exact;
    if (how == "fast") return CpuProducts::fast;
    if (how == "ggml") return CpuProducts::ggml;
    if (how == "device_default") return CpuProducts::device_default;
    throw ParameterError("products must be 'exact', 'fast', 'ggml' or 'device_default', not '" + how + "'");
}

py::array_t<float> to_array(const std::vector<float>& v, std::vector<py::ssize_t> shape) {
    py::array_t<float> a(shape);
    std::memcpy(a.mutable_data(), v.data(), v.size() * sizeof(float));
    return a;
}

// x [N, K] times the weight w [M, K] (stored as `type`: f32, f16, q4_0, or q4_0_packed: Q4_0 in
// T3's packed layout, cpu/q4_matmul.h) -> [N, M].
py::array_t<float> linear_product(F32Array w, F32Array x, const std::string& type, const std::string& how, int threads) {
    if (w.ndim() != 2 || x.ndim() != 2 || w.shape(1) != x.shape(1) || w.shape(0) < 1 || x.shape(0) < 1)
        throw ParameterError("w [M, K] and x [N, K]");
    const bool packed = type == "q4_0_packed";
    const ggml_type t = type == "f32" ? GGML_TYPE_F32 : type == "f16" ? GGML_TYPE_F16
                        : type == "q4_0" || packed                   ? GGML_TYPE_Q4_0
                                                                     : GGML_TYPE_COUNT;
    if (t == GGML_TYPE_COUNT) throw ParameterError("type must be f32, f16, q4_0 or q4_0_packed");
    const int64_t M = w.shape(0), K = w.shape(1), N = x.shape(0);
    if (K % ggml_blck_size(t) != 0) throw ParameterError("K must be a multiple of the type's block");
    std::vector<uint8_t> raw(ggml_row_size(t, K) * M);
    ggml_quantize_chunk(t, w.data(), raw.data(), 0, M, K, nullptr);
    if (packed) {
        std::vector<uint8_t> ggml_layout = raw;
        q4_pack(ggml_layout.data(), raw.data(), M, K);
    }
    BackendPtr backend = make_backend("cpu", threads);
    ggml_init_params params{ggml_tensor_overhead(), nullptr, true};
    std::unique_ptr<ggml_context, void (*)(ggml_context*)> weights(ggml_init(params), ggml_free);
    ggml_tensor* wt = ggml_new_tensor_2d(weights.get(), t, K, M);
    std::unique_ptr<ggml_backend_buffer, void (*)(ggml_backend_buffer_t)> buffer(
        ggml_backend_alloc_ctx_tensors(weights.get(), backend.get()), ggml_backend_buffer_free);
    ggml_backend_tensor_set(wt, raw.data(), 0, raw.size());
    struct Unmark {  // the packed mark goes with the tensor
        const ggml_tensor* t;
        ~Unmark() { q4_mark_packed(t, false); }
    } unmark{wt};
    if (packed) q4_mark_packed(wt, true);
    std::vector<float> out;
    {
        py::gil_scoped_release nogil;
        GraphRunner runner(backend.get());
        ggml_context* ctx = runner.begin();
        GraphInputs in;
        ggml_tensor* xt = in.f32(ctx, std::vector<float>(x.data(), x.data() + N * K), K, N);
        out = runner.compute(matmul(ctx, wt, xt, products_named(how)), in);
    }
    return to_array(out, {N, M});
}

// Builds `build(ctx, input)` on a CPU backend of `threads` threads, input(a) giving an array
// [H, n, D] as a graph input [D, n, H], and computes it (the GIL released).
template <class Build>
std::vector<float> compute_heads(int threads, Build build) {
    BackendPtr backend = make_backend("cpu", threads);
    py::gil_scoped_release nogil;
    GraphRunner runner(backend.get());
    ggml_context* ctx = runner.begin();
    GraphInputs in;
    auto input = [&](F32Array& a) {
        const int64_t H = a.shape(0), n = a.shape(1), D = a.shape(2);
        return ggml_reshape_3d(ctx, in.f32(ctx, std::vector<float>(a.data(), a.data() + H * n * D), D, n * H), D, n, H);
    };
    return runner.compute(build(ctx, input), in);
}

// softmax(q k^T / sqrt(D)) v per head: q [H, Tq, D], k and v [H, Tk, D] -> [Tq, H, D].
py::array_t<float> attention_product(F32Array q, F32Array k, F32Array v, const std::string& how, int threads) {
    if (q.ndim() != 3 || k.ndim() != 3 || v.ndim() != 3 || k.shape(0) != q.shape(0) || v.shape(0) != q.shape(0) ||
        k.shape(2) != q.shape(2) || v.shape(2) != q.shape(2) || v.shape(1) != k.shape(1))
        throw ParameterError("q [H, Tq, D], k and v [H, Tk, D]");
    const CpuProducts mode = products_named(how);
    std::vector<float> out = compute_heads(threads, [&](ggml_context* ctx, auto& input) {
        return attention(ctx, input(q), input(k), input(v), mode);
    });
    return to_array(out, {q.shape(1), q.shape(0), q.shape(2)});
}

// Relative-position attention: q_u, q_v [H, T, D], k, v [H, Tk, D], p [H, Tk + T - 1, D] -> [T, H, D].
py::array_t<float> rel_attention_product(F32Array qu, F32Array qv, F32Array k, F32Array p, F32Array v,
                                         const std::string& how, int threads) {
    for (F32Array* a : {&qu, &qv, &k, &p, &v})
        if (a->ndim() != 3 || a->shape(0) != qu.shape(0) || a->shape(2) != qu.shape(2))
            throw ParameterError("q_u, q_v [H, T, D], k, v [H, Tk, D], p [H, Tk + T - 1, D]");
    const int64_t T = qu.shape(1), Tk = k.shape(1);
    if (qv.shape(1) != T || v.shape(1) != Tk || p.shape(1) != Tk + T - 1)
        throw ParameterError("q_u, q_v [H, T, D], k, v [H, Tk, D], p [H, Tk + T - 1, D]");
    const CpuProducts mode = products_named(how);
    if (!mode.blas()) throw ParameterError("products must be 'exact' or 'fast' (a fused CPU operation)");
    std::vector<float> out = compute_heads(threads, [&](ggml_context* ctx, auto& input) {
        return rel_position_attention(ctx, input(qu), input(qv), input(k), input(p), input(v), mode);
    });
    return to_array(out, {T, qu.shape(0), qu.shape(2)});
}

}  // namespace

void bind_products(py::module_& m) {
    m.def("amx_available", &amx_available,
          "Whether the CPU's fast products run on AMX tiles here (AMX-BF16 present, the tile state granted, "
          "CBS_AMX not 0).");
    m.def("int16_products_available", &int16_products_available,
          "Whether this CPU can run the fast products in int16 (AVX-512 F/BW/VL/VNNI, or AVX2 and FMA, present; "
          "CBS_VNNI not 0); they do where amx_available() is false.");
    m.def("int16_products_isa", [] { return std::string(int16_products_isa()); },
          "The int16 products' form here: 'AVX-512 VNNI', 'AVX-VNNI', 'AVX2' (CBS_VNNI=avxvnni or avx2 forces "
          "one) or ''.");
    m.def("linear_product", &linear_product, py::arg("w"), py::arg("x"), py::arg("type") = "f32",
          py::arg("products") = "exact", py::arg("threads") = 2,
          "x [N, K] times w [M, K] stored as `type` (f32, f16, q4_0) through the engine's CPU product in mode "
          "`products` (exact, fast, ggml) -> [N, M] (tests).");
    m.def("rel_attention_product", &rel_attention_product, py::arg("q_u"), py::arg("q_v"), py::arg("k"), py::arg("p"),
          py::arg("v"), py::arg("products") = "exact", py::arg("threads") = 2,
          "ESPnet relative-position attention through the engine's fused CPU operation in mode `products` "
          "(exact, fast) -> [T, H, D] (tests).");
    m.def("attention_product", &attention_product, py::arg("q"), py::arg("k"), py::arg("v"),
          py::arg("products") = "exact", py::arg("threads") = 2,
          "Full softmax attention per head through the engine's attention in mode `products` (exact, fast; ggml "
          "or device_default: a GPU's form, on the CPU here): q [H, Tq, D], k and v [H, Tk, D] -> [Tq, H, D] (tests).");
}

}  // namespace cbs
