// The trainer: `atoll train`'s run, built in order (data, model, strategy, resume), and its
// step loop. The parts live in their own files: settings (presets, checks, agreement),
// step_compute (data, forward/backward, a worker's gradient), step_record (metrics lines and the
// report), ddp (data-parallel synchronization), local_sgd (diloco, edit, aedit), site_training
// (training across sites), mesh (the 2-D mesh), run_checkpoint (checkpoints and resume),
// run_plan (when to validate and checkpoint), evaluation, run_log and step_timer.
//
// Data-parallel step: forward/backward on every rank, the embedding's sparse gradient summed by a
// sparse scheme, dense gradients by bucketed allreduce (or top-k + error feedback through the
// sparse scheme), then identical optimizer steps on every rank. Local SGD: the same step without
// the collectives, then the strategy's synchronization every H steps (or T seconds).
#include "atoll/train/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>
#include <optional>

#include "agreed.h"
#include "atoll/sparse/trace.h"
#include "atoll/util/fault_point.h"
#include "atoll/util/files.h"
#include "ddp.h"
#include "embedding_grad.h"
#include "engine.h"
#include "evaluation.h"
#include "faults.h"
#include "layer_events.h"
#include "local_sgd.h"
#include "mesh.h"
#include "model.h"
#include "nonfinite.h"
#include "run_checkpoint.h"
#include "run_log.h"
#include "run_plan.h"
#include "settings.h"
#include "sharded_optimizer.h"
#include "site_training.h"
#include "step_compute.h"
#include "step_record.h"
#include "step_timer.h"
#include "threads.h"
#include "timeline.h"
#include "train_entry.h"

namespace atl::train {

using comm::Communicator;
using comm::ReduceOp;

namespace {

template <class Index>
int run(Communicator& comm, const TrainConfig& cfg);

}  // namespace

int run_checked(Communicator& comm, const TrainConfig& cfg) {
  const std::uint64_t M = static_cast<std::uint64_t>(cfg.model.vocab) * cfg.model.d_embed;
  return M < (std::uint64_t{1} << 32) ? run<std::uint32_t>(comm, cfg)
                                      : run<std::uint64_t>(comm, cfg);
}

namespace {

// One run: its parts, built in the order the run needs them, and the step loop.
template <class Index>
class TrainRun {
 public:
  TrainRun(Communicator& comm, const TrainConfig& cfg);
  int run();

 private:
  void begin();         // resume, the plan, the faults, the metrics, step 0's validation
  bool step(int step);  // one training step; true after the last
  LayerEvents::StepSync step_sync(bool local_step);
  // After the inner step: the model clock and meetings across sites, local SGD's sync.
  void outer_sync(int step, bool local_step, const RowGradient& rows, StepPlan& now, bool& synced,
                  std::optional<SiteTraining::Meeting>& meeting);
  void validate(nlohmann::json& j);
  void end();
  std::uint64_t bytes_sent();  // this rank's, on all its communicators

