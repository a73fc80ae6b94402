#include "core/model_file.h"

#include <cstdio>
#include <algorithm>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <memory>

#include "ggml-alloc.h"
#include "core/backend.h"
#include "cpu/q4_matmul.h"

#if defined(__unix__) || defined(__APPLE__)
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>
#define CBS_HAVE_MMAP 1
#endif

namespace cbs {

static constexpr const char* kArch = "chatterbox";

// Reads the header of a Chatterbox GGUF: metadata, plus tensor descriptions into *ctx
// when ctx is given. Throws EngineError (and frees what it made) on anything else.
void ModelFile::open(ggml_context** ctx) {
    {
        std::ifstream probe(path_, std::ios::binary);
        if (!probe) throw ModelError(path_ + ": model file not found or not readable");
        char magic[4] = {};
        probe.read(magic, 4);
        if (probe.gcount() != 4 || std::memcmp(magic, "GGUF", 4) != 0)
            throw ModelError(path_ + ": not a GGUF model file");
    }
    {
        GgmlLogCapture why;
        gguf_ = gguf_init_from_file(path_.c_str(), gguf_init_params{/*no_alloc=*/true, ctx});
        if (!gguf_)
            throw ModelError(path_ + ": corrupt or truncated GGUF file" +
                             (why.text().empty() ? std::string() : " (" + why.text() + ")") +
                             "; download or convert it again");
    }
    try {
        int64_t arch = gguf_find_key(gguf_, "general.architecture");
        if (arch < 0 || gguf_get_kv_type(gguf_, arch) != GGUF_TYPE_STRING ||
            std::strcmp(gguf_get_val_str(gguf_, arch), kArch) != 0)
            throw ModelError(path_ + ": not a Chatterbox model (general.architecture is not 'chatterbox')");
        variant_ = get_string("chatterbox.variant");
    } catch (...) {
        gguf_free(gguf_);
        gguf_ = nullptr;
        if (ctx && *ctx) {
            ggml_free(*ctx);
            *ctx = nullptr;
        }
        throw;
    }
}

const std::vector<std::string>& ModelFile::lazy_prefixes() {
    static const std::vector<std::string> prefixes = {"s3tok.", "campplus.", "ve."};
    return prefixes;
}

ModelFile::ModelFile(const std::string& path, ggml_backend_t backend, const std::vector<std::string>& also_lazy)
    : backend_(backend), path_(path) {
    open(&ctx_);
    try {
        // The file's data section must hold every tensor it declares (truncation check).
        std::ifstream f(path, std::ios::binary | std::ios::ate);
        const uint64_t file_size = static_cast<uint64_t>(f.tellg());
        const size_t data_offset = gguf_get_data_offset(gguf_);
        for (const std::string& p : lazy_prefixes()) lazy_.push_back({p, {}, nullptr});
        for (const std::string& p : also_lazy) lazy_.push_back({p, {}, nullptr});
        std::vector<int64_t> resident;
        for (int64_t i = 0; i < gguf_get_n_tensors(gguf_); ++i) {
            const char* name = gguf_get_tensor_name(gguf_, i);
            ggml_tensor* t = ggml_get_tensor(ctx_, name);
            uint64_t end = data_offset + gguf_get_tensor_offset(gguf_, i) + ggml_nbytes(t);
            if (end > file_size)
                throw ModelError(path + ": truncated: tensor " + name +
                                 " runs past the end of the file; download or convert it again");
            tensors_[name] = t;
            auto g = std::find_if(lazy_.begin(), lazy_.end(),
                                  [&](const LazyGroup& l) { return std::strncmp(name, l.prefix.c_str(), l.prefix.size()) == 0; });
            (g == lazy_.end() ? resident : g->ids).push_back(i);
        }
        std::vector<int64_t> plain, tables;
        std::map<ggml_backend_buffer_type_t, std::vector<int64_t>> extra;
        for (int64_t i : resident) {
            const char* name = gguf_get_tensor_name(gguf_, i);
            if (is_lookup_table(name)) {
                tables.push_back(i);
                continue;
            }
            ggml_tensor* t = ggml_get_tensor(ctx_, name);
            if (packs(t)) {
                packed_.insert(t);
                in_extra_[t] = i;  // the buffer holds our layout: read_raw reads the file
                plain.push_back(i);
                continue;
            }
            ggml_backend_buffer_type_t b = extra_buft_for(t);
            (b ? extra[b] : plain).push_back(i);
        }
        if (!map_tensors(tables, file_size)) plain.insert(plain.end(), tables.begin(), tables.end());
        std::stable_sort(plain.begin(), plain.end(), [&](int64_t a, int64_t b) {
            return allocation_key(gguf_get_tensor_name(gguf_, a)) < allocation_key(gguf_get_tensor_name(gguf_, b));
        });
        buffer_ = load_tensors(plain, ggml_backend_get_default_buffer_type(backend_));
        for (auto& [b, ids] : extra) {
            extra_buffers_.push_back(load_tensors(ids, b));
            for (int64_t i : ids) in_extra_[ggml_get_tensor(ctx_, gguf_get_tensor_name(gguf_, i))] = i;
        }
    } catch (...) {
        for (const ggml_tensor* t : packed_) q4_mark_packed(t, false);
        for (ggml_backend_buffer_t b : extra_buffers_) ggml_backend_buffer_free(b);
        if (buffer_) ggml_backend_buffer_free(buffer_);
        unmap();
        gguf_free(gguf_);
        ggml_free(ctx_);
        throw;
    }
}

// The order in which the plain buffer holds the tensors: by name, except that a Llama
// layer's q, k and v projections come one after another in that order (joined()).
std::string ModelFile::allocation_key(const char* name) {
    std::string key = name;
    static const std::pair<const char*, const char*> kJoinOrder[] = {
        {".q_proj.", ".qkv_0."}, {".k_proj.", ".qkv_1."}, {".v_proj.", ".qkv_2."}};
    for (const auto& [part, place] : kJoinOrder)
        if (const size_t at = key.find(part); at != std::string::npos) key.replace(at, std::strlen(part), place);
    return key;
}

ggml_tensor* ModelFile::joined(const std::vector<ggml_tensor*>& parts) const {
    const char* off = std::getenv("CBS_JOIN_WEIGHTS");  // "0": never (a comparison, tests)
    if ((off && std::strcmp(off, "0") == 0) || parts.size() < 2 || !parts[0] || !buffer_) return nullptr;
    const ggml_tensor* first = parts[0];
    const bool packed = q4_is_packed(first);
    ggml_backend_buffer_type_t buft = ggml_backend_buffer_get_type(buffer_);
    const char* next = static_cast<const char*>(first->data);
    int64_t rows = 0;
    for (const ggml_tensor* p : parts) {
        // Packed rows go in groups of 8 (cpu/q4_matmul.h): whole groups only, so that the
        // joined weight's groups are its parts' groups.
        if (!p || p->buffer != buffer_ || p->view_src || p->type != first->type || p->ne[0] != first->ne[0] ||
            p->ne[2] != 1 || p->ne[3] != 1 || !ggml_is_contiguous(p) || q4_is_packed(p) != packed ||
            (packed && p->ne[1] % 8 != 0) || static_cast<const char*>(p->data) != next ||
            ggml_backend_buft_get_alloc_size(buft, p) != ggml_nbytes(p))
            return nullptr;
        next += ggml_nbytes(p);
        rows += p->ne[1];
    }
    std::lock_guard<std::mutex> lock(joined_mutex_);
    if (auto it = joined_.find(parts); it != joined_.end()) return it->second;
    // Room for every join there can be: each takes two of the file's tensors or more.
    if (!joined_ctx_) joined_ctx_ = ggml_init({ggml_tensor_overhead() * gguf_get_n_tensors(gguf_), nullptr, true});
    if (!joined_ctx_) return nullptr;
    ggml_tensor* t = ggml_new_tensor_2d(joined_ctx_, first->type, first->ne[0], rows);
    ggml_format_name(t, "%s (joined)", ggml_get_name(first));
    if (ggml_backend_buft_get_alloc_size(buft, t) != ggml_nbytes(t) ||
        ggml_backend_tensor_alloc(buffer_, t, first->data) != GGML_STATUS_SUCCESS)
        t = nullptr;
    else if (packed)
        q4_mark_packed(t, true);
    return joined_[parts] = t;
}

bool ModelFile::packs(const ggml_tensor* t) const {
    ggml_backend_dev_t dev = ggml_backend_get_device(backend_);
    return t->type == GGML_TYPE_Q4_0 && std::strncmp(ggml_get_name(t), "t3.", 3) == 0 && t->ne[2] == 1 &&
           t->ne[3] == 1 && dev && ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU && q4_packed_available();
}

bool ModelFile::is_lookup_table(const char* name) {
    if (std::strncmp(name, "t3.", 3) != 0) return false;
    return std::strcmp(name, "t3.wpe.weight") == 0 || std::strstr(name, "_emb.") != nullptr;
}

bool ModelFile::map_tensors(const std::vector<int64_t>& ids, size_t file_size) {
#ifdef CBS_HAVE_MMAP
    static const bool enabled = [] {
        const char* v = std::getenv("CBS_MMAP_TABLES");
        return !v || std::strcmp(v, "0") != 0;
    }();
    ggml_backend_dev_t dev = ggml_backend_get_device(backend_);
    if (ids.empty() || !enabled || !dev || ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_CPU) return false;
    const int fd = ::open(path_.c_str(), O_RDONLY);
    if (fd < 0) return false;
    void* map = mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);  // the map keeps the file
    if (map == MAP_FAILED) return false;
    const size_t data_offset = gguf_get_data_offset(gguf_);
    char* data = static_cast<char*>(map) + data_offset;
    size_t max_tensor = 0;
    for (int64_t i : ids) max_tensor = std::max(max_tensor, ggml_nbytes(ggml_get_tensor(ctx_, gguf_get_tensor_name(gguf_, i))));
    // The CPU buffer wants 32-byte aligned data; a GGUF aligns its data section (default 32).
    ggml_backend_buffer_t buf = reinterpret_cast<uintptr_t>(data) % 32 == 0
        ? ggml_backend_dev_buffer_from_host_ptr(dev, data, file_size - data_offset, max_tensor) : nullptr;
    if (!buf) {
        munmap(map, file_size);
        return false;
    }
    ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    map_ = map;
    map_size_ = file_size;
    mapped_buffer_ = buf;
    for (int64_t i : ids) {
        ggml_tensor* t = ggml_get_tensor(ctx_, gguf_get_tensor_name(gguf_, i));
        if (ggml_backend_tensor_alloc(buf, t, data + gguf_get_tensor_offset(gguf_, i)) != GGML_STATUS_SUCCESS)
            throw ModelError(path_ + ": cannot map tensor " + ggml_get_name(t));
    }
    return true;
#else
    (void)ids;
    (void)file_size;
    return false;
#endif
}

