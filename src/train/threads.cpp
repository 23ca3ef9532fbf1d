#include "threads.h"

#include <dlfcn.h>
#include <torch/torch.h>

namespace atl::train {

void use_one_compute_thread() {
  torch::set_num_threads(1);
  // Found at run time, so that any BLAS behind LibTorch links: OpenBLAS exports this setter,
  // the reference BLAS (single-threaded) does not.
  using Setter = void (*)(int);
  if (auto* set = reinterpret_cast<Setter>(::dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) {
    set(1);
  }
}

}  // namespace atl::train