  Communicator& comm_;
  const TrainConfig& cfg_;
  const int rank_, world_;
  const bool leader_;
  const bool timed_;  // aedit: rounds every T seconds
  const RankData data_;
  const std::vector<std::int64_t> val_windows_;
  Engine engine_;
  RunRecord this_run_;
  // The 2-D mesh: local SGD synchronizes over `outer_` (the sync group; the world when S = 1);
  // under S > 1 a local step's gradients are averaged over the shard group by `group_ddp_`.
  Mesh mesh_;
  Communicator& outer_;
  // ddp steps (and local SGD's warm-up steps); sharded: reduce-scatter in the group, allreduce
  // of the pieces across the groups.
  std::optional<DataParallel<Index>> ddp_;
  std::optional<SiteTraining> sites_;  // training across sites: each worker a site
  std::optional<LocalSgd<Index>> local_sgd_;
  std::optional<DataParallel<Index>> group_ddp_;
  LocalSgd<Index>* diloco_ = nullptr;
  int start_ = 0, own_start_ = 0;  // aedit: own_start_ is this worker's step count
  int saved_world_;                // the ranks that wrote the checkpoint resumed from
  std::optional<RunPlan> plan_;
  const Faults faults_;
  const Slowdown slowdown_;
  MetricsLog metrics_;
  RunReport report_;
  Evaluation last_{};
  StepTimer timer_;
  Timeline timeline_;
  std::optional<LayerEvents> events_;
  int current_step_ = 0;
};

template <class Index>
TrainRun<Index>::TrainRun(Communicator& comm, const TrainConfig& cfg)
    : comm_(comm),
      cfg_(cfg),
      rank_(comm.rank()),
      world_(comm.size()),
      leader_(rank_ == 0),
      timed_(cfg.strategy == "aedit"),
      data_(load_data(comm, cfg)),
      val_windows_(
          validation_windows(data_.validation, cfg.model.seq_len, cfg.eval_windows, rank_, world_)),
      engine_((torch::manual_seed(cfg.seed), comm), cfg),
      this_run_(run_record(cfg, world_, vocabulary_fingerprint(data_.vocab))),
      mesh_(comm, cfg.shard_group_size),
      outer_(mesh_.sync()),
      saved_world_(world_),
      faults_(parse_faults(cfg.inject_fault)),
      slowdown_(faults_, rank_, cfg.seed),
      report_(new_report(cfg, world_)),
      timer_([&comm] { return comm.wtime(); }) {
  if (mesh_.group() && cfg.shard) engine_.shard_optimizer(cfg, *mesh_.group());
  ddp_.emplace(comm, cfg, engine_, rank_, engine_.sharded != nullptr, &mesh_.sync());
  if (!cfg.topology.empty()) {  // a site per worker: per rank, or per shard group
    sites_.emplace(cfg, mesh_.sync(), mesh_.group(), engine_);
    this_run_.sites = sites_->fingerprint();
  }
  if (cfg.strategy != "ddp" && mesh_.group()) {
    group_ddp_.emplace(*mesh_.group(), cfg, engine_, rank_, cfg.shard);
  }
  if (cfg.strategy != "ddp" && !sites_) {
    local_sgd_.emplace(cfg, engine_, mesh_.workers(), mesh_.group());
    diloco_ = &*local_sgd_;
  }
}

template <class Index>
std::uint64_t TrainRun<Index>::bytes_sent() {
  std::uint64_t b = comm_.traffic().bytes_sent;
  if (mesh_.group()) b += mesh_.group()->traffic().bytes_sent + outer_.traffic().bytes_sent;
  if (sites_) b += sites_->bytes_sent();
  return b;
}

template <class Index>
void TrainRun<Index>::begin() {
  if (cfg_.resume || !cfg_.resume_from.empty()) {
    start_ = resume(comm_, cfg_, engine_, diloco_, sites_ ? &*sites_ : nullptr, this_run_,
                    own_start_, saved_world_);
    if (leader_ && !cfg_.quiet) fmt::print("atoll train: resumed after step {}\n", start_);
  }
  // aedit: batches all workers have trained so far (the round schedule's measure of progress).
  const std::int64_t trained =
      timed_ ? comm_.allreduce_value<std::int64_t>(own_start_, ReduceOp::sum) : 0;
  plan_.emplace(cfg_, world_, trained);
  faults_.arm(rank_);  // kill:... / stop:... (util/fault_point.h)
  agreed(comm_, [&] {
    if (!leader_) return;
    metrics_.open(cfg_.out, start_);
    if (!cfg_.timeline.empty()) util::check_writable(cfg_.timeline);  // now, not after the run
  });
  if (leader_ && !cfg_.quiet) print_setup(cfg_, world_, engine_, data_);
  if (sites_ && leader_ && !cfg_.quiet) {
    fmt::print("  {} sites of {}: {}\n", sites_->topology().size(), cfg_.topology,
               sites_->describe());
    if (sites_->timed()) {
      std::vector<std::string> steps;
      for (std::size_t j = 0; j < sites_->round_steps().size(); ++j)
        steps.push_back(
            fmt::format("{} {}", sites_->topology().site(j).code, sites_->round_steps()[j]));
      fmt::print("  aedit: local steps per round ({} s of each site's model clock): {}\n",
                 cfg_.sync_seconds, fmt::join(steps, ", "));
    }
  }
  report_.unigram_ppl = unigram_perplexity(comm_, data_.vocab, val_windows_, cfg_.model.seq_len);
  if (start_ == 0 && cfg_.eval_every > 0) {
    first_validation(comm_, cfg_, engine_.model, val_windows_, report_, metrics_);
  }
  events_.emplace(comm_, unit_compute_weights(engine_, cfg_.model.layers), cfg_.sim_compute_s,
                  cfg_.timeline.empty() ? nullptr : &timeline_);
  if (!cfg_.timeline.empty()) ddp_->set_timeline(&timeline_);
  if (diloco_ && !cfg_.timeline.empty()) {
    diloco_->on_sync_event([this](int unit, double posted, double wait, double end) {
      timeline_.record(current_step_, Timeline::Kind::sync, unit, posted, wait, end);
    });
  }
}

template <class Index>
int TrainRun<Index>::run() {
  begin();
  bool finished = timed_ ? plan_->done() : start_ >= cfg_.steps;
  for (int step = own_start_ + 1; !finished; ++step) finished = this->step(step);
  end();
  return 0;
}

// The step's hooks inside the model's units: an overlapped synchronization completes unit by
// unit inside the forward pass; under the sharded 2-D mesh each unit's parameters are gathered
// before its compute; a synchronous step's dense sums are posted unit by unit in the backward pass.
template <class Index>
LayerEvents::StepSync TrainRun<Index>::step_sync(bool local_step) {
  LayerEvents::StepSync sync;
  if (!local_step && ddp_->overlaps_backward()) {
    sync.after_backward = [this](int unit) { ddp_->post_unit(comm_, unit); };
  }
  auto* diloco = diloco_;
  if (diloco && diloco->pending()) {
    sync.before_unit = [this, diloco](int unit) { diloco->before_unit(outer_, unit); };
    sync.progress = [this, diloco] { diloco->progress(outer_); };
  }
  if (engine_.sharded) {
    // The next unit's gather is prefetched once no synchronization is pending (an overlapped
    // sync still changes the next units' pieces).
    sync.gather_unit = [this, diloco](int unit) {
      if (unit == 0) return engine_.sharded->embedding().gather_expected();  // the batch's rows
      engine_.sharded->params().gather_unit(unit, !(diloco && diloco->pending()));
    };
    sync.progress = [this, diloco] {
      if (diloco && diloco->pending()) diloco->progress(outer_);
      engine_.sharded->params().progress();
    };
  }
  return sync;
}

template <class Index>
bool TrainRun<Index>::step(int step) {
  current_step_ = step;
  util::set_fault_step(step);
  timer_.reset();
  const auto bytes0 = bytes_sent();
  const bool local_step =
      (diloco_ && diloco_->is_local(step)) || (sites_ && sites_->is_local(step));
  if (local_step && diloco_) diloco_->begin_step(outer_, step);
  if (sites_) sites_->begin_step(step);
  // Model work (forward, backward, optimizer): measured, or charged as --sim-compute-s per unit.
  timer_.start("model");
  events_->begin_step(step, step_sync(local_step), &timer_);
  const auto loss = forward_backward(engine_, *events_, data_, cfg_, step, rank_);
  if (slowdown_.poisons(step)) poison_gradient(engine_);  // --inject-fault nan:RANK:STEP
  timer_.start("delay");                                  // --inject-fault straggler / stall
  const bool fixed_compute = cfg_.sim_compute_s > 0;
  const double delay_s =
      slowdown_.apply(comm_, step, fixed_compute ? cfg_.sim_compute_s : timer_.seconds("model"));
  timer_.start("dump");
  auto local = embedding_gradient<Index>(engine_.embedding, engine_.model->tok_rows, engine_.vocab,
                                         cfg_.embedding_rows);
  if (!cfg_.dump_grads.empty() &&
      (cfg_.dump_grads_steps == 0 || step - start_ <= cfg_.dump_grads_steps)) {
    agreed(comm_, [&] {
      sparse::SparseGradient<Index> elements;  // traces hold the element form
      if (local.width > 1) sparse::expand_blocks(local, elements);
      sparse::write_trace(sparse::trace_path(cfg_.dump_grads, step, rank_),
                          local.width > 1 ? elements : local, rank_, world_, step);
    });
  }

  double mean_loss = 0;
  std::optional<NonFinite> nonfinite;
  const RowGradient rows =
      local_step ? worker_gradient(mesh_, group_ddp_, engine_, rank_, timer_, step,
                                   std::move(local), loss.item<double>(), mean_loss, nonfinite)
                 : ddp_->synchronize(comm_, timer_, step, local, loss.item<double>(), mean_loss);
  if (!local_step) nonfinite = ddp_->nonfinite();
  if (nonfinite) {
    const bool agreed = !local_step;
    on_nonfinite(cfg_, *nonfinite, step, agreed,
                 agreed ? leader_ : !mesh_.group() || mesh_.group()->rank() == 0);
  }

  timer_.start("optimizer");
  if (fixed_compute) comm_.fixed_compute_begin();
  const double lr = learning_rate(cfg_, cfg_.lr, step);
  if (!nonfinite) engine_.inner_step(rows, lr, learning_rate(cfg_, cfg_.embed_lr, step), step);
  if (fixed_compute) comm_.fixed_compute_end(0);  // charged with the forward/backward above
  bool synced = false;
  StepPlan now = plan_->at_step(step);
  std::optional<SiteTraining::Meeting> meeting;
  outer_sync(step, local_step, rows, now, synced, meeting);
  timer_.stop();
  const bool eval_now = now.eval, checkpoint_now = now.checkpoint;
  if (diloco_ && (eval_now || checkpoint_now)) diloco_->pause_clock(outer_);

  StepFacts facts{
      step, local_step, synced, mean_loss, lr, delay_s, bytes_sent() - bytes0, rows.rows.size()};
  nlohmann::json j = step_metrics(cfg_, timer_, facts, *ddp_, diloco_, report_, leader_);
  if (sites_) record_site_step(j, *sites_, meeting, report_.tokens_per_step / world_);
  if (nonfinite) j["nonfinite"] = {{"rank", nonfinite->rank}, {"tensor", nonfinite->tensor}};
  if (step == own_start_ + 1 && !cfg_.inject_fault.empty()) j["inject_fault"] = cfg_.inject_fault;
  if (step == own_start_ + 1 && saved_world_ > 0 && saved_world_ != world_) {  // elastic resume
    j["world"] = world_;
    j["resumed_from_world"] = saved_world_;
  }
  if (eval_now) validate(j);
  if (leader_) {
    metrics_.record(j);
    if (!cfg_.quiet && (step % cfg_.log_every == 0 || now.last || eval_now))
      report_.print_progress(step, mean_loss, eval_now ? &last_.loss : nullptr);
  }
  if (checkpoint_now) {  // aedit: named after rank 0's step count
    const int name = !timed_ || !local_step ? step
                     : sites_               ? static_cast<int>(sites_->steps_of(0))
                              : static_cast<int>(diloco_->last_round()->local_steps[0]);
    save_checkpoint(comm_, outer_, cfg_, engine_, diloco_, sites_ ? &*sites_ : nullptr, this_run_,
                    name, step);
  }
  if (diloco_ && (eval_now || checkpoint_now)) diloco_->resume_clock(outer_);
  return now.last;
}

template <class Index>
void TrainRun<Index>::outer_sync(int step, bool local_step, const RowGradient& rows, StepPlan& now,
                                 bool& synced, std::optional<SiteTraining::Meeting>& meeting) {
  if (sites_) {  // the model clock; diloco's meetings in the schedule's cliques
    sites_->charge_compute(step, timer_.seconds("model") + timer_.seconds("optimizer"));
    if (!local_step) sites_->charge_ddp_step(comm_, ddp_->embedding_result().stats.bytes_sent());
    meeting = sites_->end_local_step(step);
    // aedit: the sites' step counts differ; validation, checkpoints and the end come at a round.
    if (timed_ && local_step) now = meeting ? plan_->at_round(sites_->batches()) : StepPlan{};
    if (now.last) sites_->finish();  // an overlapped exchange lands before the last validation
    synced = meeting && meeting->clique >= 0;
  }
  if (local_step && diloco_) {
    timer_.start("outer_sync");
    synced = diloco_->end_step(outer_, step, rows);
    if (timed_) now = synced ? plan_->at_round(diloco_->last_round()->total_steps()) : StepPlan{};
    // An overlapped sync completes now if validation, a checkpoint or the end needs θ̄.
    if (now.eval || now.checkpoint || now.last) diloco_->flush(outer_);
  }
}

// Validation evaluates θ̄ (the synchronized parameters) under local SGD; across sites the mean
// of the sites' θ̄, and their spread. Collective.
template <class Index>
void TrainRun<Index>::validate(nlohmann::json& j) {
  auto run_eval = [&] {
    engine_.with_full_params(val_windows_, [&] {
      last_ = evaluate(comm_, engine_.model, val_windows_, cfg_.model.seq_len);
    });
  };
  if (sites_) {
    sites_->with_mean_anchor(comm_, run_eval);
    j["site_spread"] = sites_->last_spread();
  } else if (diloco_) {
    diloco_->with_outer_params(outer_, run_eval);
  } else {
    run_eval();
  }
  j["val_loss"] = last_.loss;
  j["val_ppl"] = last_.perplexity;
  report_.evaluated = true;
  report_.last_ppl = last_.perplexity;
}

template <class Index>
void TrainRun<Index>::end() {
  if (diloco_) diloco_->flush(outer_);
  if (!cfg_.timeline.empty()) agreed(comm_, [&] { timeline_.write(comm_, cfg_.timeline); });
  if (leader_ && !cfg_.quiet && report_.timed_steps > 0) report_.print();
  if (sites_) {
    const double clock = comm_.allreduce_value(sites_->clock(), ReduceOp::max);
    const double wall = sites_->training_span(comm_);
    if (leader_ && !cfg_.quiet) {
      fmt::print(
          "  model clock at the end: {:.4f} s (the latest site); MPI_Wtime of training "
          "{:.4f} s{} (validation left out)\n",
          clock, wall, Communicator::simulated() ? ", simulated" : "");
    }
  }
  if (!cfg_.quiet) print_memory(comm_, engine_, diloco_, sites_ ? &*sites_ : nullptr, leader_);
  ddp_->comparison().report(comm_, cfg_.sync, report_.tokens_per_step, cfg_.out);
  if (leader_) close_run(cfg_, metrics_);
}

template <class Index>
int run(Communicator& comm, const TrainConfig& cfg) {
  use_one_compute_thread();
  return TrainRun<Index>(comm, cfg).run();
}

}  // namespace
}  // namespace atl::train
