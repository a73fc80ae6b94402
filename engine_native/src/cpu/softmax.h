// The softmax's exponentials on a row, in the form this CPU runs fastest (AVX-512, AVX2 with
// FMA, or a portable loop the compiler vectorises), the same arithmetic in each.
#pragma once

#include <cstdint>

namespace cbs {

// row[j] = e^(row[j] - max(row)) (within about one ulp, vectorised); returns their sum.
float exp_shifted_row(float* row, int64_t n);

}  // namespace cbs
