// OpenBLAS (scipy-openblas32), where the build links it (CBS_HAVE_BLAS): the CPU's f32
// products and attention run its single-threaded sgemm on ggml's threads.
#pragma once

#include <string>

#ifdef CBS_HAVE_BLAS
#include <cblas.h>  // scipy-openblas32: every symbol carries a scipy_ prefix
#endif

namespace cbs {

// Whether the build links OpenBLAS (matmul's and attention's CPU path).
bool have_blas();
// The kernel set OpenBLAS chose for this CPU ("SkylakeX", "Haswell", ...), "" without OpenBLAS.
std::string blas_core();

#ifdef CBS_HAVE_BLAS
// ggml's threads split every product between them, so each sgemm call runs on one thread
// (OpenBLAS's own pool would oversubscribe the cores); set once, on first use.
void openblas_one_thread();
#endif

}  // namespace cbs
