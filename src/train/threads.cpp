#include "threads.h"

#include <ATen/Parallel.h>  // at::set_num_threads, which torch::set_num_threads names
#include <dlfcn.h>

namespace atl::train {

void use_one_compute_thread() {
  at::set_num_threads(1);
  // Found at run time, so that any BLAS behind LibTorch links: OpenBLAS exports this setter,
  // the reference BLAS (single-threaded) does not.
  using Setter = void (*)(int);
  if (auto* set = reinterpret_cast<Setter>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(1);
  }
}

}  // namespace atl::train
