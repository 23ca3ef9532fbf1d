// The synchronization interface: every scheme takes one worker's sparse gradient and returns the
// exact sum over all ranks, identical on every rank, plus per-phase statistics.
//
// Contract of SyncScheme::synchronize (collective: every rank calls it with the same M):
// - input: a valid SparseGradient (sorted unique indices < M); checked, and a bad input or an M
// that
//   differs across ranks ends in CollectiveError on every rank;
// - output: SyncResult, either sparse (sorted unique indices, may hold explicit zeros) or dense
//   (M floats), whichever is the scheme's natural form; absent entries are zero. A gradient of
//   blocks (SparseGradient::width > 1) is taken as blocks by the schemes that say so
//   (takes_blocks(): their sparse result has the input's width) and as its element form by the
//   others (their result has width 1); the sum is the same. All ranks hold the
//   same result. Summation order differs between schemes (floats: equal within rounding; integer
//   valued floats: bit-identical).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/cost/cost_model.h"
#include "atoll/sparse/sparse_gradient.h"

namespace atl::sync {

using comm::Communicator;
using sparse::SparseGradient;

// A message from a peer that does not decode: a size, count or index that does not fit the buffer
// it would be written into. The message names the scheme, the sending rank and the problem.
class MalformedMessage : public comm::CommError {
 public:
  using comm::CommError::CommError;
};

// One phase of a scheme on this rank (push, aggregate, pull, ...).
struct PhaseStats {
  std::string name;
  double time_s = 0;  // engine clock (simulated under SMPI)
  std::uint64_t bytes_sent = 0;
  std::uint64_t bytes_received = 0;
};

struct SyncStats {
  std::vector<PhaseStats> phases;
  // Server load on this rank: bytes it received as an aggregator (push) and sent back (pull).
  // Schemes without server roles leave them 0; imbalance across ranks is max/mean of these.
  std::uint64_t push_load_bytes = 0;
  std::uint64_t pull_load_bytes = 0;
  // Zen's element path: the exchanges its pull took one after another (its counts, then each
  // chunk; 1 where it needs no counts first: zen.cpp, without_counts). 0 elsewhere.
  std::uint32_t pull_rounds = 0;
  std::string chosen;      // `auto`: the scheme it ran
  std::string reason;      // `auto`: why (candidates' model estimates and measured times)
  bool exploring = false;  // `auto`: this call was a trial of a candidate (auto_tuner.h)
  double predicted_s = 0;  // `auto`: the cost model's network-only estimate for `chosen`
  // The call did not run: some rank's input changed form (SyncScheme::decline_next_changed_form).
  bool form_changed = false;

  double time_s() const;
  std::uint64_t bytes_sent() const;
  std::uint64_t bytes_received() const;
};

// A result's non-zeros folded by a consumer that reads each once (entry_fold.h).
struct EntryFold {
  std::uint64_t sum = 0;    // Σ entry_term(index, bits of value), mod 2^64
  std::uint64_t count = 0;  // entries folded
  EntryFold& operator+=(const EntryFold& o) {
    sum += o.sum;
    count += o.count;
    return *this;
  }
  bool operator==(const EntryFold&) const = default;
};

template <class Index>
struct SyncResult {
  bool dense_form = false;
  SparseGradient<Index> sparse;  // valid when !dense_form
  std::vector<float> dense;      // valid when dense_form (M floats)
  // A sparse result of blocks left where the pull put them (SchemeOptions::row_views; Zen's
  // variants on a gradient of blocks): sparse.indices holds the blocks, sparse.values is empty and
  // views[k] points at block k's sparse.width values inside the scheme's buffers, valid until the
  // scheme's next call (in_views(); an empty result needs neither). block() reads either form;
  // to_dense() and checksum() take both.
  std::vector<const float*> views;
  // Set where the scheme folded its result where it arrived (SchemeOptions::fold_in_place): the
  // fold of every non-zero, and `sparse` is left empty (its M set).
  std::optional<EntryFold> folded;
  SyncStats stats;