void ModelFile::unmap() {
    if (mapped_buffer_) ggml_backend_buffer_free(mapped_buffer_);
    mapped_buffer_ = nullptr;
#ifdef CBS_HAVE_MMAP
    if (map_) munmap(map_, map_size_);
#endif
    map_ = nullptr;
}

// Whether `buft` (an extra buffer type of `dev`) takes `w` as the weight of a matmul with
// F32 activations: asked the way ggml's backends answer it, with `w` in a dummy buffer.
static bool extra_takes(ggml_backend_dev_t dev, ggml_backend_buffer_type_t buft, ggml_tensor* w) {
    ggml_init_params params{ggml_tensor_overhead() * 2, nullptr, true};
    ggml_context* ctx = ggml_init(params);
    if (!ctx) return false;
    ggml_tensor* op = ggml_mul_mat(ctx, w, ggml_new_tensor_2d(ctx, GGML_TYPE_F32, w->ne[0], 1));
    ggml_backend_buffer_t dummy = ggml_backend_buft_alloc_buffer(buft, 0);
    w->buffer = dummy;
    const bool ok = dummy && ggml_backend_dev_supports_op(dev, op);
    w->buffer = nullptr;
    if (dummy) ggml_backend_buffer_free(dummy);
    ggml_free(ctx);
    return ok;
}

