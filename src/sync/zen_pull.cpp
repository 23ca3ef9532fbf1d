// Zen's pull: zen_pull.h.
#include "zen_pull.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <optional>

#include "atoll/comm/charged_work.h"
#include "zen_blocks.h"
#include "zen_fold.h"

namespace atl::sync {
namespace {

// Beside a server's pull coding in its counts: it folds in place (fold_order below).
constexpr std::uint64_t kFoldsInPlace = std::uint64_t{1} << 8;

// The coding a server's blocks take: Zen's bitmap_or_coo, folded in place, becomes
// bitmap_or_coo_smaller (announced as bitmap_or_coo with kFoldsInPlace).
PullCoding folded_coding(PullCoding announced, bool fold) {
  return fold && announced == PullCoding::bitmap_or_coo ? PullCoding::bitmap_or_coo_smaller
                                                        : announced;
}

// What reading a chunk in place costs, relative (bench sync --consume on this kind of host: a
// sparse bitmap word about 4 ns with its few values, a value of a dense one about 0.5 ns, a COO
// entry about 1 ns). Every rank computes it from the same allgathered counts.
double fold_cost(std::uint8_t format, std::size_t slots, std::uint64_t nnz) {
  if (format == zen_blocks::kBitmap)
    return 4.0 * static_cast<double>(slots / kZenGranule) + 0.5 * static_cast<double>(nnz);
  return 1.0 * static_cast<double>(nnz);
}

// The order chunks are pulled in when folded in place: by decreasing cost of reading, so that
// each read overlaps the next chunk's transfer and the read that nothing overlaps, the last,
// is the cheapest (under Zipf the sparse tail of the index range reads slowest per byte).
std::vector<std::uint32_t> fold_order(std::span<const double> cost) {
  std::vector<std::uint32_t> order(cost.size());
  for (std::uint32_t p = 0; p < order.size(); ++p) order[p] = p;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::uint32_t a, std::uint32_t b) { return cost[a] > cost[b]; });
  return order;
}

// Every server's announced coding as its blocks are coded (folded_coding), from the last of its
// H + 1 reported words; a coding out of range or a fold flag unlike this rank's is refused (seen
// by every rank alike).
std::vector<PullCoding> sender_codings(std::span<const std::uint64_t> reported, std::size_t H,
                                       std::uint32_t rank, bool fold) {
  const auto n = static_cast<std::uint32_t>(reported.size() / (H + 1));
  std::vector<PullCoding> coding(n);
  for (std::uint32_t j = 0; j < n; ++j) {
    const std::uint64_t said = reported[j * (H + 1) + H];
    if ((said & ~kFoldsInPlace) >= kPullCodings)
      throw MalformedMessage(fmt::format("zen: server {} announced pull coding {}", j, said));
    if (((said & kFoldsInPlace) != 0) != fold) {
      throw comm::CollectiveError(fmt::format(
          "zen: rank {} folds its pull in place and rank {} does not "
          "(SchemeOptions::fold_in_place, bench sync --consume, must be the same on every rank)",
          fold ? rank : j, fold ? j : rank));
    }
    coding[j] = folded_coding(static_cast<PullCoding>(said & ~kFoldsInPlace), fold);
  }
  return coding;
}

// A pipelined pull's chunks, alike on every rank: their granule bounds, where each chunk's blocks
// go in the receive buffer, every block's bytes, this server's slots and non-zeros per chunk, and
// what reading each chunk in place costs (fold_cost; zero unless folding).
struct ChunkPlan {
  std::vector<std::uint64_t> bounds;             // chunks + 1 granule bounds
  std::vector<std::size_t> chunk_begin;          // offsets of each chunk in the receive buffer
  std::vector<std::vector<std::size_t>> counts;  // [chunk][server]: block bytes
  std::vector<std::size_t> slot_begin;           // this server's slots per chunk
  std::vector<std::uint64_t> my_nnz;             // this server's non-zeros per chunk
  std::vector<double> read_cost;
  std::uint64_t total = 0;  // non-zeros of every block
};

