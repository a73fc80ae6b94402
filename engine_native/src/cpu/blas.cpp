#include "cpu/blas.h"

namespace cbs {

bool have_blas() {
#ifdef CBS_HAVE_BLAS
    return true;
#else
    return false;
#endif
}

std::string blas_core() {
#ifdef CBS_HAVE_BLAS
    const char* name = scipy_openblas_get_corename();
    return name ? name : "";
#else
    return "";
#endif
}

#ifdef CBS_HAVE_BLAS
void openblas_one_thread() {
    static const bool once = (scipy_openblas_set_num_threads(1), true);
    (void)once;
}
#endif

}  // namespace cbs
