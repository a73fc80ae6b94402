#include "core/options.h"

#include <cmath>
#include <cstdio>

#include "core/errors.h"

namespace cbs {

namespace {

constexpr int64_t kSeedMax = INT64_MAX - 999;  // 2^63 - 1000

OptionSpec f(const char* name, double min, double max, bool min_open, bool max_open, const char* doc) {
    return {name, false, min, max, 0, 0, min_open, max_open, doc};
}
OptionSpec i(const char* name, int64_t min, int64_t max, const char* doc) {
    return {name, true, static_cast<double>(min), static_cast<double>(max), min, max, false, false, doc};
}

}  // namespace

const std::vector<OptionSpec>& option_specs() {
    static const std::vector<OptionSpec> specs = {
        f("temperature", 0.0, 5.0, true, false, "Sampling temperature: logits are divided by it before the filters."),
        i("top_k", 1, 100000, "Keep only the k most likely speech tokens."),
        f("top_p", 0.0, 1.0, true, false, "Keep the smallest set of tokens whose probability reaches top_p."),
        f("repetition_penalty", 0.0, 10.0, true, false, "Divide the logits of tokens already spoken by this factor."),
        f("min_p", 0.0, 1.0, false, false, "Drop tokens below min_p times the top token's probability (0: off)."),
        i("cfm_steps", 1, 100, "Flow-matching solver steps of S3Gen (more: slower, smoother)."),
        i("max_tokens", 1, 100000, "Most speech tokens per sentence (the engine narrows it to the model's context)."),
        f("exaggeration", 0.0, 2.0, false, false, "Multilingual: emotion exaggeration of T3's conditioning (0.5: neutral; higher: more expressive, faster)."),
        f("cfg_weight", 0.0, 2.0, false, false, "Multilingual: classifier-free guidance weight of T3 (0: off, one pass a token; lower: slower pace)."),
        i("seed", 0, kSeedMax, "Seed of the sampler and the vocoder's noise."),
        f("prompt_seconds", 1.0, 60.0, false, false, "Use only the last N seconds of the voice's S3Gen prompt (faster, a little less likeness)."),
        i("first_chunk_tokens", 1, 1000, "Speech tokens in a sentence's first audio chunk (lower: earlier sound)."),
        i("chunk_tokens", 1, 1000, "Speech tokens in each later audio chunk."),
        i("threads", 1, 256, "CPU threads of the engine."),
    };
    return specs;
}

// A number as an ostream writes it (%g, 6 digits), without iostreams: a library linked
// with its own static C++ runtime elsewhere in the process can leave a stream's locale
// half set up (seen on the GPU machine: a crash formatting a double).
static std::string num(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
}

std::string OptionSpec::range() const {
    std::string s = min_open ? "(" : "[";
    s += integer ? std::to_string(imin) + ", " + std::to_string(imax) : num(min) + ", " + num(max);
    return s + (max_open ? ")" : "]");
}

const OptionSpec& option_spec(const std::string& name) {
    for (const OptionSpec& s : option_specs())
        if (name == s.name) return s;
    throw EngineError("unknown option '" + name + "'");
}

static void out_of_range(const OptionSpec& s, const std::string& value) {
    throw ParameterError(std::string(s.name) + " must be in " + s.range() + ", got " + value);
}

void check_option(const std::string& name, double v) {
    const OptionSpec& s = option_spec(name);
    if (!std::isfinite(v)) out_of_range(s, num(v));
    if (s.integer) {
        if (v != std::floor(v) || v < static_cast<double>(s.imin) || v > static_cast<double>(s.imax))
            out_of_range(s, num(v));
        return;
    }
    if ((s.min_open ? v <= s.min : v < s.min) || (s.max_open ? v >= s.max : v > s.max)) out_of_range(s, num(v));
}

void check_option(const std::string& name, float v) { check_option(name, static_cast<double>(v)); }

void check_option(const std::string& name, int64_t v) {
    const OptionSpec& s = option_spec(name);
    if (!s.integer) return check_option(name, static_cast<double>(v));
    if (v < s.imin || v > s.imax) out_of_range(s, std::to_string(v));
}

void check_option(const std::string& name, int v) { check_option(name, static_cast<int64_t>(v)); }

void check_option(const std::string& name, uint64_t v) {
    if (v > static_cast<uint64_t>(INT64_MAX)) out_of_range(option_spec(name), std::to_string(v));
    check_option(name, static_cast<int64_t>(v));
}

}  // namespace cbs
