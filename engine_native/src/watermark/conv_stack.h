// A stack of 1-D convolutions over time ("same" padding, stride 1), each but the last
// followed by LeakyReLU: PerthNet's encoder and each of its decoder's three branches
// (perth_net_implicit/model: Conv(i, o, k) = nn.Conv1d(padding=(k-1)/2) + LeakyReLU).
//
// Activations are time-major ([T][C], channels contiguous). A layer of kernel K is K
// products of the input shifted by one frame each with that tap's [C_out][C_in] weights,
// accumulated (no im2col copy): OpenBLAS sgemm in f32 where the build links it, a plain
// loop otherwise; the frames are split between `threads` threads.
#pragma once

#include <cstdint>
#include <vector>

namespace cbs {

struct Conv1dLayer {
    int c_in = 0, c_out = 0, kernel = 1;
    std::vector<float> weight;  // [kernel][c_out][c_in]
    std::vector<float> bias;    // [c_out]
};

class ConvStack {
public:
    ConvStack() = default;
    ConvStack(std::vector<Conv1dLayer> layers, float leaky_slope);

    int c_in() const { return layers_.front().c_in; }
    int c_out() const { return layers_.back().c_out; }
    int64_t parameters() const;

    // x [T][c_in()] -> [T][c_out()].
    std::vector<float> forward(const float* x, int64_t T, int threads) const;

private:
    std::vector<Conv1dLayer> layers_;
    float slope_ = 0.01f;
};

}  // namespace cbs
