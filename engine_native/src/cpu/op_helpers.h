// What the CPU's custom graph operations (cpu/products.cpp, cpu/attention.cpp) share.
#pragma once

#include <cstdint>

#include "cpu/amx_gemm.h"
#include "cpu/products.h"
#include "ggml.h"

namespace cbs {

// Row i1 of batch (i2, i3) of an f32 tensor.
inline const float* row_at(const ggml_tensor* t, int64_t i1, int64_t i2, int64_t i3) {
    return reinterpret_cast<const float*>(static_cast<const char*>(t->data) + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3]);
}

// The op's userdata: non-null runs its products on AMX tiles.
inline void* amx_tag(CpuProducts how) {
    static int tag;
    return how.kind == CpuProducts::fast && amx_available() ? &tag : nullptr;
}

}  // namespace cbs
