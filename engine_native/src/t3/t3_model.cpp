#include "t3/t3_model.h"

#include <string>

#include "t3/t3_gpt2.h"
#include "t3/t3_llama.h"

namespace cbs {

std::unique_ptr<T3Model> make_t3(const ModelFile& mf, ggml_backend_t backend) {
    const std::string arch = mf.get_string("chatterbox.t3.arch");
    if (arch == "gpt2") return std::make_unique<T3Gpt2>(mf, backend);
    if (arch == "llama") return std::make_unique<T3Llama>(mf, backend);
    throw ModelError(mf.path() + ": T3 architecture '" + arch + "' is not supported by this engine (known: gpt2, llama)");
}

}  // namespace cbs
