// Python bindings of the text front end: punc_norm and the GPT-2 tokenizer.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "core/model_file.h"
#include "text/text_bpe.h"
#include "text/text_norm.h"

namespace py = pybind11;

void bind_text(py::module_& m) {
    m.def("punc_norm", [](const std::string& text) { return cbs::punc_norm(text); }, py::arg("text"),
          "chatterbox.tts_turbo.punc_norm: punctuation clean-up applied before tokenising.");

    py::class_<cbs::Gpt2Tokenizer>(m, "Gpt2Tokenizer",
                                   "The model's GPT-2 byte-level BPE tokenizer (reads only the GGUF metadata).")
        .def(py::init([](const std::string& path) {
                 py::gil_scoped_release release;
                 cbs::ModelFile meta(path, cbs::ModelFile::MetadataOnly{});
                 return std::make_unique<cbs::Gpt2Tokenizer>(meta);
             }),
             py::arg("path"))
        .def("encode", [](const cbs::Gpt2Tokenizer& t, const std::string& text) {
                 std::vector<int32_t> ids;
                 {
                     py::gil_scoped_release release;
                     ids = t.encode(text);
                 }
                 py::array_t<int32_t> out(static_cast<py::ssize_t>(ids.size()));
                 if (!ids.empty()) std::copy(ids.begin(), ids.end(), out.mutable_data());
                 return out;
             },
             py::arg("text"), "Token ids (int32) of a str (or of UTF-8 bytes); no BOS/EOS added.")
        .def("decode", [](const cbs::Gpt2Tokenizer& t, const std::vector<int32_t>& ids) {
                 const std::string s = t.decode(ids);
                 PyObject* o = PyUnicode_DecodeUTF8(s.data(), static_cast<Py_ssize_t>(s.size()), "replace");
                 if (!o) throw py::error_already_set();
                 return py::reinterpret_steal<py::str>(o);
             },
             py::arg("ids"), "The text of token ids (bytes that are not UTF-8 become U+FFFD), for debugging.")
        .def("decode_bytes", [](const cbs::Gpt2Tokenizer& t, const std::vector<int32_t>& ids) {
                 return py::bytes(t.decode(ids));
             },
             py::arg("ids"), "The exact bytes of token ids.")
        .def_property_readonly("vocab_size", &cbs::Gpt2Tokenizer::vocab_size)
        .def_property_readonly("bos_id", &cbs::Gpt2Tokenizer::bos_id)
        .def_property_readonly("eos_id", &cbs::Gpt2Tokenizer::eos_id);
}
