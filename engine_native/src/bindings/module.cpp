// pybind11 module engine_native._core: the only bridge between Python and the engine.
#include <cstring>

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "core/backend.h"
#include "core/model_file.h"
#include "bindings/helpers.h"
#include "core/options.h"
#include "core/system_info.h"
#include "cpu/host_rates.h"
#include "cpu/amx_gemm.h"
#include "cpu/blas.h"
#include "cpu/products.h"
#include "cpu/q4_matmul.h"
#include "cpu/q8_gemm.h"
#include "cpu/vnni_gemm.h"

namespace py = pybind11;

namespace {

// Raises engine_native.errors.<name>(message); the class is looked up when the error
// happens (errors.py does not import this module, so there is no import cycle).
// The message as text: a name or value quoted from a file may hold bytes that are not UTF-8,
// which PyErr_SetString would fail to decode (the caller then got a UnicodeDecodeError, not
// the engine's error).
void raise_engine_error(const char* name, const char* message) {
    py::object text = py::reinterpret_steal<py::object>(
        PyUnicode_DecodeUTF8(message, static_cast<Py_ssize_t>(std::strlen(message)), "backslashreplace"));
    try {
        py::object cls = py::module_::import("engine_native.errors").attr(name);
        PyErr_SetObject(cls.ptr(), text.ptr());
    } catch (py::error_already_set& e) {
        PyErr_SetObject(PyExc_RuntimeError, text.ptr());  // engine_native.errors itself is broken
    }
}

// Every native exception reaches Python as an engine_native.errors.EngineError subclass.
void register_errors(py::module_& m) {
    py::register_exception_translator([](std::exception_ptr p) {
        try {
            if (p) std::rethrow_exception(p);
        } catch (const py::error_already_set&) {
            throw;  // a Python error raised inside a call: pybind11 restores it
        } catch (const py::builtin_exception&) {
            throw;  // pybind11's own (argument conversion and the like)
        } catch (const cbs::ModelError& e) {
            raise_engine_error("ModelError", e.what());
        } catch (const cbs::ParameterError& e) {
            raise_engine_error("ParameterError", e.what());
        } catch (const cbs::VoiceError& e) {
            raise_engine_error("VoiceError", e.what());
        } catch (const cbs::CancelledError& e) {
            raise_engine_error("Cancelled", e.what());
        } catch (const cbs::DeviceError& e) {
            raise_engine_error("DeviceError", e.what());
        } catch (const cbs::BusyError& e) {
            raise_engine_error("EngineBusyError", e.what());
        } catch (const std::bad_alloc&) {
            raise_engine_error("OutOfMemoryError", "out of memory");
        } catch (const std::exception& e) {
            raise_engine_error("EngineError", e.what());
        }
    });
    try {  // _core.EngineError: the same class, for code that looks for it here
        m.attr("EngineError") = py::module_::import("engine_native.errors").attr("EngineError");
    } catch (py::error_already_set&) {
    }
}

py::list devices_list(const std::vector<cbs::DeviceInfo>& devices) {
    py::list out;
    for (const cbs::DeviceInfo& i : devices) {
        py::dict d;
        d["id"] = i.id;
        d["name"] = i.name;
        d["backend"] = i.backend;
        d["description"] = i.description;
        d["type"] = i.type;
        d["memory_free"] = i.memory_free;
        d["memory_total"] = i.memory_total;
        out.append(d);
    }
    return out;
}

}  // namespace

void bind_text(pybind11::module_& m);
void bind_mtl(pybind11::module_& m);

void bind_t3(py::module_& m);
void bind_hift(py::module_& m);
void bind_s3gen(py::module_& m);
void bind_features(py::module_& m);
void bind_cfm(py::module_& m);
void bind_s3tok(py::module_& m);
void bind_campplus(py::module_& m);
void bind_watermark(py::module_& m);
namespace cbs {
void bind_products(py::module_& m);
}

