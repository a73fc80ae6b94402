// Python bindings of the Multilingual (MTL) pieces: punc_norm_mtl and the grapheme tokenizer.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "core/model_file.h"
#include "text/grapheme_tokenizer.h"
#include "text/text_norm.h"

namespace py = pybind11;

namespace {

py::array_t<int32_t> to_array(const std::vector<int32_t>& ids) {
    py::array_t<int32_t> out(static_cast<py::ssize_t>(ids.size()));
    if (!ids.empty()) std::copy(ids.begin(), ids.end(), out.mutable_data());
    return out;
}

}  // namespace

void bind_mtl(py::module_& m) {
    m.def("punc_norm_mtl", [](const std::string& text) { return cbs::punc_norm_mtl(text); }, py::arg("text"),
          "chatterbox.mtl_tts.punc_norm.");
    m.def("mtl_py_lower", [](const std::string& text) { return cbs::mtl_text::py_lower(text); }, py::arg("text"),
          "Python's str.lower() (full mapping, Final_Sigma), Unicode 14.");
    m.def("mtl_nfkd", [](const std::string& text) { return cbs::mtl_text::nfkd(text); }, py::arg("text"),
          "unicodedata.normalize('NFKD', text), Unicode 14.");

    py::class_<cbs::GraphemeTokenizer>(m, "GraphemeTokenizer",
                                       "The Multilingual model's grapheme tokenizer (reads only the GGUF metadata).")
        .def(py::init([](const std::string& path) {
                 py::gil_scoped_release release;
                 cbs::ModelFile meta(path, cbs::ModelFile::MetadataOnly{});
                 return std::make_unique<cbs::GraphemeTokenizer>(meta);
             }),
             py::arg("path"))
        .def("normalize", [](const cbs::GraphemeTokenizer& t, const std::string& text, const std::string& lang) {
                 py::gil_scoped_release release;
                 return t.normalize(text, lang);
             },
             py::arg("text"), py::arg("lang") = "",
             "lower + NFKD + the language step (zh Cangjie, ko); ja's pykakasi step is Python's.")
        .def("encode", [](const cbs::GraphemeTokenizer& t, const std::string& text, const std::string& lang) {
                 std::vector<int32_t> ids;
                 {
                     py::gil_scoped_release release;
                     ids = t.encode(text, lang);
                 }
                 return to_array(ids);
             },
             py::arg("text"), py::arg("lang") = "",
             "Ids of already normalized text: [lang] tag, [SPACE], added tokens, Whitespace, BPE. No SOT/EOT.")
        .def("cangjie", &cbs::GraphemeTokenizer::cangjie, py::arg("text"))
        .def("token", &cbs::GraphemeTokenizer::token, py::arg("id"))
        .def_property_readonly("vocab_size", &cbs::GraphemeTokenizer::vocab_size)
        .def_property_readonly("start_id", &cbs::GraphemeTokenizer::start_id)
        .def_property_readonly("stop_id", &cbs::GraphemeTokenizer::stop_id)
        .def_property_readonly("cangjie_size", &cbs::GraphemeTokenizer::cangjie_size)
        .def_property_readonly("languages", &cbs::GraphemeTokenizer::languages);
}
