#include "timeline.h"

#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "atoll/util/files.h"

namespace atl::train {

void Timeline::record(int step, Kind kind, int unit, double begin, double wait, double end) {
  events_.push_back({static_cast<double>(step), static_cast<double>(kind),
                     static_cast<double>(unit), begin, wait, end});
}

void Timeline::write(comm::Communicator& comm, const std::filesystem::path& file) const {
  constexpr std::size_t fields = sizeof(Event) / sizeof(double);
  std::vector<double> mine;
  mine.reserve(events_.size() * fields);
  for (const auto& e : events_)
    mine.insert(mine.end(), {e.step, e.kind, e.unit, e.begin, e.wait, e.end});
  std::vector<std::size_t> counts;
  const auto all = comm.allgatherv<double>(std::span<const double>(mine), &counts);
  if (comm.rank() != 0) return;
  static const char* kinds[] = {"forward", "backward", "sync"};
  std::string text;
  std::size_t at = 0;
  for (std::size_t r = 0; r < counts.size(); ++r) {
    for (std::size_t k = 0; k < counts[r]; k += fields, at += fields) {
      const double* e = &all[at];
      nlohmann::json j{{"rank", r},
                       {"step", static_cast<int>(e[0])},
                       {"kind", kinds[static_cast<int>(e[1])]},
                       {"unit", static_cast<int>(e[2])},
                       {"begin", e[3]},
                       {"end", e[5]}};
      if (static_cast<int>(e[1]) == static_cast<int>(Kind::sync)) j["wait"] = e[4];
      text += j.dump() + "\n";
    }
  }
  util::write_file_atomic(file, text);
}

}  // namespace atl::train
