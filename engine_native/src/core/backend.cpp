#include "core/backend.h"

#include <dlfcn.h>

#include <algorithm>
#include <cctype>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <mutex>

#include "core/errors.h"
#include "core/options.h"

namespace fs = std::filesystem;

namespace cbs {

namespace {

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
    return s;
}

std::string env(const char* name) {
    const char* v = std::getenv(name);
    return v ? std::string(v) : std::string();
}

struct LoadState {
    std::once_flag once;
    std::string dir, cpu_variant, error;
};
LoadState& state() {
    static LoadState s;
    return s;
}

// ggml's INFO lines (a module loaded, CUDA found N devices) would print at every import:
// only warnings and errors pass, unless CBS_GGML_LOG=1.
thread_local std::string* log_capture = nullptr;  // GgmlLogCapture's text on this thread, if one lives

void log_callback(ggml_log_level level, const char* text, void*) {
    static const bool all = env("CBS_GGML_LOG") == "1";
    static ggml_log_level last = GGML_LOG_LEVEL_NONE;
    if (level == GGML_LOG_LEVEL_CONT) level = last;
    last = level;
    if (!(all || level == GGML_LOG_LEVEL_WARN || level == GGML_LOG_LEVEL_ERROR)) return;
    if (log_capture) {
        log_capture->append(text);
        return;
    }
    std::fputs(text, stderr);
}

// The folder of the shared object holding `symbol`.
std::string folder_of(const void* symbol) {
    Dl_info info{};
    if (!dladdr(symbol, &info) || !info.dli_fname) return {};
    return fs::absolute(fs::path(info.dli_fname)).parent_path().string();
}

// The module's own score (0: this CPU lacks its instructions), without registering it.
int module_score(const fs::path& path) {
    void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!h) return 0;
    int score = 0;
    if (auto fn = reinterpret_cast<int (*)()>(dlsym(h, "ggml_backend_score"))) score = fn();
    dlclose(h);
    return score;
}

std::vector<std::string> cpu_variants_in(const fs::path& dir) {
    std::vector<std::string> out;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
        const std::string f = e.path().filename().string();
        const std::string pre = "libggml-cpu-", ext = ".so";
        if (f.size() > pre.size() + ext.size() && f.compare(0, pre.size(), pre) == 0 &&
            f.compare(f.size() - ext.size(), ext.size(), ext) == 0)
            out.push_back(f.substr(pre.size(), f.size() - pre.size() - ext.size()));
    }
    std::sort(out.begin(), out.end());
    return out;
}

std::string join(const std::vector<std::string>& v) {
    std::string s;
    for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
    return s;
}

// Loads the CPU module: the forced variant, else the best scoring one, else libggml-cpu.so.
void load_cpu(LoadState& st, const fs::path& dir) {
    const std::vector<std::string> variants = cpu_variants_in(dir);
    const std::string forced = lower(env("CBS_CPU_VARIANT"));
    if (!forced.empty()) {
        if (std::find(variants.begin(), variants.end(), forced) == variants.end()) {
            st.error = "CBS_CPU_VARIANT=" + forced + ": no such CPU backend in " + dir.string() +
                       (variants.empty() ? " (this build has one CPU variant)" : " (present: " + join(variants) + ")");
            return;
        }
        if (!ggml_backend_load((dir / ("libggml-cpu-" + forced + ".so")).c_str())) {
            st.error = "CBS_CPU_VARIANT=" + forced + ": this CPU lacks the instructions of that variant";
            return;
        }
        st.cpu_variant = forced;
        return;
    }
    int best = 0;
    for (const std::string& v : variants) {
        const int s = module_score(dir / ("libggml-cpu-" + v + ".so"));
        if (s > best) {
            best = s;
            st.cpu_variant = v;
        }
    }
    if (best > 0 && ggml_backend_load((dir / ("libggml-cpu-" + st.cpu_variant + ".so")).c_str())) return;
    st.cpu_variant.clear();
    if (fs::exists(dir / "libggml-cpu.so") && ggml_backend_load((dir / "libggml-cpu.so").c_str())) return;
    st.error = "no CPU backend module in " + dir.string() + " runs on this CPU";
}

void load_all(LoadState& st) {
    ggml_log_set(log_callback, nullptr);
    // The modules sit beside libggml (wheel, build tree, frozen app); the folder of this
    // module is the second place to look.
    std::vector<std::string> dirs = {folder_of(reinterpret_cast<const void*>(&ggml_backend_load)),
                                     folder_of(reinterpret_cast<const void*>(&load_backends))};
    for (const std::string& d : dirs)
        if (!d.empty() && (!cpu_variants_in(d).empty() || fs::exists(fs::path(d) / "libggml-cpu.so"))) {
            st.dir = d;
            break;
        }
    if (st.dir.empty()) {
        st.error = "the ggml CPU backend modules (libggml-cpu-*.so) are missing beside " + dirs[0];
        return;
    }
    const std::string gpu = lower(env("CBS_GPU"));
    for (const char* name : {"cuda", "vulkan"}) {
        if (!gpu.empty() && gpu != "auto" && gpu.find(name) == std::string::npos) continue;
        const fs::path path = fs::path(st.dir) / (std::string("libggml-") + name + ".so");
        if (!fs::exists(path)) continue;
        // A module whose runtime (libcuda, the Vulkan loader) is missing here is skipped
        // quietly: a build with GPU modules still runs on a machine without a GPU.
        void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (!h) continue;
        dlclose(h);
        ggml_backend_load(path.c_str());
    }
    load_cpu(st, st.dir);
}

