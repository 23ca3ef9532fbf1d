// Training across sites (docs/wan-train.md): `atoll train --topology FILE` makes each rank one
// site of the planner's topology. Under diloco (and edit, with EDiT's penalty over each clique's
// members: atoll/localsgd/clique_penalty.h), the sites take H local steps (aedit: as many as fit
// in --sync-seconds of the site's model clock, so a slow site takes fewer), then meet in the
// cliques of the schedule's current round (a periodic schedule: planned by the planner for the
// model's real payload, all-to-all, or read from a file) and average by clique
// (atoll/localsgd/clique_sync.h: each site its own anchor θ̄_i and outer momentum); a site in no
// clique of the round keeps training. Under ddp, every step is synchronized over all sites as
// usual. Every step advances a model clock per site (the same kind of clock for every run):
// local work (--compute-s, or the measured model time, divided by the site's --site-speed), per
// round the clique's time from the validated round model (the call `atoll plan` uses), and per
// ddp step the alpha-beta time of its collectives on the same links (ring allreduce of the dense
// gradient, the embedding's sparse bytes as a unicast exchange). A clique's members leave the
// round together at the latest member's arrival plus the clique's time.
// With the 2-D mesh (--shard-group-size S > 1, local SGD) a site is a shard group of S ranks that
// average gradients every step and hold identical replicas; the site's exchange and its outer
// state (anchor, momentum, --pseudo-topk residual) are split over its ranks: rank g of every site
// exchanges the g-th of S contiguous slices of the flat parameters over the mesh's sync group g,
// and the site's ranks then all-gather the new slices. Private to src/train.
#pragma once

#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/localsgd/clique_penalty.h"
#include "atoll/localsgd/clique_sync.h"
#include "atoll/train/trainer.h"
#include "atoll/wan/round_model.h"
#include "atoll/wan/topology.h"
#include "engine.h"
#include "faults.h"
#include "flat_params.h"
#include "site_clock.h"
#include "sparse_pseudo_gradient.h"

namespace atl::train {

class SiteTraining {
 public:
  // Loads the topology, checks that `comm` (the world, or the mesh's sync group) has one rank per
  // site, builds the schedule and each round's clique communicators. `site_group`: the site's
  // ranks under the 2-D mesh, else null. Collective; comm::CollectiveError on bad input.
  SiteTraining(const TrainConfig& config, comm::Communicator& comm, comm::Communicator* site_group,
               Engine& engine);

  const wan::Topology& topology() const { return topology_; }
  const std::string& schedule_name() const { return schedule_name_; }
  std::size_t period() const { return rounds_.size(); }
  double payload_bytes() const { return payload_bytes_; }
  // A description of the schedule's rounds (for the run's log).
  std::string describe() const;
  // The schedule and how it is exchanged, in a few words with a hash of its rounds (the run
  // record's: a resume on another schedule is refused).
  std::string fingerprint() const;

  // Local work of one step on the model clock: --compute-s, or `measured_s`, over the site speed.
  // With --overlap-land arrival, an exchange in flight that has ended on this site's clock by
  // the step's end is applied now (landed() says whether one was).
  void charge_compute(int step, double measured_s);
  bool landed() const { return landed_; }
  // A ddp step's collectives on the model clock (collective: every site leaves at the latest
  // arrival plus their time); `embedding_bytes`: what this rank's sparse sync sent.
  void charge_ddp_step(comm::Communicator& comm, std::uint64_t embedding_bytes);

  struct Meeting {
    std::size_t round = 0;  // index in the schedule's period
    int clique = -1;        // this site's clique in the round (−1: idle)
    double wan_s = 0;       // the clique's round time (model), plus the wait for its members
    // Sites of the clique whose parameters were not finite (dropped from its mean), and whether
    // none was finite (no outer step); whether --inject-fault corrupt fired on this site.
    std::vector<std::size_t> dropped;
    bool skipped = false, fault_fired = false;
    std::uint64_t bytes_sent = 0;  // by this site in the meeting's exchange
    // edit: the (layer, site) pairs EDiT's penalty weighted 0, the layers it skipped, and the
    // mean over layers of the largest weight.
    std::vector<std::pair<std::size_t, std::size_t>> edit_dropped;
    std::vector<std::size_t> edit_skipped;
    double edit_weight_max = 0;
  };
  // diloco, after local step `step` (local steps are those after --sync-warmup-steps): every H-th
  // local step the current round's meeting (collective over each clique). Returns the meeting if
  // the round came (also for an idle site). A site whose parameters hold a NaN or an infinity is
  // dropped from its clique's mean (the clique's first member says so on stderr).
  std::optional<Meeting> end_local_step(int step);
  // After the last step: an exchange still in flight (--overlap-rounds 1) is waited for and its
  // result applied; training time ends.
  void finish();
  // Before a step: the anchors are taken from the (identical) replicas when local steps begin.
  void begin_step(int step);
  bool is_local(int step) const { return local_sgd_ && step > warmup_; }
  // aedit: a round when --sync-seconds of the site's model clock have passed (with --compute-s
  // and --site-speed every site's steps per round are known everywhere, so every site ends the
  // run at the same round); diloco and edit: every H steps.
  bool timed() const { return timed_; }
  const std::vector<std::int64_t>& round_steps() const { return round_steps_; }
  // The steps `site` has taken after the meetings so far, and all sites' sum (the batches they
  // have trained: aedit's measure of progress, as RunPlan::at_round takes it).
  std::int64_t steps_of(std::size_t site) const;
  std::int64_t batches() const;
  bool edit() const { return penalty_.has_value(); }

