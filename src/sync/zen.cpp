// Zen (Wang et al., OSDI'25): hash-balanced one-shot push and hash-bitmap pull.
//  1. partition: each local non-zero goes to server zen_owner(idx) (same hash on every rank,
//  applied
//     to 64-index granules: see zen_partition.h);
//  2. push: alltoall of counts, alltoallv of (index, value) entries;
//  3. aggregate: server j sums what it received over its own slots 𝕀_j (≈ M/n, never M), in
//     cache-sized ranges of the slots, each sender's run of a range found by binary search;
//  4. pull: server j sends, to every rank, either a bitmap over 𝕀_j plus the non-zero values
//     (|𝕀_j|/8 + 4·nnz_j bytes) or COO (8·nnz_j bytes) where its indices are at most a quarter
//     of the bitmap (kZenCooKeyShare: a bitmap decodes faster per entry); receivers decode
//     into one sorted gradient with the shared layout. Bitmap bytes received per rank total
//     ≈ M/8, independent of n. The pull is pipelined in up to SchemeOptions::zen_pull_chunks
//     byte-balanced chunks of the index space (one Iallgatherv each; the format is chosen per
//     server per chunk), so that chunk p is decoded while chunk p+1 is on the wire.
// With SchemeOptions::zen_group, push and pull go in two steps, between groups of ranks (a node's)
// and within them (zen_groups.h).
// Cost (Eq. 1): T_bp = (n-1)/n · (γ_n + 1) · d·M·8 / b, + α per round (push counts, push, pull
// counts, each pull chunk: cost_model.h); push and pull imbalance ≤ 1 + Θ(sqrt(n log n / nnz)).
#include "zen.h"

#include <fmt/format.h>

#include <algorithm>
#include <exception>
#include <functional>
#include <iostream>
#include <optional>

#include "atoll/comm/charged_work.h"
#include "atoll/comm/parallel.h"
#include "atoll/sync/network_probe.h"
#include "atoll/sync/zen_partition.h"
#include "atoll/util/fault_point.h"
#include "common.h"
#include "schemes.h"
#include "zen_groups.h"
#include "zen_pull.h"
#include "zen_push_verdict.h"
#include "zen_row_sync.h"

namespace atl::sync {
namespace {

class ZenScheme final : public SchemeBase<ZenScheme> {
 public:
  ZenScheme(const SchemeOptions& o, std::string name, PullCoding coding)
      : seed_(o.hash_seed),
        threads_requested_(o.threads),
        pull_chunks_(o.zen_pull_chunks),
        pull_min_block_(o.zen_pull_min_block),
        network_(o.network),
        name_(std::move(name)),
        coding_(coding),
        op_partition_(comm::cpu_op_id(name_ + ".partition")),
        op_aggregate_(comm::cpu_op_id(name_ + ".aggregate")),
        op_plan_(comm::cpu_op_id(name_ + ".plan")),
        op_encode_(comm::cpu_op_id(name_ + ".encode")),
        op_decode_(comm::cpu_op_id(name_ + ".decode")),
        groups_(o.zen_group, o.zen_group_push, comm::cpu_op_id(name_ + ".push_merge")) {
    if (pull_chunks_ < 1 || pull_chunks_ > 64) {
      throw std::invalid_argument(
          fmt::format("zen pull chunks must be 1 to 64 (got {})", pull_chunks_));
    }
    if (o.zen_force_elias_fano)
      coding_ = PullCoding::elias_fano;
    else if (o.zen_force_elias_fano_complement)
      coding_ = PullCoding::elias_fano_complement;
    else if (!o.zen_allow_bitmap)
      coding_ = PullCoding::coo;
    rows_.emplace(seed_, coding_, o.row_views);
    check_in_push_ = o.zen_check_in_push;
    fold_in_place_ = o.fold_in_place;
  }
  // The pull's smallest block for this network (zen_pull_min_block): from SchemeOptions::network
  // (auto's probe), else probed here once (collective), where the pull could take several chunks.
  // Only where a caller asks (bench sync does, before timing; auto passes its network): a probe
  // inside a call would add its bytes and time to that call (a trainer meters both).
  void prepare(Communicator& comm) override {
    if (min_block_sized_) return;
    min_block_sized_ = true;
    if (pull_chunks_ == 1 || pull_min_block_ == 0 || comm.size() < 2) return;
    if (!network_) network_ = probe_network(comm);
    pull_min_block_ =
        zen_pull_min_block(pull_min_block_, network_->latency_s, network_->bandwidth_bytes_per_s,
                           static_cast<std::uint32_t>(comm.size()));
  }
  // SchemeOptions::zen_check_in_push: the row path's push carries the input check; and after a
  // call without counts, the element path's push does (run_agreed).
  bool checks_input_itself() const { return check_in_push_ || agreed_.has_value(); }
  bool checks_input_in_its_exchange() const override { return checks_input_itself(); }
  std::string_view name() const override { return name_; }
  bool takes_blocks() const override { return true; }
  std::uint64_t dense_memory_bytes(std::uint64_t M, int n, std::uint64_t nnz) const override {
    // The hash layout (≈ 14 bytes per 64 indices), and a server's slot sums (≈ M/n floats, plus
    // their bitmap) where it could receive at least one entry per 16 slots.
    const std::uint64_t slots = M / static_cast<std::uint64_t>(n) + 64;
    const bool dense_server =
        static_cast<double>(n) * static_cast<double>(nnz) * 16 >= static_cast<double>(slots);
    std::uint64_t bytes = M / 64 * 14 + (dense_server ? slots * 4 + slots / 8 : 0);
    // Without counts (without_counts; taken by 32-bit indices wherever by 64-bit ones, sized at
    // 64-bit): room for every rank's largest push (its entries for this server's slots) and
    // every server's largest pull block.
    const auto servers = static_cast<std::uint32_t>(n);
    if (groups_.maybe_flat() &&
        zen_exchanges_without_counts(M, servers, sizeof(std::uint32_t), pull_min_block_)) {
      const std::uint64_t padded = (M + kZenGranule - 1) / kZenGranule * kZenGranule;
      bytes += static_cast<std::uint64_t>(n) * (slots * sizeof(Entry<std::uint64_t>) + 16) +
               zen_pull_block_bound(padded, sizeof(std::uint64_t)) +
               (servers - 1) * zen_pull_block_bound(0, sizeof(std::uint64_t));
    }
    return bytes;
  }

