// Buffers whose data start on a cache line, for the CPU's packed matrix operands.
//
// An AMX tile row is 64 bytes, as is an AVX-512 register: from an address off a cache line,
// each such load touches two lines, and tile products over operands 16 bytes off a line
// (std::vector's alignment) run at about half the rate of the same products over aligned ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace cbs {

constexpr size_t kCacheLine = 64;

// p rounded up to the next cache line (storage handed in must have kCacheLine bytes spare).
inline void* align_to_line(void* p) {
    const auto at = reinterpret_cast<uintptr_t>(p);
    return reinterpret_cast<void*>((at + kCacheLine - 1) & ~static_cast<uintptr_t>(kCacheLine - 1));
}

// A growable array of T (trivially copyable) whose first element lies on a cache line.
template <class T>
class AlignedBuffer {
public:
    // Room for n elements (the contents are not kept).
    T* resize(size_t n) {
        raw_.resize(n + kCacheLine / sizeof(T));
        return data();
    }
    T* data() { return static_cast<T*>(align_to_line(raw_.data())); }
    const T* data() const { return static_cast<const T*>(align_to_line(const_cast<T*>(raw_.data()))); }

private:
    std::vector<T> raw_;
};

}  // namespace cbs