ggml_backend_buffer_type_t ModelFile::extra_buft_for(ggml_tensor* t) const {
    static const bool enabled = [] {
        const char* v = std::getenv("CBS_CPU_REPACK");
        return !v || std::strcmp(v, "0") != 0;
    }();
    // T3's quantised tensors are all matmul weights (convert/quant.py); S3Gen's stay put. Only
    // a matrix can be one (asking about a 3-D tensor would fail ggml_mul_mat's assertion).
    if (!enabled || !ggml_is_quantized(t->type) || std::strncmp(ggml_get_name(t), "t3.", 3) != 0 || t->ne[2] != 1 ||
        t->ne[3] != 1)
        return nullptr;
    ggml_backend_dev_t dev = ggml_backend_get_device(backend_);
    if (!dev || ggml_backend_dev_type(dev) != GGML_BACKEND_DEVICE_TYPE_CPU) return nullptr;
    using get_extra_t = ggml_backend_buffer_type_t* (*)(ggml_backend_dev_t);
    auto get_extra = reinterpret_cast<get_extra_t>(
        ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(dev), "ggml_backend_dev_get_extra_bufts"));
    // Only the repack buffer, the one measured (benchmarks/bench_repack.py). The AMX buffer,
    // which the all-variants build's sapphirerapids module offers first, dies with SIGILL on
    // a VM whose CPU flags list AMX while the hypervisor does not enable the tile state.
    for (ggml_backend_buffer_type_t* b = get_extra ? get_extra(dev) : nullptr; b && *b; ++b)
        if (std::strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0 && extra_takes(dev, *b, t)) return *b;
    return nullptr;
}

