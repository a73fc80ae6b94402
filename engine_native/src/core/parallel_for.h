// Host loops split between threads: f(begin, end) over contiguous shares of [0, n).
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <thread>
#include <vector>

namespace cbs {

// Calls f(i0, i1) for `threads` contiguous shares of [0, n) (fewer when a share would hold
// fewer than `min_share` items; one share runs on the calling thread), each on its own
// thread, and waits; the first exception a share threw is rethrown here.
template <class F>
void parallel_for(int64_t n, int threads, int64_t min_share, F&& f) {
    const int64_t k = std::clamp<int64_t>(threads, 1, std::max<int64_t>(1, n / std::max<int64_t>(1, min_share)));
    if (k == 1) {
        f(int64_t{0}, n);
        return;
    }
    std::vector<std::thread> pool;
    std::vector<std::exception_ptr> errors(static_cast<size_t>(k));
    for (int64_t i = 0; i < k; ++i)
        pool.emplace_back([&, i] {
            try {
                f(n * i / k, n * (i + 1) / k);
            } catch (...) {
                errors[static_cast<size_t>(i)] = std::current_exception();
            }
        });
    for (std::thread& th : pool) th.join();
    for (const std::exception_ptr& e : errors)
        if (e) std::rethrow_exception(e);
}

}  // namespace cbs
