// pybind11 module engine_native._core: the only bridge between Python and the engine.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "system_info.h"

namespace py = pybind11;

PYBIND11_MODULE(_core, m) {
    m.doc() = "Chatterbox Studio native engine (ggml)";

    m.def("ggml_version", [] { return cbs::system_info().ggml_version; },
          "Version of the ggml library compiled into the engine.");

    m.def("system_info", [] {
        cbs::SystemInfo s = cbs::system_info();
        py::dict d;
        d["ggml_version"] = s.ggml_version;
        d["cpu_features"] = s.cpu_features;
        d["backends"] = s.backends;
        py::list devices;
        for (auto& [name, desc] : s.devices) {
            py::dict dev;
            dev["name"] = name;
            dev["description"] = desc;
            devices.append(dev);
        }
        d["devices"] = devices;
        d["default_threads"] = s.default_threads;
        return d;
    }, "ggml version, CPU features, compiled-in backends and devices, default thread count.");

#ifdef CBS_VERSION
    m.attr("__version__") = CBS_VERSION;
#endif
}