  // Runs f with the model set to the mean over all sites of their anchors θ̄_i (the replicas,
  // identical, before local training), then restores this site's parameters. Collective over
  // the world `comm`.
  // last_spread(): max over sites of ||θ̄_i − mean|| / ||mean|| at that evaluation.
  void with_mean_anchor(comm::Communicator& comm, const std::function<void()>& f);
  double last_spread() const { return spread_; }

  double clock() const { return clock_->now(); }
  // Seconds since the first step began, less validation (MPI_Wtime: simulated under SMPI, where
  // it cross-checks the model clock).
  double wall() const;
  // Collective: the latest site's end less the latest site's first step (MPI_Wtime; validation
  // left out).
  double training_span(comm::Communicator& comm) const;
  // This site's state in its own checkpoint file: anchor, outer momentum, an exchange in flight,
  // the model clocks, the meetings so far. load() throws std::runtime_error on a mismatch.
  void save(torch::serialize::OutputArchive& ar) const;
  void load(torch::serialize::InputArchive& ar);

  // This site's local-SGD state: anchor and outer momentum, and an overlapped exchange's copies.
  std::uint64_t state_bytes() const;
  // Bytes this rank sent on the cliques' communicators.
  std::uint64_t bytes_sent() const;

 private:
  void build_schedule(const TrainConfig& config, comm::Communicator& comm);
  std::string planned_schedule(comm::Communicator& comm) const;
  comm::Communicator clique_comm(comm::Communicator& comm, const wan::ResolvedRound& round,
                                 int& clique);
  // At a meeting or the end: the clock waits for the exchange in flight, then its result is
  // merged into the parameters (merge_pending: as a correction, or with --overlap-mix).
  void apply_pending();
  void merge_pending();
  // The meeting's exchange on this site's clique (dense: θ_C; --pseudo-topk: Σ of sparse Δ) and
  // the outer step; the new parameters are applied now, or after the next round when overlapped.
  void exchange(int step, Meeting& m);
  // Under SMPI: every site starts its first step at the same simulated instant.
  void align_start();
  // The model clock's exits of a round's members (SiteClock::meet).
  SiteClock::MemberExits member_exits(const wan::ResolvedRound& round) const;
  // edit: the penalty's outcome in the meeting (sites, not clique ranks); the clique's first
  // member names the sites dropped on stderr.
  void penalize(int step, Meeting& m, const localsgd::CliquePenalty::Outcome& out);
  void evaluate_mean_anchor(comm::Communicator& comm, const std::function<void()>& f);
  // The site's whole vector from this rank's slice of it (all-gathered over the site's ranks;
  // one rank per site: the slice is the whole).
  std::vector<float> site_whole(std::vector<float> slice);
  std::vector<float> own_slice(const std::vector<float>& whole) const;

  // --overlap-rounds 1: the last meeting's exchange, still in flight on the model clock.
  struct Pending {
    // All parameters: the new anchor − the parameters sent, or with --overlap-mix the new anchor.
    std::vector<float> result;
    std::vector<float> anchor;  // the anchor before the meeting (this rank's slice)
  };

  Engine& engine_;
  wan::Topology topology_;
  FlatParams params_;            // every parameter (the embedding first), one flat buffer
  comm::Communicator* group_;    // the site's ranks (2-D mesh), else null
  std::size_t lo_ = 0, hi_ = 0;  // this rank's slice of the flat parameters
  double payload_bytes_ = 0;
  wan::RoundOptions round_options_;
  std::string schedule_name_;
  std::vector<wan::ResolvedRound> rounds_;
  std::vector<comm::Communicator> cliques_;  // per round: this site's clique (idle: alone)
  std::vector<int> clique_index_;            // per round: its index (−1: idle)
  bool local_sgd_ = false;
  int warmup_ = 0, every_ = 1;
  double outer_lr_ = 0, outer_momentum_ = 0;
  bool overlap_ = false, started_ = false, timed_ = false;
  bool land_at_arrival_ = false, landed_ = false;  // --overlap-land arrival
  double mix_ = -1;                        // --overlap-mix (< 0: the result is a correction)
  std::vector<std::int64_t> round_steps_;  // per site: local steps per round
  std::size_t site_ = 0, meetings_ = 0;
  double step_weight_ = 0;               // aedit --step-weight r
  double compute_s_ = 0;                 // --compute-s (0: measured)
  std::optional<FaultInjection> fault_;  // --inject-fault corrupt:SITE:STEP:SCALE, until it fires
  std::optional<SparsePseudoGradient> sparse_;      // --pseudo-topk
  std::optional<localsgd::CliquePenalty> penalty_;  // edit: EDiT's penalty by clique
  std::optional<SiteClock> clock_;
  double spread_ = 0, wall0_ = 0, excluded_ = 0;
  std::optional<double> ended_;  // MPI_Wtime less validation after the last step
  std::optional<localsgd::CliqueOuterState> state_;  // from the first local step
  std::optional<Pending> pending_;
  comm::Communicator& sites_comm_;  // one rank per site: the world, or the mesh's sync group
};

}  // namespace atl::train
