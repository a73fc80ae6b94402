// One Chatterbox model file (GGUF): metadata access and its tensors in backend buffers.
// Validates before use so a corrupt or foreign file is an error with a message, never a
// GGML_ASSERT.
//
// The cloning encoders' tensors (kLazyPrefixes: S3Tokenizer, CAMPPlus, VoiceEncoder; a
// third of a Q4_0 Turbo file) are loaded on first use: at load every tensor's metadata
// (type, shape) is read and the file's extent checked, but such a group's data is read
// into a buffer of its own only when a component first asks for one of its tensors
// (tensor(), find_tensor()), so a synthesis-only session never holds them.
//
// On a CPU backend, T3's quantised matrices (all of them matmul weights, see
// convert/quant.py) go into the CPU's "extra" buffer type when it takes them: the repack
// buffer stores Q4_0 rows interleaved for the AVX2/AVX-512 gemv/gemm kernels (AMX on a
// build and CPU that has it). CBS_CPU_REPACK=0 keeps every weight in the plain buffer.
// Where the CPU runs our own Q4_0 kernel (cpu/q4_matmul.h: AVX-512 VNNI), T3's Q4_0
// matrices go into the plain buffer in that kernel's layout instead (CBS_Q4_MATMUL=0: not).
//
// On a CPU backend, T3's lookup tables (token and position embeddings, read only through
// get_rows: 266 MB of a Turbo file, of which a sentence touches a few hundred rows) are
// not copied: their tensors point into a read-only memory map of the file, so only the
// pages a lookup touches become resident. CBS_MMAP_TABLES=0 copies them like the rest.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "ggml-backend.h"
#include "ggml.h"
#include "gguf.h"
#include "core/errors.h"

namespace cbs {

class ModelFile {
public:
    // Loads metadata and all tensors into a buffer of `backend`'s default type. `also_lazy`:
    // name prefixes loaded on first use too, beside lazy_prefixes() (a file of which only
    // some components run: another model's decoder leaves its T3 unread).
    ModelFile(const std::string& path, ggml_backend_t backend, const std::vector<std::string>& also_lazy = {});
    // Reads the metadata only (no tensor data, no backend buffer; tensors() is empty):
    // for readers such as the tokenizer that need no weights.
    struct MetadataOnly {};
    ModelFile(const std::string& path, MetadataOnly);
    ~ModelFile();
    ModelFile(const ModelFile&) = delete;
    ModelFile& operator=(const ModelFile&) = delete;

    const std::string& path() const { return path_; }
    const std::string& variant() const { return variant_; }

    bool has_key(const std::string& key) const;
    int64_t get_int(const std::string& key) const;
    double get_float(const std::string& key) const;
    bool get_bool(const std::string& key) const;
    std::string get_string(const std::string& key) const;
    std::vector<int64_t> get_int_array(const std::string& key) const;
    std::vector<std::string> get_string_array(const std::string& key) const;

    // The named tensor; throws ModelError naming the file when it is absent.
    ggml_tensor* tensor(const std::string& name) const;
    // The named tensor, its shape checked against `ne` (ggml's order, fastest dimension
    // first; dimensions past ne.size() must be 1; -1 accepts any size). Every component
    // loads its weights through this, with dimensions derived from the metadata, so a
    // wrong shape is a ModelError naming the tensor, expected and found shape, never a
    // ggml assertion later.
    ggml_tensor* tensor(const std::string& name, const std::vector<int64_t>& ne) const;
    // The same check on a tensor at hand (nullptr is allowed and passes).
    void check_shape(const ggml_tensor* t, const std::vector<int64_t>& ne) const;
    ggml_tensor* find_tensor(const std::string& name) const;  // nullptr when absent
    // Weights of one type and row length that lie one after another in the model's buffer
    // (no padding between them), as one weight whose rows are theirs in order: a component
    // multiplies them as one product (a Llama layer's q, k and v projections; its gate and
    // up), one kernel launch instead of several. nullptr where they do not lie so (another
    // buffer, a gap, padded rows); the parts stay valid either way. The load allocates a
    // layer's q, k and v projections in that order for this. CBS_JOIN_WEIGHTS=0: never.
    ggml_tensor* joined(const std::vector<ggml_tensor*>& parts) const;
    // Every tensor's metadata; a lazy group's data may not be loaded yet (use tensor()).
    const std::map<std::string, ggml_tensor*>& tensors() const { return tensors_; }
    // Bytes of tensor data held in backend buffers now (lazy groups once loaded).
    size_t buffer_bytes() const;
    // Frees the lazy groups' data (a later tensor() loads a group again); returns the bytes
    // freed. Only while no component built on those tensors is alive: their weights would
    // dangle (Engine drops its cloning encoders first).
    size_t release_lazy();
    // Name prefixes of the tensor groups loaded on first use.
    static const std::vector<std::string>& lazy_prefixes();

    // Any tensor's contents as float32 (dequantised), for tests and small tensors.
    std::vector<float> read_f32(const ggml_tensor* t) const;
    // A tensor's bytes as the file holds them (an extra buffer cannot be read back).
    std::vector<uint8_t> read_raw(const ggml_tensor* t) const;

private:
    void open(ggml_context** ctx);
    int64_t key_id(const std::string& key) const;
    // Allocates a buffer for the tensors `ids` (gguf indices) and reads their data.
    ggml_backend_buffer_t load_tensors(const std::vector<int64_t>& ids, ggml_backend_buffer_type_t buft) const;
    // The extra buffer type (repack, AMX) a matmul weight goes into, or nullptr.
    ggml_backend_buffer_type_t extra_buft_for(ggml_tensor* t) const;
    void ensure_loaded(const std::string& name) const;
    // Points the tensors `ids` into a read-only map of the file; false (nothing changed)
    // where the platform or backend cannot.
    bool map_tensors(const std::vector<int64_t>& ids, size_t file_size);
    static bool is_lookup_table(const char* name);
    static std::string allocation_key(const char* name);
    // Whether `t` is stored in cpu/q4_matmul's packed layout (T3's Q4_0 matrices on a CPU
    // that runs the kernel).
    bool packs(const ggml_tensor* t) const;
    void unmap();

    struct LazyGroup {
        std::string prefix;
        std::vector<int64_t> ids;
        ggml_backend_buffer_t buffer = nullptr;
    };
    ggml_backend_t backend_ = nullptr;
    mutable std::mutex lazy_mutex_;
    mutable std::vector<LazyGroup> lazy_;

    std::string path_;
    std::string variant_;
    gguf_context* gguf_ = nullptr;
    ggml_context* ctx_ = nullptr;
    ggml_backend_buffer_t buffer_ = nullptr;
    std::vector<ggml_backend_buffer_t> extra_buffers_;  // weights in extra buffer types
    void* map_ = nullptr;                               // the file, mapped (lookup tables)
    size_t map_size_ = 0;
    ggml_backend_buffer_t mapped_buffer_ = nullptr;     // a CPU buffer over map_'s data section
    std::map<const ggml_tensor*, int64_t> in_extra_;    // tensors not in the file's layout, with their gguf index
    std::set<const ggml_tensor*> packed_;               // those in cpu/q4_matmul's layout
    mutable std::mutex joined_mutex_;
    mutable ggml_context* joined_ctx_ = nullptr;        // joined()'s tensors (over buffer_'s data)
    mutable std::map<std::vector<ggml_tensor*>, ggml_tensor*> joined_;  // parts -> their tensor, made once
    std::map<std::string, ggml_tensor*> tensors_;
};

}  // namespace cbs
