#include "zen_row_sync.h"

#include <fmt/format.h>

#include "atoll/comm/charged_work.h"
#include "atoll/util/fault_point.h"

namespace atl::sync {

ZenRowSync::ZenRowSync(std::uint64_t seed, PullCoding coding)
    : seed_(seed),
      coding_(coding),
      op_partition_(comm::cpu_op_id("zen_rows.partition")),
      op_aggregate_(comm::cpu_op_id("zen_rows.aggregate")),
      op_encode_(comm::cpu_op_id("zen_rows.encode")),
      op_decode_(comm::cpu_op_id("zen_rows.decode")) {}

template <class Index>
void ZenRowSync::run(Communicator& comm, const SparseGradient<Index>& grad,
                     SyncResult<Index>& out) {
  const auto n = static_cast<std::uint32_t>(comm.size());
  const auto rank = static_cast<std::uint32_t>(comm.rank());
  const std::uint64_t R = grad.blocks();
  const std::uint32_t w = grad.width;
  // (check_input made sure every rank has the same M and width.)
  layout_ = RowLayout(R, n, seed_);  // no table: nothing to build
  RowPartition<Index>& part = [&]() -> RowPartition<Index>& {
    if constexpr (std::is_same_v<Index, std::uint32_t>)
      return part32_;
    else
      return part64_;
  }();
  const double value_bytes = 4.0 * static_cast<double>(grad.value_count());
  {
    PhaseScope phase(comm, out.stats, "partition");
    comm::ChargedWork work(comm, op_partition_, static_cast<double>(grad.nnz()), value_bytes);
    zen_row_partition(grad, layout_, part);
  }
  std::vector<std::size_t> recv_counts;
  {
    PhaseScope phase(comm, out.stats, "push");
    recv_counts = comm.alltoall<std::size_t>(part.counts);
    std::size_t total = 0;
    for (auto c : recv_counts) total += c;
    received_.resize(total);
    comm.alltoallv<std::uint8_t>(part.bytes, part.counts, received_, recv_counts);
    out.stats.push_load_bytes = total - recv_counts[rank];
  }
  {
    PhaseScope phase(comm, out.stats, "aggregate");
    comm::ChargedWork work(comm, op_aggregate_, 0, static_cast<double>(received_.size()));
    zen_row_aggregate<Index>(layout_, rank, w, received_, recv_counts, sums_);
  }
  util::fault_point("pull");
  block_.clear();
  {
    PhaseScope phase(comm, out.stats, "encode");
    comm::ChargedWork work(comm, op_encode_, static_cast<double>(sums_.rows),
                           4.0 * static_cast<double>(sums_.values.size()));
    zen_row_encode<Index>(layout_, rank, sums_, coding_, block_);
  }
  std::vector<std::uint64_t> rows(n);
  std::vector<PullCoding> codings(n);
  std::vector<std::size_t> counts(n);
  {
    PhaseScope phase(comm, out.stats, "pull");
    const std::uint64_t mine[2] = {sums_.rows, static_cast<std::uint64_t>(coding_)};
    const auto reported = comm.allgather_each<std::uint64_t>(mine);
    std::size_t total = 0;
    for (std::uint32_t j = 0; j < n; ++j) {
      rows[j] = reported[2 * j];
      if (reported[2 * j + 1] >= kPullCodings || rows[j] > R) {
        throw MalformedMessage(fmt::format("zen: server {} announced {} rows of {}, pull coding {}",
                                           j, rows[j], R, reported[2 * j + 1]));
      }
      codings[j] = static_cast<PullCoding>(reported[2 * j + 1]);
      counts[j] = zen_row_block_bytes(layout_, rows[j], w, sizeof(Index), codings[j]);
      total += counts[j];
    }
    all_.resize(total);
    auto request = comm.iallgatherv<std::uint8_t>(block_, counts, all_);
    comm.wait(request);
    out.stats.pull_load_bytes = block_.size() * (n - 1);
  }
  {
    PhaseScope phase(comm, out.stats, "decode");
    comm::ChargedWork work(comm, op_decode_, 0, static_cast<double>(all_.size()));
    out.dense_form = false;
    zen_row_decode<Index>(layout_, w, all_, counts, rows, codings, out.sparse);
  }
}

template void ZenRowSync::run(Communicator&, const SparseGradient<std::uint32_t>&,
                              SyncResult<std::uint32_t>&);
template void ZenRowSync::run(Communicator&, const SparseGradient<std::uint64_t>&,
                              SyncResult<std::uint64_t>&);

}  // namespace atl::sync
