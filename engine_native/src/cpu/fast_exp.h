// e^x for x <= 0 in plain arithmetic the compiler vectorises, written once for the CPU's
// element-wise kernels (cpu/activations.cpp) and the softmax (cpu/softmax.cpp).
#pragma once

#include <cstdint>
#include <cstring>

namespace cbs {

// e^x for x <= 0 within about one ulp (Cody-Waite reduction, degree-6 Taylor polynomial on
// |r| <= ln2/2: truncation error 1.2e-7 relative), in plain arithmetic the compiler vectorises.
static inline float exp_nonpositive(float x) {
    x = x < -87.0f ? -87.0f : x;                                   // 2^n stays a normal float; e^-87 ~ 1.6e-38
    const float n = (x * 1.44269504f + 12582912.0f) - 12582912.0f;  // round to nearest (1.5 * 2^23 trick)
    const float r = (x - n * 0.693145751953125f) - n * 1.428606765330187e-06f;
    const float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120 + r * (1.0f / 720))))));
    const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
    float two_n;
    std::memcpy(&two_n, &bits, sizeof two_n);
    return p * two_n;
}

}  // namespace cbs
