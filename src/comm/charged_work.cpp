#include "atoll/comm/charged_work.h"

#include <stdexcept>

namespace atl::comm {

ChargedWork::ChargedWork(Communicator& comm, std::size_t op, double items, double bytes)
    : comm_(comm), charging_(comm.cpu_charging()), op_(op), items_(items), bytes_(bytes) {
  if (charging_ == nullptr || charging_->mode == CpuCharging::Mode::measured) return;
  if (charging_->depth++ > 0) {
    --charging_->depth;
    throw std::logic_error("ChargedWork sections must not nest");
  }
  if (charging_->mode == CpuCharging::Mode::table)
    comm_.fixed_compute_begin();
  else
    start_s_ = comm_.wtime();
}

ChargedWork::~ChargedWork() {
  if (charging_ == nullptr || charging_->mode == CpuCharging::Mode::measured) return;
  --charging_->depth;
  if (charging_->mode == CpuCharging::Mode::table)
    comm_.fixed_compute_end(charging_->table.costs[op_].seconds(items_, bytes_));
  else
    charging_->samples[op_].add(items_, bytes_, comm_.wtime() - start_s_);
}

}  // namespace atl::comm
