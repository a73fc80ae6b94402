// The engine's one window function.
#pragma once

#include <vector>

namespace cbs {

// The Hann window of n values as float32: 0.5 - 0.5 cos(2 pi i / D) computed in double,
// D = n when periodic (torch.hann_window(n), scipy get_window("hann", n)), n - 1
// otherwise (torch.hann_window(n, periodic=False)).
std::vector<float> hann_window(int n, bool periodic);

}  // namespace cbs