ggml_backend_buffer_t ModelFile::load_tensors(const std::vector<int64_t>& ids, ggml_backend_buffer_type_t buft) const {
    if (ids.empty()) return nullptr;
    const size_t align = ggml_backend_buft_get_alignment(buft);
    size_t size = align;
    for (int64_t i : ids)
        size += GGML_PAD(ggml_backend_buft_get_alloc_size(buft, ggml_get_tensor(ctx_, gguf_get_tensor_name(gguf_, i))), align);
    ggml_backend_buffer_t buf = ggml_backend_buft_alloc_buffer(buft, size);
    if (!buf) throw ModelError(path_ + ": not enough memory to load the model");
    ggml_backend_buffer_set_usage(buf, GGML_BACKEND_BUFFER_USAGE_WEIGHTS);
    try {
        ggml_tallocr talloc = ggml_tallocr_new(buf);
        for (int64_t i : ids)
            if (ggml_tallocr_alloc(&talloc, ggml_get_tensor(ctx_, gguf_get_tensor_name(gguf_, i))) != GGML_STATUS_SUCCESS)
                throw ModelError(path_ + ": not enough memory to load the model");
        std::unique_ptr<FILE, int (*)(FILE*)> fp(std::fopen(path_.c_str(), "rb"), &std::fclose);
        if (!fp) throw ModelError(path_ + ": cannot open");
        const size_t data_offset = gguf_get_data_offset(gguf_);
        std::vector<uint8_t> staging;
        for (int64_t i : ids) {
            ggml_tensor* t = ggml_get_tensor(ctx_, gguf_get_tensor_name(gguf_, i));
            const size_t n = ggml_nbytes(t);
            staging.resize(n);
            if (fseeko(fp.get(), static_cast<off_t>(data_offset + gguf_get_tensor_offset(gguf_, i)), SEEK_SET) != 0 ||
                std::fread(staging.data(), 1, n, fp.get()) != n)
                throw ModelError(path_ + ": read error in tensor " + ggml_get_name(t));
            if (packed_.count(t)) {
                std::vector<uint8_t> packed(n);
                q4_pack(staging.data(), packed.data(), t->ne[1], t->ne[0]);
                staging.swap(packed);
            }
            ggml_backend_tensor_set(t, staging.data(), 0, n);
            if (packed_.count(t)) q4_mark_packed(t, true);
        }
    } catch (...) {
        for (int64_t i : ids) {  // no tensor may point into the freed buffer
            ggml_tensor* t = ggml_get_tensor(ctx_, gguf_get_tensor_name(gguf_, i));
            t->data = nullptr;
            t->buffer = nullptr;
        }
        ggml_backend_buffer_free(buf);
        throw;
    }
    return buf;
}

void ModelFile::ensure_loaded(const std::string& name) const {
    for (LazyGroup& g : lazy_) {
        if (name.compare(0, g.prefix.size(), g.prefix) != 0) continue;
        std::lock_guard<std::mutex> lock(lazy_mutex_);
        if (!g.buffer) g.buffer = load_tensors(g.ids, ggml_backend_get_default_buffer_type(backend_));
        return;
    }
}

size_t ModelFile::release_lazy() {
    std::lock_guard<std::mutex> lock(lazy_mutex_);
    size_t freed = 0;
    for (LazyGroup& g : lazy_) {
        if (!g.buffer) continue;
        for (int64_t i : g.ids) {  // no tensor may point into the freed buffer
            ggml_tensor* t = ggml_get_tensor(ctx_, gguf_get_tensor_name(gguf_, i));
            t->data = nullptr;
            t->buffer = nullptr;
        }
        freed += ggml_backend_buffer_get_size(g.buffer);
        ggml_backend_buffer_free(g.buffer);
        g.buffer = nullptr;
    }
    return freed;
}

ModelFile::ModelFile(const std::string& path, MetadataOnly) : path_(path) { open(nullptr); }

