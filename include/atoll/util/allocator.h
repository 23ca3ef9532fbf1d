// Allocator tuning for processes that allocate gradient-sized buffers every step.
#pragma once

namespace atl::util {

// Keeps freed memory in the heap instead of returning it to the kernel (glibc mallopt), so buffers
// reallocated every step do not pay first-touch page faults each time: the behaviour of the caching
// allocators training frameworks use. Call once at the start of main.
void keep_freed_memory();

}  // namespace atl::util