  bool in_views() const { return !views.empty(); }
  const float* block(std::size_t k) const {
    return in_views() ? views[k] : sparse.values.data() + k * sparse.width;
  }
  std::vector<float> to_dense() const;
  std::uint64_t checksum() const;  // over non-zero (index, value) pairs: equal iff same sum
};

class SyncScheme {
 public:
  virtual ~SyncScheme() = default;
  virtual std::string_view name() const = 0;
  // `out` is overwritten; passing the same object every step lets its buffers be reused (a trainer
  // keeps its gradient buffers; so do the benchmarks, so no scheme pays page faults per call).
  virtual void synchronize(Communicator& comm, const SparseGradient<std::uint32_t>& grad,
                           SyncResult<std::uint32_t>& out) = 0;
  virtual void synchronize(Communicator& comm, const SparseGradient<std::uint64_t>& grad,
                           SyncResult<std::uint64_t>& out) = 0;
  // One-time setup a scheme would otherwise do inside its first call (auto's network probe), so
  // that callers who time calls can do it first. Collective; calling it again does nothing.
  virtual void prepare(Communicator& comm) { (void)comm; }
  // Whether a gradient of blocks (width > 1) is synchronized as blocks: one index per block on
  // the wire (Zen and its variants). The others get its element form, expanded on entry.
  virtual bool takes_blocks() const { return false; }
  // Bytes of working memory one call needs on each rank that grow with M (dense buffers, Zen's
  // server slots), for `ranks` ranks when this rank holds `local_nnz` non-zeros (buffers that a
  // scheme allocates only for dense enough data count where the data could be: n·nnz·16 ≥ the
  // buffer's slots); the O(nnz) part is not counted. synchronize() refuses, on every rank, a call
  // whose need exceeds the memory this node has free for each of its ranks, naming the bytes.
  virtual std::uint64_t dense_memory_bytes(std::uint64_t elements, int ranks,
                                           std::uint64_t local_nnz) const = 0;
  // For a caller that has checked the next call's input on every rank, as check_input would and
  // with this scheme's memory need (`auto`, in the reduction it makes anyway): the next
  // synchronize() skips its own check, a network latency.
  void skip_next_input_check() { skip_input_check_ = true; }
  // Whether the next call checks its input on every rank inside its own data exchange, at no
  // latency of its own (Zen without counts after a first call): `auto`, settled on such a scheme,
  // need not reduce every call. The same answer on every rank.
  virtual bool checks_input_in_its_exchange() const { return false; }
  // For a caller that routes calls by their form (`auto`): where such a scheme's exchange finds
  // that some rank's input changed form, the next call returns at once with
  // SyncStats::form_changed on every rank, instead of checking and running it.
  void decline_next_changed_form() { decline_changed_form_ = true; }

