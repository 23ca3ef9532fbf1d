// How much memory a process may still take: refusing a too-large request up front, naming its
// size, beats std::bad_alloc or the kernel's OOM killer halfway through a collective.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace atl::util {

// Bytes this process may still allocate: the smaller of MemAvailable (/proc/meminfo) and the
// cgroup's memory.max minus memory.current, where they exist; nullopt if neither can be read.
std::optional<std::uint64_t> memory_available_bytes();

// "1.50 GB", "12.0 MB": decimal units, three significant digits.
std::string format_bytes(double bytes);

// nullopt if `bytes` per rank fit the available memory shared by `ranks_on_node` ranks, else a
// message naming `what`, the bytes it needs per rank and what this node has.
std::optional<std::string> memory_problem(std::uint64_t bytes, int ranks_on_node,
                                          const std::string& what);

}  // namespace atl::util
