// The one table of synthesis and engine options: name, kind, range and a line of
// documentation. The C++ validation (sampler, backend threads, ...) checks values
// against it through check_option(); Python reads it through _core.option_specs().
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cbs {

struct OptionSpec {
    const char* name;
    bool integer;         // kind "int" (else "float")
    double min, max;      // float bounds
    int64_t imin, imax;   // int bounds (exact for the seed's 2^63 - 1000)
    bool min_open, max_open;
    const char* doc;
    const char* kind() const { return integer ? "int" : "float"; }
    // "(0, 5]", "[1, 256]"
    std::string range() const;
};

const std::vector<OptionSpec>& option_specs();
// The named option's spec; throws EngineError for a name not in the table.
const OptionSpec& option_spec(const std::string& name);

// Throws ParameterError naming the option and its range when value is outside it
// (or not finite, or not an integer for an int option).
void check_option(const std::string& name, double value);
void check_option(const std::string& name, float value);
void check_option(const std::string& name, int value);
void check_option(const std::string& name, int64_t value);
void check_option(const std::string& name, uint64_t value);

}  // namespace cbs