 protected:
  bool skip_input_check_ = false;
  bool decline_changed_form_ = false;
};

// Options shared by the schemes; each reads the fields that concern it.
struct SchemeOptions {
  std::uint64_t hash_seed = 0x5eeda7011ull;  // Zen's h0 seed, the same on every rank
  std::uint64_t omnireduce_block_elements = 256;
  // SparCML switches to a dense accumulator when the COO form would exceed this share of M·4 bytes.
  double sparcml_dense_switch = 0.5;
  // Zen pull: a server sends a bitmap when it is smaller than its COO indices (per server, per
  // call).
  bool zen_allow_bitmap = true;
  // Every Zen variant codes every pull block's indices in Elias-Fano (the golden tests use it to
  // run that format on every block shape; otherwise zen_ef picks it where it is the smallest).
  bool zen_force_elias_fano = false;
  // The same with Elias-Fano of each block's empty slots (zen_ef's code for dense blocks).
  bool zen_force_elias_fano_complement = false;
  // Zen's variants on a gradient of blocks leave the pulled blocks' values in place
  // (SyncResult::in_views) instead of copying them into the result: for a consumer that reads
  // each block once before the next call (the trainer's row-wise optimizer).
  bool row_views = false;
  // Zen's element path folds each pulled chunk's blocks where they arrived (entry_fold.h) instead
  // of decoding them into the sorted result: for a consumer that reads every non-zero once and
  // needs no sorted array (bench sync --consume). The result is then SyncResult::folded. Other
  // schemes and Zen's row path ignore it; `auto` folds its pick's result itself where the pick
  // does not, inside its call (so its trials time every candidate to the consumer).
  bool fold_in_place = false;
  // Worker threads per rank for Zen's pull decode (comm::resolve_threads: 0 is the node's cores
  // shared by its ranks, 1 under SMPI).
  unsigned threads = 0;
  // Zen's pull is pipelined in at most this many chunks of the index space (1 to 64), each one
  // collective of n - 1 messages per rank: more chunks overlap more of the decode with the
  // transfer, fewer send fewer, larger messages. Fewer chunks are taken where the average block
  // (one server's part of a chunk) would be under zen_pull_min_block bytes (0: always the most;
  // zen_pull_chunk_count).
  std::uint32_t zen_pull_chunks = 8;
  std::uint64_t zen_pull_min_block = 32768;
  // Zen's push and pull in two steps, between groups of this many consecutive ranks (a node's)
  // and within them (zen_groups.h): n - 1 messages per rank and exchange become (G - 1) +
  // (n/G - 1), and a group takes each pulled block off the network once instead of G times. 0
  // (the default): the ranks per node where every node has as many, there are several nodes and
  // each node's ranks are consecutive, flat otherwise (one node; under SMPI, where every rank
  // shares one process); 1: flat. Must divide the number of ranks (std::invalid_argument on every
  // rank otherwise). Gradients of rows (width > 1: zen_rows.h) stay flat.
  std::uint32_t zen_group = 0;
  // With zen_group > 1: the push in two steps too (false: the pull alone, the push flat).
  bool zen_group_push = true;
  // Zen's variants check their input inside the push's first exchange (the alltoall of counts
  // carries each rank's verdict, M and block width) instead of in a collective of its own: one
  // network latency less per call, which a data-parallel step across a WAN pays in full. Every
  // call then takes the row path (zen_rows.h; a gradient of width 1 is M rows of one value), so
  // that every rank runs the same exchanges whatever its input. For a caller whose gradients are
  // rows (the trainer's embedding).
  bool zen_check_in_push = false;
  // `auto` chooses among these schemes only (empty: all but itself); unknown names are refused
  // (std::invalid_argument) when it is made.
  std::vector<std::string> auto_schemes;
  // The network the schemes plan with (sync/network_probe.h): `auto` passes its probe on; Zen
  // probes its own at its first call where absent, to size its pull chunks (zen_pull_min_block).
  std::optional<cost::Network> network;
};

// The scheme names accepted by make_scheme, in presentation order (auto last).
const std::vector<std::string>& scheme_names();
// Throws std::invalid_argument naming the valid schemes on an unknown name.
std::unique_ptr<SyncScheme> make_scheme(std::string_view name, const SchemeOptions& options = {});

// Implementation helpers for scheme files ---------------------------------------------------------

// Each phase's time, bytes sent and bytes received, each the max over ranks, over the union of the
// phase names the ranks recorded (in first-seen order, rank 0's first); a phase a rank did not run
// counts as 0 there, a name recorded twice on a rank adds up. The ranks' phase lists may differ
// (SparCML folds only where a partner exists): the collectives (one allgatherv of the names, one
// allreduce) are the same on every rank.
std::vector<PhaseStats> max_phase_stats(Communicator& comm, const SyncStats& stats);

// Each phase's median over calls (time, bytes sent and bytes received, each on its own; 0 in a
// call that did not run the phase), in the order the names first appear: a breakdown that goes
// with a median time where calls differ in their phases (`auto`'s calls that reduce).
std::vector<PhaseStats> median_phase_stats(const std::vector<std::vector<PhaseStats>>& calls);

// Collective input check: local validity, M's working memory within what the node has free
// (SyncScheme::dense_memory_bytes) and equal M, block width and index width (bytes) on all ranks,
// else CollectiveError everywhere.
void check_input(Communicator& comm, const SyncScheme& scheme,
                 const std::optional<std::string>& local_problem, std::uint64_t elements,
                 std::uint64_t local_nnz, std::uint32_t width, std::uint32_t index_bytes);
// check_input in two parts, for a scheme that carries the verdicts in an exchange of its own
// (SchemeOptions::zen_check_in_push). This rank's problem, if any (no collective):
std::optional<std::string> local_input_problem(const Communicator& comm, const SyncScheme& scheme,
                                               const std::optional<std::string>& local_problem,
                                               std::uint64_t elements, std::uint64_t local_nnz);
// Every rank's verdict, combined: whether any rank failed, the smallest and largest M, width and
// index width in bytes (0, 0 where a caller compares those otherwise).
struct InputVerdicts {
  bool failed = false;
  std::uint64_t min_elements = 0, max_elements = 0;
  std::uint64_t min_width = 0, max_width = 0;
  std::uint64_t min_index_bytes = 0, max_index_bytes = 0;
};
// Collective only where a rank failed (then agree() throws this rank's problem or the other
// ranks'); throws CollectiveError where M, the width or the index width differs. Called by every
// rank with the same `all`.
void settle_input(Communicator& comm, const InputVerdicts& all,
                  const std::optional<std::string>& problem, std::uint64_t elements,
                  std::uint32_t width);

// Records one phase (time and metered traffic) into `stats` when it goes out of scope.
class PhaseScope {
 public:
  PhaseScope(Communicator& comm, SyncStats& stats, std::string name);
  ~PhaseScope();
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;

