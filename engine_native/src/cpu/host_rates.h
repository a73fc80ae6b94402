// The host's two ceilings, measured here for the bench (engine_native/bounds.py): how fast
// its cores read memory (a T3 step reads every weight once, so its time is at least the
// weights' bytes over this) and how many f32 multiply-adds they retire (the exact mode's CFM
// is f32 products, so its time is at least its multiply-adds over this).
#pragma once

#include <cstdint>

namespace cbs {

// Sustained read bandwidth in GB/s (1e9 bytes) of `threads` threads reading a buffer of
// `megabytes` MiB (far larger than the caches) side by side, each its share; the best of
// `rounds` passes.
double host_read_gbps(int threads, int64_t megabytes, int rounds);

// f32 multiply-adds a second (1e9) retired by `threads` threads each running independent
// FMA chains in registers of `lanes` floats (16: AVX-512; 8: AVX2 with FMA; the others
// are refused), the best of `rounds`. 0 where the CPU lacks those instructions.
double host_f32_fma_gmacs(int threads, int lanes, int rounds);

}  // namespace cbs
