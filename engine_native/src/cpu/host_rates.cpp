#include "cpu/host_rates.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cpu/aligned_buffer.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define CBS_RATES_X86 1
#endif

namespace cbs {

namespace {

using Clock = std::chrono::steady_clock;

// Runs body(thread index) on n threads that start together; the wall seconds from the start
// to the last one's end.
template <class Body>
double timed_on_threads(int n, Body body) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    Clock::time_point t0;
    for (int i = 0; i < n; ++i)
        pool.emplace_back([&, i] {
            ready.fetch_add(1);
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            body(i);
        });
    while (ready.load() < n) std::this_thread::yield();
    t0 = Clock::now();
    go.store(true, std::memory_order_release);
    for (auto& t : pool) t.join();
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Reads [p, p + bytes) and returns a sum of it (so that the reads are not optimised away):
// four independent 256-bit adds a step, far below what memory delivers.
#ifdef CBS_RATES_X86
__attribute__((target("avx2"))) uint64_t read_span(const uint8_t* p, int64_t bytes) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (int64_t i = 0; i + 128 <= bytes; i += 128) {
        a = _mm256_add_epi64(a, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
        b = _mm256_add_epi64(b, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
        c = _mm256_add_epi64(c, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
        d = _mm256_add_epi64(d, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
    }
    const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
    return static_cast<uint64_t>(_mm256_extract_epi64(s, 0) + _mm256_extract_epi64(s, 3));
}
#endif

uint64_t read_span_portable(const uint8_t* p, int64_t bytes) {
    uint64_t s[4] = {};
    for (int64_t i = 0; i + 32 <= bytes; i += 32)
        for (int j = 0; j < 4; ++j) {
            uint64_t v;
            std::memcpy(&v, p + i + 8 * j, 8);
            s[j] += v;
        }
    return s[0] + s[1] + s[2] + s[3];
}

// Twelve independent FMA chains (latency 4 x two ports = 8 in flight at least), `steps`
// rounds; returns a value of them so that they are not optimised away.
#ifdef CBS_RATES_X86
__attribute__((target("avx512f"))) float fma_chains16(int64_t steps) {
    __m512 acc[12];
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_ps(static_cast<float>(j));
    const __m512 a = _mm512_set1_ps(0.999999f), b = _mm512_set1_ps(1e-7f);
    for (int64_t i = 0; i < steps; ++i)
        for (int j = 0; j < 12; ++j) acc[j] = _mm512_fmadd_ps(acc[j], a, b);
    __m512 s = acc[0];
    for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, acc[j]);
    return _mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) float fma_chains8(int64_t steps) {
    __m256 acc[12];
    for (int j = 0; j < 12; ++j) acc[j] = _mm256_set1_ps(static_cast<float>(j));
    const __m256 a = _mm256_set1_ps(0.999999f), b = _mm256_set1_ps(1e-7f);
    for (int64_t i = 0; i < steps; ++i)
        for (int j = 0; j < 12; ++j) acc[j] = _mm256_fmadd_ps(acc[j], a, b);
    __m256 s = acc[0];
    for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, acc[j]);
    alignas(32) float out[8];
    _mm256_store_ps(out, s);
    return out[0] + out[7];
}
#endif

volatile uint64_t g_sink;  // results land here so the measured loops stay

}  // namespace

double host_read_gbps(int threads, int64_t megabytes, int rounds) {
    if (threads < 1 || megabytes < 1 || rounds < 1) throw std::invalid_argument("threads, megabytes and rounds must be >= 1");
    const int64_t share = megabytes * (1 << 20) / threads / 128 * 128, bytes = share * threads;
    AlignedBuffer<uint8_t> buf;
    uint8_t* p = buf.resize(static_cast<size_t>(bytes));
#ifdef CBS_RATES_X86
    static const bool avx2 = __builtin_cpu_supports("avx2");
#else
    constexpr bool avx2 = false;
#endif
    // Each thread first writes its own share (its pages then sit where it runs), then reads it.
    timed_on_threads(threads, [&](int i) { std::memset(p + i * share, i + 1, static_cast<size_t>(share)); });
    double best = 0.0;
    for (int r = 0; r < rounds; ++r) {
        std::vector<uint64_t> sums(static_cast<size_t>(threads));
        const double s = timed_on_threads(threads, [&](int i) {
#ifdef CBS_RATES_X86
            sums[i] = avx2 ? read_span(p + i * share, share) : read_span_portable(p + i * share, share);
#else
            sums[i] = read_span_portable(p + i * share, share);
#endif
        });
        for (uint64_t v : sums) g_sink = g_sink + v;
        best = std::max(best, static_cast<double>(bytes) / s / 1e9);
    }
    return best;
}

double host_f32_fma_gmacs(int threads, int lanes, int rounds) {
    if (threads < 1 || rounds < 1) throw std::invalid_argument("threads and rounds must be >= 1");
    if (lanes != 16 && lanes != 8) throw std::invalid_argument("lanes must be 16 (AVX-512) or 8 (AVX2)");
#ifdef CBS_RATES_X86
    const bool ok = lanes == 16 ? __builtin_cpu_supports("avx512f")
                                : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    if (!ok) return 0.0;
    constexpr int64_t steps = 20'000'000;  // ~0.06 s a thread at 4 GHz
    double best = 0.0;
    for (int r = 0; r < rounds; ++r) {
        std::vector<float> out(static_cast<size_t>(threads));
        const double s = timed_on_threads(threads, [&](int i) { out[i] = lanes == 16 ? fma_chains16(steps) : fma_chains8(steps); });
        for (float v : out) g_sink = g_sink + static_cast<uint64_t>(v);
        best = std::max(best, static_cast<double>(steps) * 12 * lanes * threads / s / 1e9);
    }
    return best;
#else
    return 0.0;
#endif
}

}  // namespace cbs