ModelFile::~ModelFile() {
    for (LazyGroup& g : lazy_)
        if (g.buffer) ggml_backend_buffer_free(g.buffer);
    for (const ggml_tensor* t : packed_) q4_mark_packed(t, false);
    for (const auto& [parts, t] : joined_)
        if (t && q4_is_packed(t)) q4_mark_packed(t, false);
    for (ggml_backend_buffer_t b : extra_buffers_) ggml_backend_buffer_free(b);
    if (buffer_) ggml_backend_buffer_free(buffer_);
    unmap();
    if (gguf_) gguf_free(gguf_);
    if (ctx_) ggml_free(ctx_);
    if (joined_ctx_) ggml_free(joined_ctx_);
}

int64_t ModelFile::key_id(const std::string& key) const {
    int64_t id = gguf_find_key(gguf_, key.c_str());
    if (id < 0) throw ModelError(path_ + ": metadata key '" + key + "' is missing");
    return id;
}

bool ModelFile::has_key(const std::string& key) const { return gguf_find_key(gguf_, key.c_str()) >= 0; }

int64_t ModelFile::get_int(const std::string& key) const {
    int64_t id = key_id(key);
    switch (gguf_get_kv_type(gguf_, id)) {
        case GGUF_TYPE_INT32: return gguf_get_val_i32(gguf_, id);
        case GGUF_TYPE_UINT32: return gguf_get_val_u32(gguf_, id);
        case GGUF_TYPE_INT64: return gguf_get_val_i64(gguf_, id);
        case GGUF_TYPE_UINT64: return static_cast<int64_t>(gguf_get_val_u64(gguf_, id));
        case GGUF_TYPE_INT16: return gguf_get_val_i16(gguf_, id);
        case GGUF_TYPE_UINT16: return gguf_get_val_u16(gguf_, id);
        case GGUF_TYPE_INT8: return gguf_get_val_i8(gguf_, id);
        case GGUF_TYPE_UINT8: return gguf_get_val_u8(gguf_, id);
        default: throw ModelError(path_ + ": metadata key '" + key + "' is not an integer");
    }
}

double ModelFile::get_float(const std::string& key) const {
    int64_t id = key_id(key);
    switch (gguf_get_kv_type(gguf_, id)) {
        case GGUF_TYPE_FLOAT32: return gguf_get_val_f32(gguf_, id);
        case GGUF_TYPE_FLOAT64: return gguf_get_val_f64(gguf_, id);
        default: return static_cast<double>(get_int(key));
    }
}

bool ModelFile::get_bool(const std::string& key) const {
    int64_t id = key_id(key);
    if (gguf_get_kv_type(gguf_, id) != GGUF_TYPE_BOOL)
        throw ModelError(path_ + ": metadata key '" + key + "' is not a boolean");
    return gguf_get_val_bool(gguf_, id);
}

std::string ModelFile::get_string(const std::string& key) const {
    int64_t id = key_id(key);
    if (gguf_get_kv_type(gguf_, id) != GGUF_TYPE_STRING)
        throw ModelError(path_ + ": metadata key '" + key + "' is not a string");
    return gguf_get_val_str(gguf_, id);
}

std::vector<int64_t> ModelFile::get_int_array(const std::string& key) const {
    int64_t id = key_id(key);
    if (gguf_get_kv_type(gguf_, id) != GGUF_TYPE_ARRAY)
        throw ModelError(path_ + ": metadata key '" + key + "' is not an array");
    const size_t n = gguf_get_arr_n(gguf_, id);
    const void* data = gguf_get_arr_data(gguf_, id);
    std::vector<int64_t> out(n);
    switch (gguf_get_arr_type(gguf_, id)) {
        case GGUF_TYPE_INT32:
            for (size_t i = 0; i < n; ++i) out[i] = static_cast<const int32_t*>(data)[i];
            break;
        case GGUF_TYPE_INT64:
            for (size_t i = 0; i < n; ++i) out[i] = static_cast<const int64_t*>(data)[i];
            break;
        case GGUF_TYPE_UINT32:
            for (size_t i = 0; i < n; ++i) out[i] = static_cast<const uint32_t*>(data)[i];
            break;
        case GGUF_TYPE_BOOL:
        case GGUF_TYPE_INT8:
        case GGUF_TYPE_UINT8:
            for (size_t i = 0; i < n; ++i) out[i] = static_cast<const uint8_t*>(data)[i];
            break;
        default: throw ModelError(path_ + ": metadata key '" + key + "' is not an integer array");
    }
    return out;
}

