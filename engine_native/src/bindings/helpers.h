// The one pattern every binding file follows:
//  - a loaded model is a PyModel (backend + file); a component keeps a reference to the
//    Python ModelFile object so the weights outlive it (Component<T>);
//  - constructors build the native object with the GIL released (build<T>());
//  - compute calls run with the GIL released and one at a time per component
//    (compute(), locking the component's mutex: its graph allocator is shared);
//  - arrays cross as numpy buffers (F32Array / I32Array in, to_numpy() out), never
//    element by element.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/errors.h"
#include "core/model_file.h"
#include "core/options.h"

namespace cbs {

namespace py = pybind11;

// f() with the GIL released when this thread holds it (and the interpreter is not shutting
// down), else plainly. For destructors: freeing a model's buffers takes a noticeable time
// (tens of ms and more), which must not stop the process's other Python threads (the GUI's).
template <class F>
void without_gil(F&& f) {
#if PY_VERSION_HEX >= 0x030D0000
    const bool finalizing = Py_IsFinalizing();
#else
    const bool finalizing = _Py_IsFinalizing();
#endif
    if (!finalizing && PyGILState_Check()) {
        py::gil_scoped_release release;
        f();
    } else {
        f();
    }
}

using F32Array = py::array_t<float, py::array::c_style | py::array::forcecast>;
using I32Array = py::array_t<int32_t, py::array::c_style | py::array::forcecast>;

// The Python-side handle of a loaded model: the backend and the file whose weights it holds.
// `abort` stops the graph computation in flight on a CPU backend (checked by ggml between
// graph nodes, core/graph_runner.cpp turns it into CancelledError): Engine arms it for the
// stream whose S3Gen / HiFT pass is running, so Stop frees the engine within a node.
struct PyModel {
    BackendPtr backend;
    BackendPtr cpu;  // the CPU backend when `backend` is another device (else null)
    std::unique_ptr<ModelFile> file;
    std::atomic<bool> abort{false};
    // T3's own backend on the model's device (a T3 built with threads > 0): T3 samples a
    // stream's next tokens while S3Gen renders the last ones, on the CPU each on its own thread
    // count, on a GPU each with its own context (ggml-cuda's serves one thread at a time); its
    // own abort flag, so Stop of one generation's S3Gen pass never aborts another's T3 prompt.
    BackendPtr t3_backend;
    std::atomic<bool> t3_abort{false};

    ~PyModel() {
        without_gil([this] {
            t3_backend.reset();
            file.reset();
            cpu.reset();
            backend.reset();
        });
    }
};

template <class T>
struct Component {
    py::object model_ref;  // keeps the weights alive
    PyModel* model = nullptr;
    std::unique_ptr<T> impl;
    std::mutex mutex;  // one computation at a time

    ~Component() { without_gil([this] { impl.reset(); }); }  // model_ref goes after, with the GIL

    T* operator->() { return impl.get(); }
    const T* operator->() const { return impl.get(); }
};

// A Component whose native object make(PyModel&) builds with the GIL released.
template <class T, class Make>
std::unique_ptr<Component<T>> build(const py::object& model, Make&& make) {
    auto c = std::make_unique<Component<T>>();
    c->model_ref = model;
    c->model = model.cast<PyModel*>();
    py::gil_scoped_release release;
    c->impl = make(*c->model);
    return c;
}

// The usual constructor: T(file, backend).
template <class T>
std::unique_ptr<Component<T>> build_on_backend(const py::object& model) {
    return build<T>(model, [](PyModel& m) { return std::make_unique<T>(*m.file, m.backend.get()); });
}

// T(file, the CPU backend): a component whose kernels run on the CPU only (HiFT's).
template <class T>
std::unique_ptr<Component<T>> build_on_cpu(const py::object& model) {
    return build<T>(model, [](PyModel& m) {
        return std::make_unique<T>(*m.file, m.cpu ? m.cpu.get() : m.backend.get());
    });
}

// The usual constructor of a host-only component: T(file).
template <class T>
std::unique_ptr<Component<T>> build_on_host(const py::object& model) {
    return build<T>(model, [](PyModel& m) { return std::make_unique<T>(*m.file); });
}

// f() with the GIL released and the component's mutex held.
template <class T, class F>
auto compute(Component<T>& c, F&& f) {
    py::gil_scoped_release release;
    std::lock_guard<std::mutex> lock(c.mutex);
    return f(*c.impl);
}

// f() with the GIL released.
template <class F>
auto released(F&& f) {
    py::gil_scoped_release release;
    return f();
}

// A vector as a new numpy array of `shape` (default: 1-D), one memcpy.
template <class V>
py::array_t<V> to_numpy(const std::vector<V>& v, std::vector<py::ssize_t> shape = {}) {
    if (shape.empty()) shape = {static_cast<py::ssize_t>(v.size())};
    py::array_t<V> out(shape);
    if (!v.empty()) std::memcpy(out.mutable_data(), v.data(), v.size() * sizeof(V));
    return out;
}

// A numpy buffer's values as a vector (one copy, with the GIL held).
template <class V>
std::vector<V> to_vector(const py::array_t<V, py::array::c_style | py::array::forcecast>& a) {
    return std::vector<V>(a.data(), a.data() + a.size());
}

// The values of an optional array argument (None: empty).
template <class V>
std::vector<V> optional_vector(const py::object& o) {
    if (o.is_none()) return {};
    return to_vector<V>(o.cast<py::array_t<V, py::array::c_style | py::array::forcecast>>());
}

// "(3, 4)": a numpy shape for messages.
inline std::string shape_of(const py::array& a) {
    std::string s = "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
    return s + (a.ndim() == 1 ? ",)" : ")");
}

// A 1-D array (mono audio and the like); EngineError naming `what` otherwise.
inline void require_1d(const py::array& a, const char* what) {
    if (a.ndim() != 1) throw EngineError(std::string(what) + " must be a 1-D array, got shape " + shape_of(a));
}

}  // namespace cbs
