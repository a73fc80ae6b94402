#include "core/window.h"

#include <cmath>

namespace cbs {

std::vector<float> hann_window(int n, bool periodic) {
    std::vector<float> w(n > 0 ? n : 0);
    const int d = periodic ? n : n - 1;
    for (int i = 0; i < n; ++i) w[i] = d > 0 ? static_cast<float>(0.5 - 0.5 * std::cos(2.0 * M_PI * i / d)) : 1.0f;
    return w;
}

}  // namespace cbs