PYBIND11_MODULE(_core, m) {
    m.doc() = "Chatterbox Studio native engine (ggml)";

    register_errors(m);

    using Model = cbs::PyModel;
    py::class_<Model>(m, "ModelFile", "A Chatterbox GGUF model loaded into a ggml backend buffer.")
        .def(py::init([](const std::string& path, const std::string& device, int threads,
                         const std::vector<std::string>& lazy) {
                 auto model = std::make_unique<Model>();
                 py::gil_scoped_release release;
                 const int n_threads = threads > 0 ? threads : cbs::default_thread_count();
                 model->backend = cbs::make_backend(device, n_threads);
                 // The CPU backend for what stays on the host (HiFT's CPU kernels) when the
                 // device is another one.
                 model->cpu = cbs::backend_is_cpu(model->backend.get()) ? nullptr : cbs::make_backend("cpu", n_threads);
                 for (ggml_backend_t b : {model->backend.get(), model->cpu.get()})
                     if (b) cbs::set_abort_callback(b, [](void* flag) {
                         return static_cast<std::atomic<bool>*>(flag)->load(std::memory_order_relaxed);
                     }, &model->abort);
                 model->file = std::make_unique<cbs::ModelFile>(path, model->backend.get(), lazy);
                 return model;
             }),
             py::arg("path"), py::arg("device") = "cpu", py::arg("threads") = 0, py::arg("lazy") = std::vector<std::string>{},
             "Loads a model onto `device` (auto, cpu, cuda:0, vulkan:0, ...; see devices()). `lazy`: tensor name "
             "prefixes read only when a component first asks for them (beside the cloning encoders').")
        .def_property_readonly("path", [](const Model& m) { return m.file->path(); })
        .def_property_readonly("variant", [](const Model& m) { return m.file->variant(); })
        .def_property_readonly("backend", [](const Model& m) { return std::string(ggml_backend_name(m.backend.get())); })
        .def_property_readonly("device", [](const Model& m) { return cbs::device_id(m.backend.get()); },
                               "The device the weights and graphs are on (\"cpu\", \"cuda:0\", ...).")
        .def("abort_compute", [](Model& m, bool on) { m.abort.store(on); }, py::arg("on") = true,
             "on: the computation in flight (and any started) stops at its next graph node with Cancelled; "
             "off: computations run again. Engine arms it only for the generation being cancelled.")
        .def("set_threads", [](Model& m, int n) {
            if (n < 1) throw cbs::EngineError("threads must be >= 1");
            cbs::set_threads(m.backend.get(), n);
        }, py::arg("n"), "The CPU backend's thread count for the next computations (no-op on other devices).")
        .def_property_readonly("buffer_bytes", [](const Model& m) { return m.file->buffer_bytes(); })
        .def("release_lazy", [](Model& m) { return m.file->release_lazy(); }, py::call_guard<py::gil_scoped_release>(),
             "Frees the cloning encoders' weights (loaded again on next use); returns the bytes freed. Only "
             "while no component built on them (S3Tokenizer, CampPlus, VoiceEncoder) is alive.")
        .def("tensor_names", [](const Model& m) {
            std::vector<std::string> names;
            for (auto& [name, _] : m.file->tensors()) names.push_back(name);
            return names;
        })
        .def("tensor_info", [](const Model& m, const std::string& name) {
            const ggml_tensor* t = m.file->tensor(name);
            std::vector<int64_t> ne;
            for (int i = 0; i < ggml_n_dims(t); ++i) ne.push_back(t->ne[i]);
            return py::make_tuple(std::string(ggml_type_name(t->type)), ne);
        }, "(ggml type name, ne) of a tensor; ne is ggml's order (fastest dimension first).")
        .def("tensor_f32", [](const Model& m, const std::string& name) {
            const ggml_tensor* t = m.file->tensor(name);
            std::vector<float> data = m.file->read_f32(t);
            std::vector<py::ssize_t> shape;
            for (int i = ggml_n_dims(t) - 1; i >= 0; --i) shape.push_back(t->ne[i]);
            py::array_t<float> out(shape);
            std::copy(data.begin(), data.end(), out.mutable_data());
            return out;
        }, "A tensor's values as float32 (dequantised), numpy shape = reversed ne.")
        .def("joins", [](const Model& m, const std::vector<std::string>& names) {
            std::vector<ggml_tensor*> parts;
            for (const std::string& n : names) parts.push_back(m.file->tensor(n));
            return m.file->joined(parts) != nullptr;
        }, py::arg("names"), "Whether these weights lie side by side as one (ModelFile::joined; tests).")
        .def("get_int", [](const Model& m, const std::string& k) { return m.file->get_int(k); })
        .def("get_float", [](const Model& m, const std::string& k) { return m.file->get_float(k); })
        .def("get_bool", [](const Model& m, const std::string& k) { return m.file->get_bool(k); })
        .def("get_string", [](const Model& m, const std::string& k) { return m.file->get_string(k); })
        .def("get_int_array", [](const Model& m, const std::string& k) { return m.file->get_int_array(k); })
        .def("has_key", [](const Model& m, const std::string& k) { return m.file->has_key(k); });

    m.def("option_specs", [] {
        py::list out;
        for (const cbs::OptionSpec& s : cbs::option_specs()) {
            py::dict d;
            d["name"] = s.name;
            d["kind"] = s.kind();
            if (s.integer) {
                d["min"] = s.imin;
                d["max"] = s.imax;
            } else {
                d["min"] = s.min;
                d["max"] = s.max;
            }
            d["min_open"] = s.min_open;
            d["max_open"] = s.max_open;
            d["doc"] = s.doc;
            out.append(d);
        }
        return out;
    }, "The engine's options table: [{name, kind ('int'/'float'), min, max, min_open, max_open, doc}].");

    m.def("ggml_version", [] { return cbs::system_info().ggml_version; },
          "Version of the ggml library compiled into the engine.");

    m.def("system_info", [] {
        cbs::SystemInfo s = cbs::system_info();
        py::dict d;
        d["ggml_version"] = s.ggml_version;
        d["cpu_features"] = s.cpu_features;
        d["cpu_variant"] = s.cpu_variant;
        d["backend_dir"] = s.backend_dir;
        d["backends"] = s.backends;
        d["devices"] = devices_list(s.devices);
        d["default_threads"] = s.default_threads;
        d["blas"] = cbs::have_blas();
        d["blas_core"] = cbs::blas_core();
        d["q4_kernel"] = cbs::q4_packed_available();
        d["q4_kernel_isa"] = std::string(cbs::q4_kernel_isa());
        d["q4_kernel_max_columns"] = cbs::q4_kernel_max_columns();
        // From q4_kernel_max_columns columns on: AMX, the int8 tile, or sgemm on the converted weights.
        d["t3_prompt_products"] = cbs::amx_available()           ? std::string("AMX")
                                  : cbs::int8_tile_available() ? "int8 tile, " + std::string(cbs::int8_tile_isa())
                                                               : std::string("sgemm");
        d["amx"] = cbs::amx_available();
        d["int16_products"] = cbs::amx_available() ? std::string() : std::string(cbs::int16_products_isa());
        return d;
    }, "ggml version, CPU features and variant, loaded backends and devices, default thread count, whether the "
       "CPU's f32 matrix products use OpenBLAS (and its kernels, blas_core), whether T3's Q4_0 products on the CPU use the engine's own kernel (and its instruction set, q4_kernel_isa: "
       "'AVX-512 VNNI', 'AVX2' or '') and how a prompt's products from q4_kernel_max_columns columns run "
       "(t3_prompt_products: 'AMX', 'int8 tile, AVX-512 VNNI', 'int8 tile, AVX2' or 'sgemm'), whether a quantised model's S3Gen products "
       "run on AMX tiles (amx) or, without AMX, its Q4_0 products in int16 (int16_products: 'AVX-512 VNNI', "
       "'AVX-VNNI', 'AVX2' or '').");

    m.def("host_read_gbps", &cbs::host_read_gbps, py::arg("threads"), py::arg("megabytes") = 512,
          py::arg("rounds") = 3, py::call_guard<py::gil_scoped_release>(),
          "This host's sustained read bandwidth (GB/s) with `threads` threads reading a buffer of `megabytes` MiB, "
          "best of `rounds` (cpu/host_rates.h).");
    m.def("host_f32_fma_gmacs", &cbs::host_f32_fma_gmacs, py::arg("threads"), py::arg("lanes"), py::arg("rounds") = 3,
          py::call_guard<py::gil_scoped_release>(),
          "f32 multiply-adds a second (1e9) that `threads` threads retire in registers of `lanes` floats (16: AVX-512, "
          "8: AVX2 with FMA), best of `rounds`; 0 where the CPU lacks them.");

    m.def("devices", [] { return devices_list(cbs::list_devices()); },
          "Every device present, the fastest first: [{id, name, backend, description, type, memory_free, "
          "memory_total}] (auto picks the first).");

    bind_t3(m);
    bind_hift(m);
    bind_s3gen(m);
    bind_features(m);
    bind_cfm(m);
    bind_s3tok(m);
    bind_campplus(m);
    bind_watermark(m);
    cbs::bind_products(m);

    bind_text(m);
    bind_mtl(m);

#ifdef CBS_VERSION
    m.attr("__version__") = CBS_VERSION;
#endif
}
