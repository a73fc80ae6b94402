// Helpers shared by the libFuzzer targets: the engine reads models from a path, so an
// input goes to a file of its own (on tmpfs where there is one) before each call.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace cbs_fuzz {

// The input written to this process's scratch file; returns its path.
inline const std::string& input_file(const uint8_t* data, size_t size, const char* suffix = ".gguf") {
    static const std::string path = [&] {
        const char* dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : (std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp");
        std::string p = std::string(dir) + "/cbs_fuzz_" + std::to_string(getpid()) + suffix;
        std::atexit([] { std::remove(input_file(nullptr, 0).c_str()); });
        return p;
    }();
    if (data) {
        FILE* f = std::fopen(path.c_str(), "wb");
        if (!f) std::abort();
        if (size && std::fwrite(data, 1, size, f) != size) std::abort();
        std::fclose(f);
    }
    return path;
}

// A file named by an environment variable (the tokenizer targets' vocabularies), or abort
// with a message naming the variable.
inline std::string required_env_path(const char* var) {
    const char* v = std::getenv(var);
    if (!v || !*v || access(v, R_OK) != 0) {
        std::fprintf(stderr, "set %s to a readable file (scripts/fuzz.sh does)\n", var);
        std::exit(2);
    }
    return v;
}

}  // namespace cbs_fuzz
