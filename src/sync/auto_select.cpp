// `auto`: picks a scheme per call: the alpha-beta cost model (cost_model.h: Zen's Eq. 1 and Eq. 2
// plus latency and the baselines' models) proposes candidates, measured calls decide
// (auto_tuner.h).
// - Network: α and b measured once (atoll/sync/network_probe.h: ping-pongs of 8 B and 1 MiB
//   between rank pairs, slowest pair taken; the simulated network under SMPI).
// - Sparsity, measured when the tuner asks (first call, drifted non-zero counts, every
//   SchemeTuner::kRefresh calls): every rank samples its indices by a hash shared by all ranks (an
//   index is sampled on every rank or on none), so unions of samples estimate unions of index sets
//   without bias: γ_{2^i} over the aligned groups recursive doubling forms, γ_n, the skew of the
//   aggregate over contiguous ranges, and the same for OmniReduce's non-zero blocks. About 2k
//   samples per rank travel in one allgatherv.
// - Rows (SparseGradient::width w > 1): auto passes them on as rows (Zen carries them as rows, the
//   others expand them); the profile samples row ids and describes the element form as made of
//   whole rows: density = values / M, γ and skew those of the rows, OmniReduce's blocks as many
//   per row as a row spans.
// - Every call: one reduction of nine integers (the non-zero counts' range and the previous call's
//   time, max over ranks, so that every rank's tuner sees the same inputs; and the input check:
//   any rank's problem, the range of M and of the block width, and, once settled, whether the
//   pick would refuse for memory). A settled pick then skips its own check (its latency).
#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>
#include <map>
#include <optional>
#include <stdexcept>
#include <utility>

#include "atoll/comm/charged_work.h"
#include "atoll/cost/cost_model.h"
#include "atoll/sync/entry_fold.h"
#include "atoll/sync/network_probe.h"
#include "atoll/sync/zen_partition.h"
#include "atoll/util/memory.h"
#include "auto_tuner.h"
#include "common.h"
#include "schemes.h"
#include "zen_row_sync.h"

namespace atl::sync {
namespace {

constexpr std::uint64_t kSampleSeed = 0xa070'5e1ec7ull;
constexpr double kSamplesPerRank = 2048;
// Fast calls (AutoScheme::run) between two reductions, which watch the non-zero counts' drift.
constexpr int kWatchEvery = 8;

class AutoScheme final : public SchemeBase<AutoScheme> {
 public:
  explicit AutoScheme(const SchemeOptions& o) : options_(o) {
    const auto names = scheme_names();
    for (const auto& name : o.auto_schemes) {
      if (name == "auto" || std::find(names.begin(), names.end(), name) == names.end())
        throw std::invalid_argument("auto: no scheme named '" + name + "' to choose from");
    }
  }
  std::string_view name() const override { return "auto"; }
  bool takes_blocks() const override { return true; }
  // Its input check rides in the profile's reduction (one collective per call, not two), exact
  // in integers; a settled pick skips its own (SyncScheme::skip_next_input_check).
  bool checks_input_itself() const { return true; }
  void prepare(Communicator& comm) override {
    if (network_) return;
    network_ = probe_network(comm);
    options_.network = network_;  // the schemes it runs plan with it (Zen's pull chunks)
  }
  std::uint64_t dense_memory_bytes(std::uint64_t M, int n, std::uint64_t nnz) const override {
    // Its own profiling is O(nnz); the scheme it picks checks its own need when it runs.
    (void)M, (void)n, (void)nnz;
    return 0;
  }

