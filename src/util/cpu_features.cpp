#include "atoll/util/cpu_features.h"

#include <cstdlib>
#include <string_view>

namespace atl::util {

bool avx512_kernels() {
  static const bool enabled = [] {
    const char* env = std::getenv("ATOLL_AVX512");
    if (env && std::string_view(env) == "0") return false;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vbmi2");
#else
    return false;
#endif
  }();
  return enabled;
}

}  // namespace atl::util