std::vector<std::string> ModelFile::get_string_array(const std::string& key) const {
    int64_t id = key_id(key);
    if (gguf_get_kv_type(gguf_, id) != GGUF_TYPE_ARRAY || gguf_get_arr_type(gguf_, id) != GGUF_TYPE_STRING)
        throw ModelError(path_ + ": metadata key '" + key + "' is not a string array");
    const size_t n = gguf_get_arr_n(gguf_, id);
    std::vector<std::string> out;
    out.reserve(n);
    for (size_t i = 0; i < n; ++i) out.emplace_back(gguf_get_arr_str(gguf_, id, i));
    return out;
}

ggml_tensor* ModelFile::find_tensor(const std::string& name) const {
    auto it = tensors_.find(name);
    if (it == tensors_.end()) return nullptr;
    ensure_loaded(name);  // a lazy group's data, on first use (under its lock)
    return it->second;
}

ggml_tensor* ModelFile::tensor(const std::string& name) const {
    ggml_tensor* t = find_tensor(name);
    if (!t) throw ModelError(path_ + ": tensor '" + name + "' is missing (a file for another variant?)");
    return t;
}

static std::string shape_str(const std::vector<int64_t>& ne) {
    std::string s = "[";
    for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + (ne[i] < 0 ? std::string("*") : std::to_string(ne[i]));
    return s + "]";
}

void ModelFile::check_shape(const ggml_tensor* t, const std::vector<int64_t>& ne) const {
    if (!t) return;
    bool ok = ne.size() <= GGML_MAX_DIMS;
    for (size_t i = 0; ok && i < GGML_MAX_DIMS; ++i) {
        const int64_t want = i < ne.size() ? ne[i] : 1;
        ok = want < 0 || t->ne[i] == want;
    }
    if (ok) return;
    std::vector<int64_t> found(t->ne, t->ne + std::max<size_t>(ne.size(), static_cast<size_t>(ggml_n_dims(t))));
    throw ModelError(path_ + ": tensor '" + ggml_get_name(t) + "' has shape " + shape_str(found) + ", expected " +
                     shape_str(ne) + " (ggml ne order, fastest dimension first)");
}

ggml_tensor* ModelFile::tensor(const std::string& name, const std::vector<int64_t>& ne) const {
    ggml_tensor* t = tensor(name);
    check_shape(t, ne);
    return t;
}

size_t ModelFile::buffer_bytes() const {
    size_t n = buffer_ ? ggml_backend_buffer_get_size(buffer_) : 0;
    for (ggml_backend_buffer_t b : extra_buffers_) n += ggml_backend_buffer_get_size(b);
    std::lock_guard<std::mutex> lock(lazy_mutex_);
    for (const LazyGroup& g : lazy_) n += g.buffer ? ggml_backend_buffer_get_size(g.buffer) : 0;
    return n;
}

std::vector<uint8_t> ModelFile::read_raw(const ggml_tensor* t) const {
    std::vector<uint8_t> raw(ggml_nbytes(t));
    auto it = in_extra_.find(t);
    if (it == in_extra_.end()) {
        ggml_backend_tensor_get(t, raw.data(), 0, raw.size());
        return raw;
    }
    std::unique_ptr<FILE, int (*)(FILE*)> fp(std::fopen(path_.c_str(), "rb"), &std::fclose);
    if (!fp || fseeko(fp.get(), static_cast<off_t>(gguf_get_data_offset(gguf_) + gguf_get_tensor_offset(gguf_, it->second)), SEEK_SET) != 0 ||
        std::fread(raw.data(), 1, raw.size(), fp.get()) != raw.size())
        throw ModelError(path_ + ": read error in tensor " + ggml_get_name(t));
    return raw;
}

std::vector<float> ModelFile::read_f32(const ggml_tensor* t) const {
    const std::vector<uint8_t> raw = read_raw(t);
    const int64_t n = ggml_nelements(t);
    std::vector<float> out(n);
    if (t->type == GGML_TYPE_F32) {
        std::memcpy(out.data(), raw.data(), n * sizeof(float));
    } else if (t->type == GGML_TYPE_I32) {
        for (int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(reinterpret_cast<const int32_t*>(raw.data())[i]);
    } else {
        const auto* traits = ggml_get_type_traits(t->type);
        if (!traits->to_float) throw ModelError(std::string("cannot read tensor type ") + ggml_type_name(t->type));
        traits->to_float(raw.data(), out.data(), n);
    }
    return out;
}

}  // namespace cbs