  template <class Index>
  void run(Communicator& comm, const SparseGradient<Index>& grad, SyncResult<Index>& out) {
    const Key key{grad.elements, sizeof(Index)};
    // Fast calls: cleared until this call completes (an error, thrown on every rank, leaves the
    // next call to the reduction on every rank alike).
    if (const auto fast = std::exchange(fast_, std::nullopt)) {
      if (++unwatched_ < kWatchEvery && run_fast<Index>(comm, grad, out, *fast)) return;
    }
    unwatched_ = 0;
    run_watched<Index>(comm, grad, out, key);
    // Twice in a row the same kind of call, settled on a scheme that checks each call's input in
    // its own exchange (Zen without counts): the next calls skip the reduction (fast calls), every
    // kWatchEvery-th excepted. Every rank alike: both calls' inputs were checked on every rank.
    State& state = tuners_.at(key);
    const auto settled = state.tuner.settled();
    if (last_key_ == key && settled && instance(state, *settled).checks_input_in_its_exchange())
      fast_ = key;
    last_key_ = key;
  }

 private:
  using Key = std::pair<std::uint64_t, std::size_t>;  // M and the index width

  // One tuner per kind of call (M and index width): a trainer may sync tensors of several sizes.
  // Each holds its own scheme instances (a scheme keeps its buffers between calls).
  struct State {
    SchemeTuner tuner;
    double local_time_s = 0;  // this rank's time of the previous pick
    std::vector<std::unique_ptr<SyncScheme>> schemes;
  };

  // A fast call: straight to the settled pick of the last kind of call, which checks this call's
  // input on every rank in its exchange. Where some rank's input is of another kind, the pick
  // returns at once on every rank (false: the call goes to the reduction, for its own kind).
  template <class Index>
  bool run_fast(Communicator& comm, const SparseGradient<Index>& grad, SyncResult<Index>& out,
                const Key& fast) {
    State& state = tuners_.at(fast);
    const SchemeTuner::Pick pick = state.tuner.next();  // the settled scheme
    auto& scheme = instance(state, pick.scheme);
    scheme.decline_next_changed_form();
    const double t0 = comm.wtime();
    scheme.synchronize(comm, grad, out);
    if (out.stats.form_changed) return false;
    consume_in_call(comm, out);
    state.local_time_s = comm.wtime() - t0;
    record_pick(out, state, pick);
    fast_ = fast;
    return true;
  }

  template <class Index>
  void run_watched(Communicator& comm, const SparseGradient<Index>& grad, SyncResult<Index>& out,
                   const Key& key) {
    SyncStats profile_stats;
    auto& state = tuners_[key];
    SchemeTuner::Pick pick;
    bool checked = false;  // this call's input checked here, with the pick's memory need
    {
      PhaseScope phase(comm, profile_stats, "profile");
      prepare(comm);
      // Settled, the pick is known before the reduction: its memory verdict rides in it, and
      // where every rank's is clear the pick skips its own check (one latency less per call).
      // Otherwise (a new profile, a trial, a refusal) the pick checks itself, as it would alone.
      const auto settled = state.tuner.settled();
      const bool pick_refuses =
          settled && local_input_problem(comm, instance(state, *settled), std::nullopt,
                                         grad.elements, grad.value_count());
      // Exact in integers, max over ranks: (~x, x) pairs give the range of M, the width and the
      // non-zero count; the previous call's time (>= 0) orders as its bits do.
      const std::uint64_t M = grad.elements, w = grad.width, nnz = grad.nnz();
      std::vector<std::uint64_t> v{input_problem_ ? 1u : 0u,
                                   M,
                                   ~M,
                                   w,
                                   ~w,
                                   nnz,
                                   ~nnz,
                                   std::bit_cast<std::uint64_t>(state.local_time_s),
                                   pick_refuses ? 1u : 0u,
                                   sizeof(Index),
                                   ~std::uint64_t{sizeof(Index)}};
      comm.allreduce_direct<std::uint64_t>(v, comm::ReduceOp::max);  // one latency where few
      settle_input(comm, InputVerdicts{v[0] != 0, ~v[2], v[1], ~v[4], v[3], ~v[10], v[9]},
                   input_problem_, grad.elements, grad.width);
      const auto max_nnz = static_cast<double>(v[5]), min_nnz = static_cast<double>(~v[6]);
      if (state.tuner.awaiting()) state.tuner.record(std::bit_cast<double>(v[7]));
      const bool stale = state.tuner.stale(max_nnz, min_nnz);
      if (stale) {
        const auto profile = measure_profile<Index>(comm, grad);
        auto ranked = fitting(comm, state, cost::rank_schemes(profile, *network_), grad);
        auto summary = fmt_reason(profile, ranked);
        state.tuner.reset(max_nnz, min_nnz, std::move(ranked), std::move(summary));
      }
      pick = state.tuner.next();
      checked = settled && !stale && v[8] == 0 && pick.scheme == *settled;
    }
    // Only the pick's instance is kept, so only its buffers exist: a trial runs under the same
    // memory as the settled scheme will (under SMPI all ranks share one process, and the idle
    // candidates' buffers slowed the calls), and a settled auto holds one scheme's memory.
    std::erase_if(state.schemes, [&](const auto& s) { return s->name() != pick.scheme; });
    const double t0 = comm.wtime();
    auto& scheme = instance(state, pick.scheme);
    if (checked) scheme.skip_next_input_check();
    scheme.synchronize(comm, grad, out);
    consume_in_call(comm, out);
    state.local_time_s = comm.wtime() - t0;
    out.stats.phases.insert(out.stats.phases.begin(), profile_stats.phases.begin(),
                            profile_stats.phases.end());
    record_pick(out, state, pick);
  }

