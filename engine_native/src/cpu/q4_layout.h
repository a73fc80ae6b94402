// The layout T3's Q4_0 kernel reads (cpu/q4_matmul.h): its block and chunk sizes and one
// quantised activation column (ActLayout); shared by the packing and products
// (cpu/q4_matmul.cpp) and the dot-product kernels (cpu/q4_dot.cpp).
#pragma once

#include <cstdint>

namespace cbs::q4 {

constexpr int64_t kBlock = 32;    // values per Q4_0 / Q8_0 block
constexpr int64_t kChunk = 16;    // blocks per step of the kernel (one zmm of scales)
constexpr int64_t kGroup = 4;     // blocks per 64-byte load of weights
constexpr int64_t kRows = 8;      // rows interleaved in one stream (the last group: the rest)
// Bytes ahead of the weight stream, prefetched into L2 (not L1: L1 prefetches hold the few
// fill buffers a core has); 12 K was the best distance measured (docs/CPU.md).
constexpr int kPrefetch = 12288;
// One column of quantised activations: kChunk-padded blocks, values grouped by kGroup = 4
// blocks b .. b+3 to match one 64-byte load of their weights, whose low nibbles are values
// 0-15 and high nibbles 16-31 of each block: [b 0-15 | .. | b+3 0-15][b 16-31 | .. | b+3 16-31];
// then each block's scale and 8 * scale * sum(q) (the Q4_0 offset: sum (n - 8) q = sum n q - 8 sum q).
struct ActLayout {
    int64_t blocks, padded, bytes;
    explicit ActLayout(int64_t K)
        : blocks(K / kBlock), padded((K / kBlock + kChunk - 1) / kChunk * kChunk), bytes(padded * (kBlock + 8)) {}
    int8_t* values(uint8_t* col) const { return reinterpret_cast<int8_t*>(col); }
    float* scales(uint8_t* col) const { return reinterpret_cast<float*>(col + padded * kBlock); }
    float* offsets(uint8_t* col) const { return scales(col) + padded; }
    const int8_t* values(const uint8_t* col) const { return reinterpret_cast<const int8_t*>(col); }
    const float* scales(const uint8_t* col) const { return reinterpret_cast<const float*>(col + padded * kBlock); }
    const float* offsets(const uint8_t* col) const { return scales(col) + padded; }
};

#if defined(__x86_64__) || defined(_M_X64)
#define AVX512_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,f16c,fma")))
#define AVX2_TARGET __attribute__((target("avx2,f16c,fma")))

// The AVX-512 kernel where the CPU has AVX-512 F/BW/VL/VNNI; else the AVX2 one (8-lane
// vectors, maddubs for dpbusd) over the same packed layout. CBS_Q4_KERNEL=avx2 takes the
// AVX2 one anyway (so that an AVX-512 machine's tests cover it too).
bool use_avx512();
#endif

}  // namespace cbs::q4
