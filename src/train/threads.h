#pragma once

namespace atl::train {

// One compute thread per rank: LibTorch's intra-op pool and the BLAS library's own pool (Debian's
// LibTorch calls the system BLAS, OpenBLAS's pthreads build, whose threads torch's setting does
// not reach). A rank per core is how atoll runs; a second BLAS thread per rank oversubscribes the
// cores and spins: 4 ranks of the tiny preset on 2 cores ran 50 steps in 15.9-16.9 s with
// OpenBLAS's default against 14.2-14.3 s with this call.
void use_one_compute_thread();

}  // namespace atl::train