// From every server's reported per-bucket counts and coding (H + 1 words each); refuses counts
// that add up to more than M.
ChunkPlan plan_chunks(const HashLayout& layout, std::uint32_t rank,
                      std::span<const std::uint64_t> reported,
                      std::span<const std::uint64_t> buckets, std::uint32_t max_chunks,
                      std::uint64_t min_block, std::size_t index_bytes, bool fold) {
  const std::size_t H = buckets.size() - 1;
  const auto n = static_cast<std::uint32_t>(reported.size() / (H + 1));
  const auto coding = sender_codings(reported, H, rank, fold);
  std::vector<std::uint64_t> bucket_nnz(std::size_t{n} * H);
  for (std::uint32_t j = 0; j < n; ++j)
    std::copy_n(reported.begin() + j * (H + 1), H, bucket_nnz.begin() + j * H);
  ChunkPlan c;
  c.bounds = zen_balanced_chunks(layout, buckets, bucket_nnz, max_chunks, min_block);
  const auto chunks = static_cast<std::uint32_t>(c.bounds.size() - 1);
  c.chunk_begin.assign(chunks + 1, 0);
  c.counts.assign(chunks, std::vector<std::size_t>(n));
  c.slot_begin.resize(chunks + 1);
  c.my_nnz.assign(chunks, 0);
  c.read_cost.assign(chunks, 0.0);
  std::size_t b = 0;
  for (std::uint32_t p = 0; p < chunks; ++p) {
    std::vector<std::uint64_t> nnz(n, 0);
    for (; buckets[b] < c.bounds[p + 1]; ++b)
      for (std::uint32_t j = 0; j < n; ++j) nnz[j] += bucket_nnz[j * H + b];
    c.chunk_begin[p + 1] = c.chunk_begin[p];
    for (std::uint32_t j = 0; j < n; ++j) {
      const std::size_t slots =
          (layout.granules_before(j, c.bounds[p + 1]) - layout.granules_before(j, c.bounds[p])) *
          kZenGranule;
      c.counts[p][j] = zen_pull_block_bytes(slots, nnz[j], index_bytes, coding[j]);
      if (fold) {
        c.read_cost[p] +=
            fold_cost(zen_pull_format(slots, nnz[j], index_bytes, coding[j]), slots, nnz[j]);
      }
      c.chunk_begin[p + 1] += c.counts[p][j];
      if (j == rank) c.my_nnz[p] = nnz[j];
      c.total += nnz[j];
    }
  }
  for (std::uint32_t p = 0; p <= chunks; ++p)
    c.slot_begin[p] = layout.granules_before(rank, c.bounds[p]) * kZenGranule;
  if (c.total > layout.elements()) {
    throw MalformedMessage(fmt::format("zen: servers announced {} non-zeros for {} elements",
                                       c.total, layout.elements()));
  }
  return c;
}

// Reads chunk p's blocks where they arrived: folded in place into `folded` (measured, as every
// consumer's read is: bench sync --consume), or decoded into out.sparse at `pos` (advanced).
// progress_next drives the next chunk's transfer between servers' blocks.
template <class Index>
void read_chunk(Communicator& comm, const ZenPullSetup& setup, const ChunkPlan& plan,
                std::uint32_t p, std::span<const std::uint8_t> blocks,
                const std::function<void()>& progress_next, std::span<const std::uint32_t> order,
                EntryFold& folded, SyncResult<Index>& out, std::size_t& pos) {
  const std::uint64_t begin = plan.bounds[p], end = plan.bounds[p + 1];
  if (setup.fold_in_place) {
    folded += zen_fold_pull_chunk<Index>(setup.layout, begin, end, blocks, plan.counts[p],
                                         progress_next, order);
    return;
  }
  // Charged by the non-zeros written and the chunk's index range in bitmap bytes (what a bitmap
  // walk scans); not by the bytes received, fewer per non-zero in the codings that cost more to
  // decode (Elias-Fano).
  const double range_bytes = static_cast<double>(end - begin) * kZenGranule / 8;
  comm::ChargedWork work(comm, setup.op_decode, 0, range_bytes);
  const std::size_t got = zen_decode_pull_chunk<Index>(
      setup.layout, begin, end, blocks, plan.counts[p], out.sparse.indices.data() + pos,
      out.sparse.values.data() + pos, plan.total - pos, progress_next, setup.threads,
      setup.parallel, order);
  pos += got;
  work.set_size(static_cast<double>(got), range_bytes);
}

}  // namespace