  // Asked to fold in place (SchemeOptions::fold_in_place), `auto` folds the result of a pick that
  // does not (every scheme but Zen's element path) inside its own call: the time it measures of
  // each candidate then runs to its consumer's read for every candidate alike (Zen's read is in
  // its call), and the trials compare like with like.
  template <class Index>
  void consume_in_call(Communicator& comm, SyncResult<Index>& out) const {
    if (!options_.fold_in_place || out.folded) return;
    PhaseScope phase(comm, out.stats, "consume");
    out.folded = fold_result(out);
  }

  template <class Index>
  static void record_pick(SyncResult<Index>& out, const State& state,
                          const SchemeTuner::Pick& pick) {
    out.stats.chosen = pick.scheme;
    out.stats.exploring = pick.exploring;
    out.stats.predicted_s = pick.predicted_s;
    out.stats.reason = state.tuner.reason(pick);
  }

  SyncScheme& instance(State& state, const std::string& name) {
    for (auto& s : state.schemes)
      if (s->name() == name) return *s;
    state.schemes.push_back(make_scheme(name, options_));
    return *state.schemes.back();
  }

  // The ranked schemes (among SchemeOptions::auto_schemes) whose working memory fits on every
  // rank (a trial must not fail where synchronize() would refuse); one allreduce, at profiling
  // only.
  template <class Index>
  std::vector<cost::Estimate> fitting(Communicator& comm, State& state,
                                      std::vector<cost::Estimate> ranked,
                                      const SparseGradient<Index>& grad) {
    const auto& only = options_.auto_schemes;
    std::erase_if(ranked, [&](const cost::Estimate& e) {
      return !only.empty() && std::find(only.begin(), only.end(), e.scheme) == only.end();
    });
    if (ranked.empty())
      throw std::invalid_argument("auto: the cost model ranked none of its schemes");
    std::vector<std::uint8_t> refused;
    for (const auto& e : ranked) {
      const auto need = instance(state, e.scheme)
                            .dense_memory_bytes(grad.elements, comm.size(), grad.value_count());
      refused.push_back(util::memory_problem(need, comm.ranks_on_node(), e.scheme) ? 1 : 0);
    }
    comm.allreduce<std::uint8_t>(refused, comm::ReduceOp::max);
    std::vector<cost::Estimate> fit;
    for (std::size_t k = 0; k < ranked.size(); ++k)
      if (!refused[k]) fit.push_back(std::move(ranked[k]));
    // None fits: the model's favourite runs and refuses with its own message, on every rank.
    if (fit.empty()) fit.push_back(std::move(ranked.front()));
    return fit;
  }

