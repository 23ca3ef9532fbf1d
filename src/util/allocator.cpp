#include "atoll/util/allocator.h"

#include <malloc.h>

namespace atl::util {

void keep_freed_memory() {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, -1);
}

}  // namespace atl::util
