#include "zen_row_sync.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <iostream>

#include "atoll/comm/charged_work.h"
#include "atoll/util/fault_point.h"
#include "zen_pull.h"

namespace atl::sync {

ZenRowSync::ZenRowSync(std::uint64_t seed, PullCoding coding, bool views)
    : seed_(seed),
      coding_(coding),
      op_partition_(comm::cpu_op_id("zen_rows.partition")),
      op_aggregate_(comm::cpu_op_id("zen_rows.aggregate")),
      op_encode_(comm::cpu_op_id("zen_rows.encode")),
      op_decode_(comm::cpu_op_id(views ? "zen_rows.view" : "zen_rows.decode")),
      views_(views) {}

std::span<std::uint8_t> ZenRowSync::all_bytes(std::size_t bytes) {
  all_.resize((bytes + sizeof(float) - 1) / sizeof(float));
  return {reinterpret_cast<std::uint8_t*>(all_.data()), bytes};
}

namespace {
// What the push's first exchange carries to each peer with SchemeOptions::zen_check_in_push.
struct PushHeader {
  std::uint64_t count;  // bytes for that peer
  std::uint64_t flags;  // bit 0: this rank's input has a problem; bits 8-15: its index bytes
  std::uint64_t elements, width;
};

// The alltoall of counts with every rank's input verdict, settled before any data moves.
std::vector<std::size_t> counts_with_check(Communicator& comm, std::span<const std::size_t> counts,
                                           const std::optional<std::string>& problem,
                                           std::uint64_t elements, std::uint32_t width,
                                           std::uint32_t index_bytes) {
  std::vector<PushHeader> send(counts.size());
  const std::uint64_t flags = (problem ? 1u : 0u) | std::uint64_t{index_bytes & 0xffu} << 8;
  for (std::size_t j = 0; j < counts.size(); ++j) send[j] = {counts[j], flags, elements, width};
  const auto got = comm.alltoall<PushHeader>(send);
  InputVerdicts all{false, elements, elements, width, width, index_bytes, index_bytes};
  std::vector<std::size_t> recv_counts(got.size());
  for (std::size_t j = 0; j < got.size(); ++j) {
    all.failed = all.failed || (got[j].flags & 1u) != 0;
    all.min_elements = std::min(all.min_elements, got[j].elements);
    all.max_elements = std::max(all.max_elements, got[j].elements);
    all.min_width = std::min(all.min_width, got[j].width);
    all.max_width = std::max(all.max_width, got[j].width);
    const std::uint64_t theirs = got[j].flags >> 8 & 0xffu;
    all.min_index_bytes = std::min(all.min_index_bytes, theirs);
    all.max_index_bytes = std::max(all.max_index_bytes, theirs);
    recv_counts[j] = got[j].count;
  }
  settle_input(comm, all, problem, elements, width);
  return recv_counts;
}
}  // namespace

template <class Index>
void ZenRowSync::run(Communicator& comm, const SparseGradient<Index>& grad, SyncResult<Index>& out,
                     const std::optional<std::string>* input_problem) {
  const auto n = static_cast<std::uint32_t>(comm.size());
  const auto rank = static_cast<std::uint32_t>(comm.rank());
  const bool failed = input_problem && input_problem->has_value();
  const std::uint64_t R = failed ? 0 : grad.blocks();
  const std::uint32_t w = grad.width;
  // (check_input made sure every rank has the same M and width, or counts_with_check does below
  // before anything depends on it.)
  RowPartition<Index>& part = [&]() -> RowPartition<Index>& {
    if constexpr (std::is_same_v<Index, std::uint32_t>)
      return part32_;
    else
      return part64_;
  }();
  const double value_bytes = 4.0 * static_cast<double>(grad.value_count());
  if (failed) {
    part.counts.assign(n, 0);
  } else {
    layout_ = RowLayout(R, n, seed_);  // no table: nothing to build
    PhaseScope phase(comm, out.stats, "partition");
    comm::ChargedWork work(comm, op_partition_, static_cast<double>(grad.nnz()), value_bytes);
    zen_row_partition(grad, layout_, part);
  }
  std::vector<std::size_t> recv_counts;
  {
    PhaseScope phase(comm, out.stats, "push");
    recv_counts = input_problem ? counts_with_check(comm, part.counts, *input_problem,
                                                    grad.elements, grad.width, sizeof(Index))
                                : comm.alltoall<std::size_t>(part.counts);
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
  pull(
      comm, w, sizeof(Index), out.stats,
      [&](std::size_t s0, std::size_t s1) {
        return zen_row_encode<Index>(layout_, rank, sums_, coding_, s0, s1, block_);
      },
      [&](std::size_t total) {
        out.dense_form = false;
        out.sparse.elements = R * w;
        out.sparse.width = w;
        out.sparse.indices.resize(total);
        out.views.resize(views_ ? total : 0);
        out.sparse.values.resize(views_ ? 0 : total * w);
      },
      [&](std::size_t s0, std::size_t s1, std::span<const std::uint8_t> blocks,
          std::span<const std::size_t> counts, std::span<const std::uint64_t> rows,
          std::span<const PullCoding> codings, std::size_t pos, std::size_t capacity) {
        return zen_row_decode_chunk<Index>(layout_, w, s0, s1, blocks, counts, rows, codings,
                                           out.sparse.indices.data() + pos,
                                           views_ ? nullptr : out.sparse.values.data() + pos * w,
                                           capacity, views_ ? out.views.data() + pos : nullptr);
      });
}

// The pull, pipelined as Zen's element pull is: one allgather of every server's rows per bucket of
// strata (and its coding) gives every rank the same chunk bounds (about equal rows each) and
// every block's size; then chunk p + 1 is encoded while chunk p is on the wire, and chunk p is
// decoded as soon as it has arrived, while p + 1 travels.
void ZenRowSync::pull(Communicator& comm, std::uint32_t w, std::size_t index_bytes,
                      SyncStats& stats, const Encode& encode_chunk, const Size& size_result,
                      const Decode& decode_chunk) {
  const auto n = static_cast<std::uint32_t>(comm.size());
  const auto rank = static_cast<std::uint32_t>(comm.rank());
  const double pull_start = comm.wtime();
  const auto traffic_start = comm.traffic();
  // Buckets of about equal numbers of strata (slots), at most kBuckets (at least one stratum each).
  const std::size_t slots = layout_.slots();
  const std::size_t H = std::max<std::size_t>(1, std::min<std::size_t>(slots, kBuckets));
  auto bucket_stratum = [&](std::size_t b) { return b * slots / H; };  // the bucket's first stratum
  std::vector<std::uint64_t> mine(H + 1);
  for (std::size_t b = 0; b < H; ++b)
    mine[b] = sums_.rows_in(bucket_stratum(b), bucket_stratum(b + 1));
  mine[H] = static_cast<std::uint64_t>(coding_);
  // Sent to every rank at once where ranks are few (one latency across a WAN, not log2 n).
  const auto reported = comm.allgather_each_direct<std::uint64_t>(mine);
  std::vector<PullCoding> codings(n);
  std::vector<double> weight(H, 0.0);
  std::uint64_t total = 0;
  for (std::uint32_t j = 0; j < n; ++j) {
    if (reported[j * (H + 1) + H] >= kPullCodings) {
      throw MalformedMessage(
          fmt::format("zen: server {} announced pull coding {}", j, reported[j * (H + 1) + H]));
    }
    codings[j] = static_cast<PullCoding>(reported[j * (H + 1) + H]);
    for (std::size_t b = 0; b < H; ++b) {
      weight[b] += static_cast<double>(reported[j * (H + 1) + b]);
      total += reported[j * (H + 1) + b];
    }
  }
  if (total > layout_.rows()) {
    throw MalformedMessage(
        fmt::format("zen: servers announced {} rows of {}", total, layout_.rows()));
  }
  // Chunk bounds among the bucket bounds, about total / chunks() rows each.
  std::vector<std::size_t> bounds{0};  // buckets
  double sum = 0;
  for (std::size_t b = 0; b < H; ++b) {
    sum += weight[b];
    const double target = static_cast<double>(total) * static_cast<double>(bounds.size()) /
                          static_cast<double>(chunks());
    if (b + 1 < H && sum >= target && sum > 0) bounds.push_back(b + 1);
  }
  bounds.push_back(H);
  const std::size_t chunks = bounds.size() - 1;
  std::vector<std::vector<std::size_t>> counts(chunks, std::vector<std::size_t>(n));
  std::vector<std::vector<std::uint64_t>> rows(chunks, std::vector<std::uint64_t>(n, 0));
  std::vector<std::size_t> chunk_begin(chunks + 1, 0), chunk_rows(chunks, 0);
  std::size_t my_bytes = 0;
  for (std::size_t p = 0; p < chunks; ++p) {
    const std::size_t s0 = bucket_stratum(bounds[p]), s1 = bucket_stratum(bounds[p + 1]);
    chunk_begin[p + 1] = chunk_begin[p];
    for (std::uint32_t j = 0; j < n; ++j) {
      for (std::size_t b = bounds[p]; b < bounds[p + 1]; ++b)
        rows[p][j] += reported[j * (H + 1) + b];
      counts[p][j] = zen_row_block_bytes(s1 - s0, rows[p][j], w, index_bytes, codings[j]);
      chunk_begin[p + 1] += counts[p][j];
      chunk_rows[p] += rows[p][j];
    }
    my_bytes += counts[p][rank];
  }
  const std::span<std::uint8_t> all = all_bytes(chunk_begin[chunks]);
  block_.clear();
  block_.reserve(my_bytes);  // never moves while a chunk is on the wire
  size_result(total);
  std::vector<std::size_t> block_begin(chunks + 1, 0);
  std::vector<comm::Request> requests(chunks);
  double encode_s = 0, decode_s = 0;
  auto encode = [&](std::size_t p) {
    const double t0 = comm.wtime();
    block_begin[p] = block_.size();
    const std::size_t s0 = bucket_stratum(bounds[p]), s1 = bucket_stratum(bounds[p + 1]);
    {
      comm::ChargedWork work(comm, op_encode_, static_cast<double>(rows[p][rank]),
                             4.0 * static_cast<double>(rows[p][rank] * w));
      const std::size_t bytes = encode_chunk(s0, s1);
      if (bytes != counts[p][rank]) {
        std::cerr << fmt::format(
            "atoll: internal error: rank {}: zen row pull chunk {} is {} bytes, announced {}\n",
            rank, p, bytes, counts[p][rank]);
        comm::MpiRuntime::abort_job(70);
      }
    }
    encode_s += comm.wtime() - t0;
  };
  auto post = [&](std::size_t p) {
    requests[p] = comm.iallgatherv<std::uint8_t>(
        std::span<const std::uint8_t>(block_.data() + block_begin[p], counts[p][rank]), counts[p],
        all.subspan(chunk_begin[p], chunk_begin[p + 1] - chunk_begin[p]));
  };
  std::exception_ptr failure;  // a malformed block: finish the collectives, then throw
  std::size_t pos = 0;
  encode(0);
  post(0);
  for (std::size_t p = 0; p < chunks; ++p) {
    if (p + 1 < chunks) encode(p + 1);
    comm.wait(requests[p]);
    if (p + 1 < chunks) post(p + 1);
    if (failure) continue;
    const double t0 = comm.wtime();
    try {
      comm::ChargedWork work(comm, op_decode_, static_cast<double>(chunk_rows[p]),
                             views_ ? 0.0 : 4.0 * static_cast<double>(chunk_rows[p] * w));
      pos += decode_chunk(bucket_stratum(bounds[p]), bucket_stratum(bounds[p + 1]),
                          all.subspan(chunk_begin[p], chunk_begin[p + 1] - chunk_begin[p]),
                          counts[p], rows[p], codings, pos, total - pos);
    } catch (...) {
      failure = std::current_exception();
    }
    decode_s += comm.wtime() - t0;
  }
  if (failure) std::rethrow_exception(failure);
  stats.pull_load_bytes = my_bytes * (n - 1);
  record_pull_phases(comm, stats, pull_start, traffic_start, encode_s, decode_s);
}

template void ZenRowSync::run(Communicator&, const SparseGradient<std::uint32_t>&,
                              SyncResult<std::uint32_t>&, const std::optional<std::string>*);
template void ZenRowSync::run(Communicator&, const SparseGradient<std::uint64_t>&,
                              SyncResult<std::uint64_t>&, const std::optional<std::string>*);

}  // namespace atl::sync
