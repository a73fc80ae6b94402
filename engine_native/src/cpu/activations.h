// Element-wise activations of the graphs, fused into one vectorised pass each on the CPU.
#pragma once

#include "ggml.h"

namespace cbs {

// GELU with the exact erf, x * (1 + erf(x / sqrt 2)) / 2, and Mish, x * tanh(softplus(x)).
// On the CPU (on_cpu, f32) one fused pass each in vectorised f32 arithmetic (ggml's CPU ops
// call libm's scalar erff / expf / tanhf per element), as accurate as erff; elsewhere ggml's ops.
ggml_tensor* gelu_erf(ggml_context* ctx, ggml_tensor* x, bool on_cpu);
// gelu_erf(x + b) for a bias b [ne0 of x]: on the CPU the addition inside GELU's pass (the
// same values: x + b rounded to f32 first, as ggml_add rounds it).
ggml_tensor* gelu_erf(ggml_context* ctx, ggml_tensor* x, ggml_tensor* b, bool on_cpu);
ggml_tensor* mish(ggml_context* ctx, ggml_tensor* x, bool on_cpu);
// GPT-2's tanh GELU (ggml_gelu with patches/0001), the same way on the CPU (libm's scalar
// tanhf per element is a visible share of a T3 step).
ggml_tensor* gelu_tanh(ggml_context* ctx, ggml_tensor* x, bool on_cpu);

}  // namespace cbs