  template <class Index>
  void run(Communicator& comm, const SparseGradient<Index>& grad, SyncResult<Index>& out) {
    // The state below is cleared until a call completes: an error (thrown on every rank) leaves
    // the next call to check_input on every rank alike.
    const auto previous = std::exchange(last_form_, std::nullopt);
    const bool decline = std::exchange(decline_changed_form_, false);
    // zen_rows.h: one index per row; with the check in the push, every call (every rank alike).
    if (check_in_push_) return rows_->run(comm, grad, out, &input_problem_);
    // After two calls of one form without counts, the input check rides in the push.
    if (const auto agreed = std::exchange(agreed_, std::nullopt)) {
      if (run_agreed<Index>(comm, grad, out, *agreed)) return;
      // Some rank's input changed form: back to the caller that asked, or checked as a first
      // call is, then a first call's path.
      if (decline) {
        out.stats.form_changed = true;
        return;
      }
      PhaseScope phase(comm, out.stats, "check");
      check_input(comm, *this, grad.check(), grad.elements, grad.value_count(), grad.width,
                  sizeof(Index));
    }
    if (grad.width > 1) return rows_->run(comm, grad, out);
    if (network_) prepare(comm);  // a network given (auto's): no probe, no message
    const auto rank = static_cast<std::uint32_t>(comm.rank());
    const std::uint64_t M = grad.elements;
    if (!layout_.matches(M, comm.size(), seed_)) {
      PhaseScope phase(comm, out.stats, "layout");  // once per (M, n): not part of a step
      layout_ = HashLayout(M, static_cast<std::uint32_t>(comm.size()), seed_);
    }
    partition<Index>(comm, grad, out);
    Scratch<Index>& sc = scratch<Index>();
    // On a latency-bound network (or at a small M), push and pull go without counts first.
    const bool direct = without_counts(comm, sizeof(Index));
    {
      PhaseScope phase(comm, out.stats, "push");
      if (direct) {
        zen_push_with_verdict<Index>(comm, &sc.part, PushVerdict{0, 1, M}, layout_.slot_count(rank),
                                     sizeof(Entry<Index>), sc.pushed, sc.received, sc.recv_counts);
      } else {
        groups_.push<Index>(comm, sc.part, sc.received, sc.recv_counts);
      }
      push_load<Index>(comm, out);
    }
    aggregate<Index>(comm, out);
    util::fault_point("pull");  // --inject-fault kill/stop at the pull (not a PhaseScope)
    if (direct) {
      pull_one_exchange<Index>(comm, out);
      // Twice in a row this form (a caller that alternates forms keeps check_input: a push that
      // found another form would add a round): the next call's check rides in the push.
      const Agreed form{M, sizeof(Index), comm.size()};
      if (previous == form) agreed_ = form;
      last_form_ = form;
      return;
    }
    pull_chunked<Index>(comm, out);
  }