template <class Index>
void zen_pull_chunked(Communicator& comm, const ZenPullSetup& setup, ZenGroups& groups,
                      const ZenServerSums<Index>& sums, std::span<const std::uint64_t> buckets,
                      std::uint32_t max_chunks, std::uint64_t min_block, ZenPullBuffers& buf,
                      SyncResult<Index>& out) {
  const auto n = static_cast<std::uint32_t>(comm.size());
  const auto rank = static_cast<std::uint32_t>(comm.rank());
  const std::uint64_t M = setup.layout.elements();
  const ParallelTasks& parallel = setup.parallel;
  const double pull_start = comm.wtime();
  const auto traffic_start = comm.traffic();
  double decode_s = 0, encode_s = 0;
  // Each server's counts, then its pull coding (receivers size blocks with the sender's) and
  // whether it folds in place (the chunks' order depends on it: every rank must agree).
  const bool fold = setup.fold_in_place;
  std::vector<std::uint64_t> mine(sums.bucket_nnz);
  mine.push_back(static_cast<std::uint64_t>(setup.coding) | (fold ? kFoldsInPlace : 0));
  // Sent to every rank at once where ranks are few (one latency across a WAN, not log2 n).
  const auto reported = comm.allgather_each_direct<std::uint64_t>(mine);
  // The pull's bookkeeping (chunk bounds, block sizes, the result's buffers): charged as "plan"
  // with the non-zeros it sizes and the counts it reads.
  std::optional<comm::ChargedWork> plan(std::in_place, comm, setup.op_plan, 0,
                                        8.0 * static_cast<double>(reported.size()));
  const auto chunk_plan = plan_chunks(setup.layout, rank, reported, buckets, max_chunks, min_block,
                                      sizeof(Index), fold);
  const auto& bounds = chunk_plan.bounds;
  const auto& chunk_begin = chunk_plan.chunk_begin;
  const auto& counts = chunk_plan.counts;
  const auto& slot_begin = chunk_plan.slot_begin;
  const auto& my_nnz = chunk_plan.my_nnz;
  const std::uint64_t total = chunk_plan.total;
  const auto chunks = static_cast<std::uint32_t>(bounds.size() - 1);
  buf.all.resize(chunk_begin[chunks]);
  // The send buffer never moves while a chunk is on the wire: room for every chunk (checked after
  // each encode).
  std::size_t my_bytes = 0;
  for (std::uint32_t p = 0; p < chunks; ++p) my_bytes += counts[p][rank];
  buf.block.clear();
  buf.block.reserve(my_bytes);
  std::vector<std::size_t> block_begin(chunks + 1, 0);
  std::vector<ZenGroups::PullChunk> requests(chunks);
  std::uint64_t pull_load = 0;
  const std::uint8_t* const sent_from = buf.block.data();  // must not move (see above)
  auto encode = [&](std::uint32_t p) {
    const double t0 = comm.wtime();
    block_begin[p] = buf.block.size();
    std::optional<comm::ChargedWork> work(
        std::in_place, comm, setup.op_encode, static_cast<double>(my_nnz[p]),
        4.0 * static_cast<double>(slot_begin[p + 1] - slot_begin[p]));
    const std::size_t bytes = zen_encode_pull_chunk<Index>(
        setup.layout, rank, sums, slot_begin[p], slot_begin[p + 1],
        folded_coding(setup.coding, fold), buf.block, setup.threads, parallel);
    if (bytes != counts[p][rank] || buf.block.data() != sent_from) {
      // An internal inconsistency after the other ranks have posted (a block of another size,
      // or a send buffer that moved under a chunk on the wire): failing alone would leave them
      // waiting, so end the job with the reason.
      std::cerr << fmt::format(
          "atoll: internal error: rank {}: zen pull chunk {} is {} bytes, announced {}{}\n", rank,
          p, bytes, counts[p][rank],
          buf.block.data() != sent_from ? "; its send buffer moved" : "");
      comm::MpiRuntime::abort_job(70);
    }
    work.reset();
    pull_load += bytes * (n - 1);
    encode_s += comm.wtime() - t0;
  };
  auto post = [&](std::uint32_t p) {
    groups.post_pull(
        comm, std::span<const std::uint8_t>(buf.block.data() + block_begin[p], counts[p][rank]),
        counts[p],
        std::span<std::uint8_t>(buf.all.data() + chunk_begin[p],
                                chunk_begin[p + 1] - chunk_begin[p]),
        requests[p]);
  };
  out.dense_form = false;
  out.sparse.elements = M;
  out.folded.reset();
  out.sparse.indices.resize(fold ? 0 : total + kZenDecodeSlack);
  out.sparse.values.resize(fold ? 0 : total + kZenDecodeSlack);
  EntryFold folded;
  std::size_t pos = 0;
  std::exception_ptr failure;  // a malformed block: finish the collectives, then throw
  // One chunk in flight ahead of the one being decoded (two in flight measured slower: they share
  // the link, so the first arrives later).
  plan->set_size(static_cast<double>(total), 8.0 * static_cast<double>(reported.size()));
  plan.reset();
  // Chunk p + 1 is encoded while chunk p is on the wire, and posted as soon as p has arrived.
  // Folded in place, chunks go in fold_order; decoded, in index order (the result is sorted).
  std::vector<std::uint32_t> order(chunks);
  for (std::uint32_t p = 0; p < chunks; ++p) order[p] = p;
  if (fold) order = fold_order(chunk_plan.read_cost);
  encode(order[0]);
  post(order[0]);
  for (std::uint32_t s = 0; s < chunks; ++s) {
    const std::uint32_t p = order[s];
    const bool more = s + 1 < chunks;
    const std::uint32_t next = more ? order[s + 1] : p;
    if (more) encode(next);
    groups.wait_pull(comm, requests[p]);
    if (more) post(next);
    if (failure) continue;
    const std::function<void()> progress_next = [&, more, next] {
      if (more) groups.progress_pull(comm, requests[next]);
    };
    const double t0 = comm.wtime();
    try {
      read_chunk<Index>(comm, setup, chunk_plan, p,
                        std::span<const std::uint8_t>(buf.all.data() + chunk_begin[p],
                                                      chunk_begin[p + 1] - chunk_begin[p]),
                        progress_next, groups.pull_order(), folded, out, pos);
    } catch (...) {
      failure = std::current_exception();
    }
    decode_s += comm.wtime() - t0;
  }
  if (failure) std::rethrow_exception(failure);
  if (fold) {
    out.folded = folded;
  } else {
    out.sparse.indices.resize(pos);  // drop the slack (shrinking keeps the allocation)
    out.sparse.values.resize(pos);
  }
  out.stats.pull_load_bytes = pull_load;
  out.stats.pull_rounds = chunks + 1;
  record_pull_phases(comm, out.stats, pull_start, traffic_start, encode_s, decode_s,
                     fold ? "consume" : "decode");
}