std::string type_name(enum ggml_backend_dev_type t) {
    switch (t) {
        case GGML_BACKEND_DEVICE_TYPE_CPU: return "cpu";
        case GGML_BACKEND_DEVICE_TYPE_GPU: return "gpu";
        case GGML_BACKEND_DEVICE_TYPE_IGPU: return "igpu";
        default: return "accel";
    }
}

// Discrete GPUs first (CUDA before Vulkan: the order they load), then integrated, the
// CPU last.
int rank(enum ggml_backend_dev_type t) {
    switch (t) {
        case GGML_BACKEND_DEVICE_TYPE_GPU: return 0;
        case GGML_BACKEND_DEVICE_TYPE_IGPU: return 1;
        case GGML_BACKEND_DEVICE_TYPE_CPU: return 3;
        default: return 2;
    }
}

struct Found {
    DeviceInfo info;
    ggml_backend_dev_t dev;
};

std::vector<Found> devices() {
    load_backends();
    std::vector<Found> out;
    for (size_t r = 0; r < ggml_backend_reg_count(); ++r) {
        ggml_backend_reg_t reg = ggml_backend_reg_get(r);
        const std::string backend = ggml_backend_reg_name(reg);
        for (size_t i = 0; i < ggml_backend_reg_dev_count(reg); ++i) {
            ggml_backend_dev_t dev = ggml_backend_reg_dev_get(reg, i);
            const enum ggml_backend_dev_type t = ggml_backend_dev_type(dev);
            if (t == GGML_BACKEND_DEVICE_TYPE_ACCEL) continue;  // BLAS-like helpers, not devices
            Found f{{}, dev};
            f.info.id = t == GGML_BACKEND_DEVICE_TYPE_CPU ? "cpu" : lower(backend) + ":" + std::to_string(i);
            f.info.name = ggml_backend_dev_name(dev);
            f.info.backend = backend;
            f.info.description = ggml_backend_dev_description(dev);
            f.info.type = type_name(t);
            ggml_backend_dev_memory(dev, &f.info.memory_free, &f.info.memory_total);
            out.push_back(f);
        }
    }
    std::stable_sort(out.begin(), out.end(), [](const Found& a, const Found& b) {
        return rank(ggml_backend_dev_type(a.dev)) < rank(ggml_backend_dev_type(b.dev));
    });
    return out;
}

}  // namespace

void load_backends() {
    LoadState& st = state();
    std::call_once(st.once, [&] { load_all(st); });
    if (!st.error.empty()) throw DeviceError(st.error);
}

std::vector<DeviceInfo> list_devices() {
    std::vector<DeviceInfo> out;
    for (const Found& f : devices()) out.push_back(f.info);
    return out;
}

std::string cpu_variant() {
    load_backends();
    return state().cpu_variant;
}

std::string backend_dir() {
    load_backends();
    return state().dir;
}

bool backend_is_cpu(ggml_backend_t backend) {
    ggml_backend_dev_t dev = ggml_backend_get_device(backend);
    return dev && ggml_backend_dev_type(dev) == GGML_BACKEND_DEVICE_TYPE_CPU;
}

static void* cpu_proc(ggml_backend_t backend, const char* name) {
    if (!backend_is_cpu(backend)) return nullptr;
    return ggml_backend_reg_get_proc_address(ggml_backend_dev_backend_reg(ggml_backend_get_device(backend)), name);
}

// The CPU module's features include OPENMP=1 when it threads through OpenMP (no pool then).
static bool cpu_uses_openmp(ggml_backend_t backend) {
    auto fn = reinterpret_cast<ggml_backend_get_features_t>(cpu_proc(backend, "ggml_backend_get_features"));
    for (ggml_backend_feature* f = fn ? fn(ggml_backend_dev_backend_reg(ggml_backend_get_device(backend))) : nullptr;
         f && f->name; ++f)
        if (std::string(f->name) == "OPENMP") return true;
    return false;
}

// 0: a thread at a barrier still spins 128 pauses (a few us) before it sleeps, and a
// worker sleeps at once between graphs: the best of 0, 2 and 10 (10 us units) on a busy
// machine (docs/CPU.md); a longer spin can only pay on a machine that is truly idle.
static constexpr int kDefaultPoll = 0;

static int thread_poll() {
    const std::string v = env("CBS_THREAD_POLL");
    if (v.empty()) return kDefaultPoll;
    char* end = nullptr;
    const long p = std::strtol(v.c_str(), &end, 10);
    if (*end != '\0' || p < 0 || p > 100) throw EngineError("CBS_THREAD_POLL=" + v + ": expected 0 .. 100");
    return static_cast<int>(p);
}

