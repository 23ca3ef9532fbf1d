// Which vector kernels this CPU runs. Hot loops that have an AVX-512 form (Zen's pull decode)
// are compiled for it with a function target attribute and chosen at run time, so one binary
// runs on every x86-64-v2 CPU and uses AVX-512 where the CPU has it.
#pragma once

namespace atl::util {

// True where the CPU has AVX-512 F, BW and VBMI2 and the environment does not set
// ATOLL_AVX512=0 (which selects the portable kernels, e.g. to compare or test them). Read once.
bool avx512_kernels();

}  // namespace atl::util
