// Python bindings of S3Gen's token encoder (the `s3gen_encode` parity seam).
#include <pybind11/stl.h>

#include "bindings/helpers.h"
#include "s3gen/s3gen_encoder.h"

namespace py = pybind11;
using namespace cbs;

void bind_s3gen(py::module_& m) {
    py::class_<S3GenEncoder::Prefix, std::shared_ptr<S3GenEncoder::Prefix>>(
        m, "S3GenEncoderPrefix", "a stream's cached encoder prefix (S3GenEncoder.make_prefix)")
        .def_property_readonly("tokens", [](const S3GenEncoder::Prefix& p) { return p.tokens; })
        .def_property_readonly("mu", [](const S3GenEncoder::Prefix& p) {
            return to_numpy(p.mu, {p.n_mels, static_cast<py::ssize_t>(p.mu.size()) / p.n_mels});
        }, "the prompt's mu [n_mels, frames]");
    using PyS3GenEncoder = Component<S3GenEncoder>;
    py::class_<PyS3GenEncoder>(m, "S3GenEncoder", "S3Gen token encoder + projection (mu for the CFM).")
        .def(py::init(&build_on_backend<S3GenEncoder>), py::arg("model"))
        .def("encode", [](PyS3GenEncoder& self, const I32Array& tokens) {
            std::vector<int32_t> t = to_vector(tokens);
            std::vector<float> mu = compute(self, [&](S3GenEncoder& enc) { return enc.encode(t); });
            const py::ssize_t n_mels = self->n_mels();
            return to_numpy(mu, {n_mels, static_cast<py::ssize_t>(mu.size()) / n_mels});
        }, py::arg("tokens"), "mu [n_mels, 2 x len(tokens)] for prompt + speech tokens.")
        .def("make_prefix", [](PyS3GenEncoder& self, const I32Array& prompt) {
            std::vector<int32_t> t = to_vector(prompt);
            return compute(self, [&](S3GenEncoder& enc) { return enc.make_prefix(t); });
        }, py::arg("prompt"),
           "a stream's cached prefix: the voice prompt's tokens encoded alone (their attention sees only the "
           "prompt), its keys, values, convolution context and mu kept")
        .def("encode_after_prefix", [](PyS3GenEncoder& self, const S3GenEncoder::Prefix& prefix, const I32Array& tokens) {
            std::vector<int32_t> t = to_vector(tokens);
            std::vector<float> mu = compute(self, [&](S3GenEncoder& enc) { return enc.encode_after_prefix(prefix, t); });
            const py::ssize_t n_mels = self->n_mels();
            return to_numpy(mu, {n_mels, static_cast<py::ssize_t>(mu.size()) / n_mels});
        }, py::arg("prefix"), py::arg("tokens"), "mu [n_mels, 2 x len(tokens)] for tokens after the prefix")
        .def("reserve", [](PyS3GenEncoder& self, int n_tokens) {
            return compute(self, [&](S3GenEncoder& enc) { return enc.reserve(n_tokens); });
        }, py::arg("n_tokens"),
             "Readies inputs of up to n_tokens (prompt + speech): the position table and, on a device, the "
             "compute buffers, so that such an input allocates nothing. Returns the device buffer's bytes (0: CPU).");
}