// Each CPU backend's own thread pool (two backends may compute at once: a pool runs one
// graph at a time).
struct Pools {
    std::mutex mutex;
    std::map<ggml_backend_t, ggml_threadpool_t> of;
};
static Pools& pools() {
    static Pools p;
    return p;
}

using threadpool_new_t = ggml_threadpool_t (*)(ggml_threadpool_params*);
using threadpool_free_t = void (*)(ggml_threadpool_t);
using set_threadpool_t = void (*)(ggml_backend_t, ggml_threadpool_t);

void set_threads(ggml_backend_t backend, int threads) {
    auto fn = reinterpret_cast<ggml_backend_set_n_threads_t>(cpu_proc(backend, "ggml_backend_set_n_threads"));
    if (!fn) return;
    fn(backend, threads);
    auto pool_new = reinterpret_cast<threadpool_new_t>(cpu_proc(backend, "ggml_threadpool_new"));
    auto pool_free = reinterpret_cast<threadpool_free_t>(cpu_proc(backend, "ggml_threadpool_free"));
    auto set_pool = reinterpret_cast<set_threadpool_t>(cpu_proc(backend, "ggml_backend_cpu_set_threadpool"));
    if (!pool_new || !pool_free || !set_pool || cpu_uses_openmp(backend)) return;
    ggml_threadpool_params params = ggml_threadpool_params_default(threads);
    params.poll = static_cast<uint32_t>(thread_poll());
    ggml_threadpool_t pool = pool_new(&params);
    if (!pool) throw DeviceError("could not start " + std::to_string(threads) + " CPU threads");
    std::lock_guard<std::mutex> lock(pools().mutex);
    set_pool(backend, pool);
    ggml_threadpool_t& slot = pools().of[backend];
    if (slot) pool_free(slot);
    slot = pool;
}

void free_backend(ggml_backend_t backend) {
    if (!backend) return;
    ggml_threadpool_t pool = nullptr;
    {
        std::lock_guard<std::mutex> lock(pools().mutex);
        auto it = pools().of.find(backend);
        if (it != pools().of.end()) {
            pool = it->second;
            pools().of.erase(it);
        }
    }
    auto pool_free = pool ? reinterpret_cast<threadpool_free_t>(cpu_proc(backend, "ggml_threadpool_free")) : nullptr;
    ggml_backend_free(backend);  // first: the backend must not outlive its pool
    if (pool_free) pool_free(pool);
}

void set_abort_callback(ggml_backend_t backend, ggml_abort_callback callback, void* data) {
    if (auto fn = reinterpret_cast<ggml_backend_set_abort_callback_t>(cpu_proc(backend, "ggml_backend_set_abort_callback")))
        fn(backend, callback, data);
}

std::string device_id(ggml_backend_t backend) {
    ggml_backend_dev_t dev = ggml_backend_get_device(backend);
    for (const Found& f : devices())
        if (f.dev == dev) return f.info.id;
    return lower(ggml_backend_name(backend));
}

BackendPtr make_backend(const std::string& device, int threads) {
    check_option("threads", threads);
    const std::string want = lower(device);
    const std::vector<Found> all = devices();
    const Found* pick = nullptr;
    for (const Found& f : all) {
        const std::string backend = lower(f.info.backend);
        const bool gpu = f.info.type == "gpu" || f.info.type == "igpu";
        if (want == "auto" || f.info.id == want || (want == "gpu" && gpu) ||
            (want == backend && f.info.id.find(':') != std::string::npos && f.info.id.substr(f.info.id.find(':')) == ":0") ||
            (want == backend && f.info.type == "cpu")) {
            pick = &f;
            break;
        }
    }
    if (!pick) {
        std::string present;
        for (const Found& f : all) present += (present.empty() ? "" : ", ") + f.info.id;
        throw DeviceError("device '" + device + "' is not present (devices: " + present + ")");
    }
    ggml_backend_t b = ggml_backend_dev_init(pick->dev, nullptr);
    if (!b) throw DeviceError("device " + pick->info.id + " (" + pick->info.description + ") failed to start");
    set_threads(b, threads);
    return BackendPtr(b);
}

GgmlLogCapture::GgmlLogCapture() : previous_(log_capture) {
    ggml_log_set(log_callback, nullptr);  // ours, also before the backends are loaded
    log_capture = &text_;
}

GgmlLogCapture::~GgmlLogCapture() { log_capture = previous_; }

std::string GgmlLogCapture::text() const {
    std::string out;
    size_t start = 0;
    while (start < text_.size()) {
        size_t end = text_.find('\n', start);
        if (end == std::string::npos) end = text_.size();
        std::string line = text_.substr(start, end - start);
        start = end + 1;
        // "gguf_init_from_file_impl: failed to read ..." -> "failed to read ..."
        const size_t colon = line.find(": ");
        if (colon != std::string::npos && line.find(' ') > colon) line = line.substr(colon + 2);
        if (line.empty()) continue;
        if (!out.empty()) out += "; ";
        out += line;
    }
    return out;
}

}  // namespace cbs