template <class Index>
void zen_pull_one_exchange(Communicator& comm, const ZenPullSetup& setup,
                           std::span<const std::size_t> bounds, const ZenServerSums<Index>& sums,
                           ZenPullBuffers& buf, SyncResult<Index>& out) {
  const ParallelTasks& parallel = setup.parallel;
  const auto n = static_cast<std::uint32_t>(comm.size());
  const auto rank = static_cast<std::uint32_t>(comm.rank());
  const double pull_start = comm.wtime();
  const auto traffic_start = comm.traffic();
  std::uint64_t my_nnz = 0;
  for (auto c : sums.bucket_nnz) my_nnz += c;
  buf.block.clear();
  const double t_encode = comm.wtime();
  {
    comm::ChargedWork work(comm, setup.op_encode, static_cast<double>(my_nnz),
                           4.0 * static_cast<double>(setup.layout.slot_count(rank)));
    zen_encode_pull_chunk<Index>(setup.layout, rank, sums, 0, setup.layout.slot_count(rank),
                                 folded_coding(setup.coding, setup.fold_in_place), buf.block,
                                 setup.threads, parallel);
  }
  const double encode_s = comm.wtime() - t_encode;
  std::size_t room = 0;
  for (auto b : bounds) room += b;
  buf.all.resize(room);
  const auto counts = comm.allgather_bounded<std::uint8_t>(buf.block, bounds, buf.all);
  // The blocks end to end, as the decoder reads them.
  std::size_t at = 0, from = 0;
  for (std::uint32_t j = 0; j < n; ++j) {
    std::memmove(buf.all.data() + at, buf.all.data() + from, counts[j]);
    at += counts[j];
    from += bounds[j];
  }
  const std::span<const std::uint8_t> blocks(buf.all.data(), at);
  const double t_decode = comm.wtime();
  out.folded.reset();
  if (setup.fold_in_place) {
    const std::uint64_t granules = (setup.layout.elements() + kZenGranule - 1) / kZenGranule;
    out.dense_form = false;
    out.sparse.elements = setup.layout.elements();
    out.sparse.indices.clear();
    out.sparse.values.clear();
    out.folded = zen_fold_pull_chunk<Index>(setup.layout, 0, granules, blocks, counts);
  } else {
    // Charged as the chunked pull's decode is: non-zeros written, the index range's bitmap bytes.
    const std::uint64_t granules = (setup.layout.elements() + kZenGranule - 1) / kZenGranule;
    const double range_bytes = static_cast<double>(granules) * kZenGranule / 8;
    comm::ChargedWork work(comm, setup.op_decode, 0, range_bytes);
    const std::uint64_t total = zen_pull_blocks_nnz(blocks, counts, setup.layout.elements());
    out.dense_form = false;
    out.sparse.elements = setup.layout.elements();
    out.sparse.indices.resize(total + kZenDecodeSlack);
    out.sparse.values.resize(total + kZenDecodeSlack);
    const std::size_t got = zen_decode_pull_chunk<Index>(
        setup.layout, 0, granules, blocks, counts, out.sparse.indices.data(),
        out.sparse.values.data(), total, {}, setup.threads, parallel);
    out.sparse.indices.resize(got);  // drop the slack (shrinking keeps the allocation)
    out.sparse.values.resize(got);
    work.set_size(static_cast<double>(got), range_bytes);
  }
  const double decode_s = comm.wtime() - t_decode;
  out.stats.pull_load_bytes = buf.block.size() * (n - 1);
  out.stats.pull_rounds = 1;
  record_pull_phases(comm, out.stats, pull_start, traffic_start, encode_s, decode_s,
                     setup.fold_in_place ? "consume" : "decode");
}

