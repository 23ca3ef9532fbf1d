// --timeline: when each model unit computed and synchronized on each rank, for checking that
// EDiT's layer-wise synchronization really runs during compute. Every rank records its own
// events; write() gathers them and rank 0 writes one JSON object per line:
//   {"rank", "step", "kind": "forward"|"backward"|"sync", "unit", "begin", "end"} and, for sync
//   events, "wait" (when the rank began to wait for it; begin is when it was posted).
// Times are seconds on the engine's clock (simulated under SMPI). Free of LibTorch. Private to
// src/train.
#pragma once

#include <filesystem>
#include <vector>

#include "atoll/comm/communicator.h"

namespace atl::train {

class Timeline {
 public:
  enum class Kind { forward = 0, backward = 1, sync = 2 };
  void record(int step, Kind kind, int unit, double begin, double wait, double end);
  std::size_t size() const { return events_.size(); }
  // Collective: every rank's events to rank 0, which writes `file` atomically.
  void write(comm::Communicator& comm, const std::filesystem::path& file) const;

 private:
  struct Event {
    double step, kind, unit, begin, wait, end;  // doubles: one allgatherv of plain numbers
  };
  std::vector<Event> events_;
};

}  // namespace atl::train
