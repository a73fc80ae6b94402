// The dot products of T3's Q4_0 kernel (cpu/q4_matmul.h): a group of packed rows times one
// quantised activation column, or times two in one pass over the weights.
#pragma once

#include <cstdint>

#include "cpu/q4_layout.h"

namespace cbs::q4 {

// out[i] = row i of the group of G = 1 .. kRows packed rows (nb blocks each, from the group's
// first byte) times the column `col` (ActLayout L). `prefetch`: ask for the weights ahead
// (the group's first pass; a second finds them in the cache).
void dot_group(int64_t G, const uint8_t* group, int64_t nb, const uint8_t* col, const ActLayout& L, bool prefetch,
               float* out);
// dot_group for two columns: out0 from col0, out1 from col1, each bit-identical to dot_group's
// (every float operation of a column the same and in the same order); the weights' nibbles and
// scales are loaded and split once for both.
void dot_group2(int64_t G, const uint8_t* group, int64_t nb, const uint8_t* col0, const uint8_t* col1,
                const ActLayout& L, bool prefetch, float* out0, float* out1);

}  // namespace cbs::q4