 private:
  // The form of input every rank's last calls were checked in (M, index width; block width 1),
  // and on how many ranks.
  struct Agreed {
    std::uint64_t elements;
    std::size_t index_bytes;
    int ranks;
    bool operator==(const Agreed&) const = default;
  };

  // A call after one that went without counts: the push carries every rank's verdict (a problem
  // fails the call on every rank, named; an input of another form sends nothing and returns
  // false on every rank, for the caller to check). True when done.
  template <class Index>
  bool run_agreed(Communicator& comm, const SparseGradient<Index>& grad, SyncResult<Index>& out,
                  const Agreed& agreed) {
    const auto rank = static_cast<std::uint32_t>(comm.rank());
    const bool changed = grad.width != 1 || grad.elements != agreed.elements ||
                         sizeof(Index) != agreed.index_bytes || comm.size() != agreed.ranks;
    const bool failed = input_problem_.has_value();
    PushVerdict mine{(failed ? PushVerdict::kFailed : 0u) | (changed ? PushVerdict::kChanged : 0u),
                     grad.width, grad.elements};
    Scratch<Index>& sc = scratch<Index>();
    if (!changed && !failed) partition<Index>(comm, grad, out);
    const std::size_t entry_bytes = agreed.index_bytes == sizeof(std::uint32_t)
                                        ? sizeof(Entry<std::uint32_t>)
                                        : sizeof(Entry<std::uint64_t>);
    {
      PhaseScope phase(comm, out.stats, "push");
      const PushVerdicts all =
          zen_push_with_verdict<Index>(comm, changed || failed ? nullptr : &sc.part, mine,
                                       comm.size() == agreed.ranks ? layout_.slot_count(rank) : 0,
                                       entry_bytes, sc.pushed, sc.received, sc.recv_counts);
      if (all.all.failed) settle_input(comm, all.all, input_problem_, grad.elements, grad.width);
      if (all.changed) return false;
      push_load<Index>(comm, out);
    }
    aggregate<Index>(comm, out);
    util::fault_point("pull");
    pull_one_exchange<Index>(comm, out);
    agreed_ = agreed;
    last_form_ = agreed;
    return true;
  }

  template <class Index>
  void partition(Communicator& comm, const SparseGradient<Index>& grad, SyncResult<Index>& out) {
    if (threads_ == 0) threads_ = comm::resolve_threads(threads_requested_, comm.ranks_on_node());
    PhaseScope phase(comm, out.stats, "partition");
    comm::ChargedWork work(comm, op_partition_, static_cast<double>(grad.nnz()));
    zen_partition(grad, layout_, scratch<Index>().part);
  }

  // The bytes this server received from others. (Every received entry is checked to be this
  // server's, in order per sender, by zen_aggregate as it adds them.)
  template <class Index>
  void push_load(const Communicator& comm, SyncResult<Index>& out) {
    const Scratch<Index>& sc = scratch<Index>();
    const auto rank = static_cast<std::size_t>(comm.rank());
    out.stats.push_load_bytes = (sc.received.size() - sc.recv_counts[rank]) * sizeof(Entry<Index>);
  }

  // Sums over this server's slots, non-zero counts per bucket of the index space.
  template <class Index>
  void aggregate(Communicator& comm, SyncResult<Index>& out) {
    Scratch<Index>& sc = scratch<Index>();
    const auto rank = static_cast<std::uint32_t>(comm.rank());
    const std::uint64_t M = layout_.elements();
    const std::uint64_t granules = (M + kZenGranule - 1) / kZenGranule;
    if (sc.buckets.empty() || sc.buckets.back() != granules)
      sc.buckets = zen_granule_bounds(M, zen_pull_buckets(M));
    PhaseScope phase(comm, out.stats, "aggregate");
    comm::ChargedWork work(comm, op_aggregate_, static_cast<double>(sc.received.size()),
                           4.0 * static_cast<double>(layout_.slot_count(rank)));
    zen_aggregate<Index>(layout_, rank, sc.received, sc.buckets, sc.sums, sc.recv_counts, threads_,
                         parallel(comm));
  }

  // With worker threads the aggregation, the encode and each chunk's decode are split into ranges
  // done in parallel (no MPI progress calls inside; comm::run_parallel charges the section's wall
  // time under SMPI).
  sync::ParallelTasks parallel(Communicator& comm) const {
    return [&comm, threads = threads_](std::size_t tasks,
                                       const std::function<void(std::size_t)>& task) {
      comm::run_parallel(comm, threads, tasks, task);
    };
  }