 private:
  Communicator& comm_;
  SyncStats& stats_;
  std::string name_;
  double start_s_;
  comm::TrafficCounters start_;
};

// CRTP adapter: a scheme implements
// `template <class Index> void run(Communicator&, const SparseGradient<Index>&,
// SyncResult<Index>&)` and finds `out` with its stats cleared. Unless it takes blocks
// (takes_blocks()), run() sees only element-form gradients (width 1): blocks are expanded here.
template <class Derived>
class SchemeBase : public SyncScheme {
 public:
  void synchronize(Communicator& c, const SparseGradient<std::uint32_t>& g,
                   SyncResult<std::uint32_t>& out) override {
    dispatch(c, g, out, expanded32_);
  }
  void synchronize(Communicator& c, const SparseGradient<std::uint64_t>& g,
                   SyncResult<std::uint64_t>& out) override {
    dispatch(c, g, out, expanded64_);
  }

 private:
  template <class Index>
  void dispatch(Communicator& c, const SparseGradient<Index>& g, SyncResult<Index>& out,
                SparseGradient<Index>& expanded) {
    out.stats = {};
    out.folded.reset();  // set again only by a scheme that folds in place
    if (std::exchange(skip_input_check_, false)) {  // checked by the caller
      input_problem_.reset();
    } else if (static_cast<const Derived*>(this)->checks_input_itself()) {  // run() settles it
      input_problem_ = local_input_problem(c, *this, g.check(), g.elements, g.value_count());
    } else {
      // A phase of its own: one network latency per call, which a breakdown should show.
      PhaseScope phase(c, out.stats, "check");
      check_input(c, *this, g.check(), g.elements, g.value_count(), g.width, sizeof(Index));
    }
    out.sparse.width = 1;
    out.views.clear();
    if (g.width > 1 && !takes_blocks()) {
      sparse::expand_blocks(g, expanded);
      static_cast<Derived*>(this)->template run<Index>(c, expanded, out);
    } else {
      static_cast<Derived*>(this)->template run<Index>(c, g, out);
    }
  }
  SparseGradient<std::uint32_t> expanded32_;  // the element form of a gradient of blocks
  SparseGradient<std::uint64_t> expanded64_;

 protected:
  // A scheme that checks its input in an exchange of its own says so (every rank must give the
  // same answer); run() then finds this rank's problem here and must call settle_input.
  bool checks_input_itself() const { return false; }
  std::optional<std::string> input_problem_;
};

}  // namespace atl::sync