void record_pull_phases(Communicator& comm, SyncStats& stats, double start,
                        const comm::TrafficCounters& traffic_start, double encode_s,
                        double decode_s, const char* decode_name) {
  const auto& traffic_end = comm.traffic();
  stats.phases.push_back(PhaseStats{"encode", encode_s, 0, 0});
  stats.phases.push_back(PhaseStats{"pull", comm.wtime() - start - decode_s - encode_s,
                                    traffic_end.bytes_sent - traffic_start.bytes_sent,
                                    traffic_end.bytes_received - traffic_start.bytes_received});
  stats.phases.push_back(PhaseStats{decode_name, decode_s, 0, 0});
}

#define ATOLL_ZEN_PULL_INSTANTIATE(I)                                                            \
  template void zen_pull_chunked(Communicator&, const ZenPullSetup&, ZenGroups&,                 \
                                 const ZenServerSums<I>&, std::span<const std::uint64_t>,        \
                                 std::uint32_t, std::uint64_t, ZenPullBuffers&, SyncResult<I>&); \
  template void zen_pull_one_exchange(Communicator&, const ZenPullSetup&,                        \
                                      std::span<const std::size_t>, const ZenServerSums<I>&,     \
                                      ZenPullBuffers&, SyncResult<I>&);
ATOLL_ZEN_PULL_INSTANTIATE(std::uint32_t)
ATOLL_ZEN_PULL_INSTANTIATE(std::uint64_t)

}  // namespace atl::sync