  // The pull (zen_pull.h): pipelined in chunks, or in one exchange without counts.
  ZenPullSetup pull_setup(Communicator& comm) const {
    return ZenPullSetup{layout_,  coding_,    threads_,   parallel(comm),
                        op_plan_, op_encode_, op_decode_, fold_in_place_};
  }
  template <class Index>
  void pull_chunked(Communicator& comm, SyncResult<Index>& out) {
    Scratch<Index>& sc = scratch<Index>();
    zen_pull_chunked<Index>(comm, pull_setup(comm), groups_, sc.sums, sc.buckets, pull_chunks_,
                            pull_min_block_, sc.pull, out);
  }
  template <class Index>
  void pull_one_exchange(Communicator& comm, SyncResult<Index>& out) {
    Scratch<Index>& sc = scratch<Index>();
    zen_pull_one_exchange<Index>(comm, pull_setup(comm), bound_, sc.sums, sc.pull, out);
  }

  // Where even the largest pull a call could have (every slot non-zero, each server's block at its
  // bound) fits in one chunk of the smallest block (prepare(): a latency-bound network, or a small
  // M), push and pull need no counts first: one exchange each whose receivers know a bound on
  // what each rank sends (a server's slots; each block's bound), the messages' sizes (and the
  // pull blocks' headers) telling the rest (Communicator::alltoallv_bounded, allgather_bounded).
  // Flat exchanges only; the receive buffers hold M entries and M pull-block bounds.
  bool without_counts(Communicator& comm, std::size_t index_bytes) {
    const auto n = static_cast<std::uint32_t>(comm.size());
    if (groups_.resolve(comm) != 1 ||
        !zen_exchanges_without_counts(layout_.elements(), n, index_bytes, pull_min_block_))
      return false;
    bound_.resize(n);
    for (std::uint32_t j = 0; j < n; ++j)
      bound_[j] = zen_pull_block_bound(layout_.slot_count(j), index_bytes);
    return true;
  }

  // Buffers reused between calls: gradient-sized allocations (and their zero-filling) are not
  // paid again every step.
  template <class Index>
  struct Scratch {
    HashPartition<Index> part;
    std::vector<Entry<Index>> received;
    std::vector<std::size_t> recv_counts;  // entries received from each rank
    std::vector<std::uint64_t> buckets;    // bucket bounds in granules, for balancing the pull
    ZenServerSums<Index> sums;
    ZenPullBuffers pull;
    VerdictPushBuffers pushed;  // the push without counts
  };
  template <class Index>
  Scratch<Index>& scratch() {
    if constexpr (std::is_same_v<Index, std::uint32_t>)
      return scratch32_;
    else
      return scratch64_;
  }

  std::uint64_t seed_;
  unsigned threads_requested_;    // SchemeOptions::threads
  std::uint32_t pull_chunks_;     // SchemeOptions::zen_pull_chunks (at most; fewer when a bucket
                                  // alone outweighs a chunk)
  std::uint64_t pull_min_block_;  // SchemeOptions::zen_pull_min_block, then prepare()'s
  std::optional<cost::Network> network_;  // SchemeOptions::network, or prepare()'s probe
  bool min_block_sized_ = false;
  std::vector<std::size_t> bound_;  // without_counts: each server's largest pull block
  unsigned threads_ = 0;            // resolved on the first call (comm::resolve_threads)
  std::string name_;
  PullCoding coding_;
  std::size_t op_partition_, op_aggregate_, op_plan_, op_encode_,
      op_decode_;     // cpu_costs.h
  ZenGroups groups_;  // the push and the pull's transport, flat or in groups of ranks
  HashLayout layout_;
  std::optional<ZenRowSync> rows_;  // gradients of blocks
  bool check_in_push_ = false;
  bool fold_in_place_ = false;       // SchemeOptions::fold_in_place
  std::optional<Agreed> agreed_;     // the form of two completed calls in a row (run_agreed)
  std::optional<Agreed> last_form_;  // the form of the last call, if it completed without counts
  Scratch<std::uint32_t> scratch32_;
  Scratch<std::uint64_t> scratch64_;
};

}  // namespace

std::unique_ptr<SyncScheme> make_zen_variant(const SchemeOptions& options, std::string name,
                                             PullCoding coding) {
  return std::make_unique<ZenScheme>(options, std::move(name), coding);
}

std::unique_ptr<SyncScheme> make_zen(const SchemeOptions& o) {
  return make_zen_variant(o, "zen", PullCoding::bitmap_or_coo);
}

// zen_ef: Zen whose servers code each pull block's indices in the smallest of bitmap, COO and
// Elias-Fano (issue 18 item 4): fewer bytes on the wire for more decode work, so it pays where the
// network is slow against the CPU; `auto` measures both.
std::unique_ptr<SyncScheme> make_zen_ef(const SchemeOptions& o) {
  return make_zen_variant(o, "zen_ef", PullCoding::smallest);
}

}  // namespace atl::sync
