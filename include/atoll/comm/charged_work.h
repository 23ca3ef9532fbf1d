// A section of computation named for the CPU cost table (cpu_costs.h): its operation and size.
//
//   { ChargedWork work(comm, op_id, items, bytes); ...compute, no MPI call... }
//
// What it does depends on the communicator's charging mode (Communicator::set_cpu_charging):
// - measured (the default): nothing; under SMPI the section's real time is charged as all
//   computation is;
// - record: adds (items, bytes, the section's seconds on the engine's clock) to its
//   operation's samples;
// - table (SMPI only): the section's real time is not charged; its operation's cost for
//   (items, bytes) is, exactly.
// Sections must not nest and must not call MPI (std::logic_error for nesting).
#pragma once

#include <cstddef>

#include "atoll/comm/communicator.h"
#include "atoll/comm/cpu_costs.h"

namespace atl::comm {

class ChargedWork {
 public:
  ChargedWork(Communicator& comm, std::size_t op, double items, double bytes = 0);
  ~ChargedWork();
  ChargedWork(const ChargedWork&) = delete;
  ChargedWork& operator=(const ChargedWork&) = delete;
  // For sizes known only at the end of the section (a decode's output).
  void set_size(double items, double bytes) { items_ = items, bytes_ = bytes; }

 private:
  Communicator& comm_;
  CpuCharging* charging_;
  std::size_t op_;
  double items_, bytes_;
  double start_s_ = 0;
};

}  // namespace atl::comm
