#include "atoll/util/memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <sstream>

namespace atl::util {
namespace {

std::optional<std::uint64_t> read_number(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return std::nullopt;
  try {
    return std::stoull(word);
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

std::optional<std::uint64_t> meminfo_available() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    std::uint64_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::uint64_t> memory_available_bytes() {
  auto available = meminfo_available();
  const auto limit = read_number("/sys/fs/cgroup/memory.max");
  const auto used = read_number("/sys/fs/cgroup/memory.current");
  if (limit && used) {
    const std::uint64_t left = *limit > *used ? *limit - *used : 0;
    available = available ? std::min(*available, left) : left;
  }
  return available;
}

std::string format_bytes(double bytes) {
  const char* units[] = {"B", "kB", "MB", "GB", "TB", "PB", "EB"};
  int u = 0;
  while (bytes >= 1000 && u < 6) bytes /= 1000, ++u;
  return u == 0 ? fmt::format("{:.0f} B", bytes) : fmt::format("{:.3g} {}", bytes, units[u]);
}

std::optional<std::string> memory_problem(std::uint64_t bytes, int ranks_on_node,
                                          const std::string& what) {
  constexpr std::uint64_t kAlwaysFine = std::uint64_t{64} << 20;  // skip reading /proc
  if (bytes <= kAlwaysFine) return std::nullopt;
  const auto available = memory_available_bytes();
  if (!available) return std::nullopt;
  const std::uint64_t share = *available / static_cast<std::uint64_t>(std::max(ranks_on_node, 1));
  if (bytes <= share) return std::nullopt;
  return fmt::format(
      "{} needs {} per rank ({} bytes), more than this node has free for each of its {} ranks "
      "({} of {})",
      what, format_bytes(static_cast<double>(bytes)), bytes, ranks_on_node,
      format_bytes(static_cast<double>(share)), format_bytes(static_cast<double>(*available)));
}

}  // namespace atl::util