  template <class Index>
  cost::SparsityProfile measure_profile(Communicator& comm, const SparseGradient<Index>& grad) {
    const int n = comm.size();
    const std::uint64_t M = grad.elements;
    const std::uint64_t B = options_.omnireduce_block_elements;
    // Rows: indices count rows of w values; `units` is the index space (M / w).
    const std::uint64_t w = grad.width, units = M / w;
    const double blocks_per_row = w > 1 ? std::ceil(static_cast<double>(w) / B) : 1.0;
    cost::SparsityProfile p;
    p.ranks = n;
    p.elements = M;
    p.index_bytes = sizeof(Index);
    p.block_elements = B;
    // Its computation is charged in three sections, between the two collectives (cpu_costs.h).
    static const auto op = comm::cpu_op_id("auto.profile");
    std::optional<comm::ChargedWork> work(std::in_place, comm, op, static_cast<double>(grad.nnz()));
    // Local non-zero blocks (indices are sorted).
    std::vector<std::uint64_t> blocks;
    for (auto x : grad.indices) {
      const std::uint64_t b = w > 1 ? x : x / B;  // rows: a row's blocks stand or fall together
      if (blocks.empty() || blocks.back() != b) blocks.push_back(b);
    }
    // One collective for the sizes, one for the samples.
    std::vector<double> sums{static_cast<double>(grad.nnz()), static_cast<double>(blocks.size())};
    work.reset();
    comm.allreduce<double>(sums, comm::ReduceOp::sum);
    const double mean_nnz = sums[0] / n, mean_blocks = sums[1] / n * blocks_per_row;
    p.density = mean_nnz * static_cast<double>(w) / static_cast<double>(M);
    const std::uint64_t total_blocks = (M + B - 1) / B;
    p.block_density = mean_blocks / static_cast<double>(total_blocks);
    const double idx_rate = std::min(1.0, kSamplesPerRank / std::max(mean_nnz, 1.0));
    const double blk_rate = std::min(1.0, kSamplesPerRank / std::max(mean_blocks, 1.0));
    auto sampled = [](std::uint64_t x, double rate) {
      return static_cast<double>(zen_hash(x, kSampleSeed) >> 11) * 0x1.0p-53 < rate;
    };
    work.emplace(comm, op, static_cast<double>(grad.nnz() + blocks.size()));
    std::vector<std::uint64_t> mine{0};
    for (auto x : grad.indices)
      if (sampled(x, idx_rate)) mine.push_back(x);
    mine[0] = mine.size() - 1;
    const double blk_sample_rate = w > 1 ? std::min(1.0, blk_rate * blocks_per_row) : blk_rate;
    for (auto b : blocks)
      if (sampled(b, blk_sample_rate)) mine.push_back(b);
    std::vector<std::size_t> counts;
    work.reset();
    const auto all = comm.allgatherv<std::uint64_t>(mine, &counts);
    work.emplace(comm, op, static_cast<double>(all.size()));
    // Split each rank's message into its index sample and block sample.
    std::vector<std::span<const std::uint64_t>> idx_s(n), blk_s(n);
    std::size_t at = 0;
    double idx_total = 0, blk_total = 0;
    for (int r = 0; r < n; ++r) {
      const auto k = static_cast<std::size_t>(all[at]);
      idx_s[r] = std::span(all).subspan(at + 1, k);
      blk_s[r] = std::span(all).subspan(at + 1 + k, counts[r] - 1 - k);
      idx_total += static_cast<double>(k);
      blk_total += static_cast<double>(counts[r] - 1 - k);
      at += counts[r];
    }
    // Samples arrive sorted (indices are sorted, and so are the local blocks), so unions are
    // merges: level i holds the unions of aligned groups of 2^i ranks, as recursive doubling forms.
    using Set = std::vector<std::uint64_t>;
    auto merged = [](const Set& a, const Set& b) {
      Set u;
      u.reserve(a.size() + b.size());
      std::set_union(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(u));
      return u;
    };
    auto union_all = [&](const std::vector<std::span<const std::uint64_t>>& s,
                         std::vector<double>* gamma_levels, double mean) {
      std::vector<Set> level;
      for (const auto& r : s) level.emplace_back(r.begin(), r.end());
      while (true) {
        if (gamma_levels) {
          double sum = 0;
          for (const auto& u : level) sum += static_cast<double>(u.size());
          gamma_levels->push_back(sum / static_cast<double>(level.size()) / mean);
        }
        if (level.size() == 1) return level.front();
        std::vector<Set> next;
        for (std::size_t k = 0; k + 1 < level.size(); k += 2)
          next.push_back(merged(level[k], level[k + 1]));
        if (level.size() %
            2) {  // an odd group out joins the last pair: only the full union needs it
          if (next.empty())
            next.push_back(level.back());
          else
            next.back() = merged(next.back(), level.back());
          gamma_levels = nullptr;  // groups are no longer aligned powers of two beyond this level
        }
        level.swap(next);
      }
    };
    const double idx_mean = std::max(idx_total / n, 1e-9);
    const Set agg = union_all(idx_s, &p.gamma_pow2, idx_mean);
    p.gamma_n = static_cast<double>(agg.size()) / idx_mean;
    std::vector<double> per_range(n, 0);
    for (auto x : agg) {
      per_range[static_cast<std::size_t>(static_cast<unsigned __int128>(x) * n / units)] += 1;
    }
    const double max_range = *std::max_element(per_range.begin(), per_range.end());
    p.skew = agg.empty() ? 1.0 : max_range * n / static_cast<double>(agg.size());
    const double blk_mean = std::max(blk_total / n, 1e-9);
    p.block_gamma_n = static_cast<double>(union_all(blk_s, nullptr, blk_mean).size()) / blk_mean;
    // Zen's pull rounds, by its own rules for this network (zen_partition.h): one exchange, or its
    // counts then its chunks (a bitmap byte per 8 slots and 4 per non-zero sum, by chunk).
    const std::uint64_t min_block =
        zen_pull_min_block(options_.zen_pull_min_block, network_->latency_s,
                           network_->bandwidth_bytes_per_s, static_cast<std::uint32_t>(n));
    const double pull_weight = static_cast<double>(M) / 8 + 4 * p.gamma_n * mean_nnz * w;
    const auto servers = static_cast<std::uint32_t>(n);
    if (w > 1)  // rows (zen_row_sync.h): counts, then a fixed number of chunks
      p.zen_pull_rounds =
          static_cast<std::uint32_t>(1 + ZenRowSync::pull_chunks(options_.row_views));
    else if (zen_exchanges_without_counts(M, servers, sizeof(Index), min_block))
      p.zen_push_rounds = p.zen_pull_rounds = 1;
    else
      p.zen_pull_rounds =
          1 + zen_pull_chunks_for(pull_weight, servers, options_.zen_pull_chunks, min_block);
    return p;
  }

  static std::string fmt_reason(const cost::SparsityProfile& p,
                                const std::vector<cost::Estimate>& ranked) {
    std::string s = "model: d=" + std::to_string(p.density) +
                    " gamma_n=" + std::to_string(p.gamma_n) + " skew=" + std::to_string(p.skew) +
                    ";";
    for (const auto& e : ranked) s += " " + e.scheme + "=" + std::to_string(e.time_s * 1e3) + "ms";
    return s;
  }

  SchemeOptions options_;
  std::optional<cost::Network> network_;
  std::map<Key, State> tuners_;
  std::optional<Key> last_key_;  // the last completed call's kind
  std::optional<Key> fast_;      // fast calls go to this kind's settled pick
  int unwatched_ = 0;            // fast calls since the last reduction
};

}  // namespace

std::unique_ptr<SyncScheme> make_auto(const SchemeOptions& o) {
  return std::make_unique<AutoScheme>(o);
}

}  // namespace atl::sync
