// CPU cost tables (`bench sync --cpu-cost FILE`, include/atoll/comm/cpu_costs.h): JSON whose
// operations, costs and samples are validated; an accepted table must save and load back equal.
#include "atoll/comm/cpu_costs.h"

#include <unistd.h>

#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using atl::comm::CpuCostTable;
  CpuCostTable t;
  try {
    t = CpuCostTable::parse(std::span(data, size), "fuzz-costs.json");
  } catch (const std::runtime_error&) {
    return 0;
  }
  for (const auto& c : t.costs) (void)c.seconds(1e6, 1e6);
  const auto file = std::filesystem::temp_directory_path() /
                    ("atoll-fuzz-costs-" + std::to_string(::getpid()) + ".json");
  t.save(file);
  const auto u = CpuCostTable::load(file);
  std::filesystem::remove(file);
  for (std::size_t i = 0; i < t.costs.size(); ++i) {
    if (u.costs[i].ns_per_item != t.costs[i].ns_per_item || u.samples[i].s != t.samples[i].s)
      throw std::logic_error("a cost table did not load back as saved");
  }
  return 0;
}
