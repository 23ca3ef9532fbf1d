// The trainer: data, model, resume, the step loop, checkpoints and the report. The parts live in
// their own files: settings (presets, checks, agreement), embedding_grad / embedding_rows (the
// embedding's sparse gradient and its rows), lazy_adamw (row-wise optimizer), dense_sync
// (flat buffers, bucketed allreduce, top-k with error feedback), evaluation, run_log (metrics,
// plot), scheme_comparison (--compare-schemes) and step_timer (named phases).
//
// Data-parallel step: forward/backward on every rank, the embedding's sparse gradient summed by a
// sparse scheme, dense gradients by bucketed allreduce (or top-k + error feedback through the
// sparse scheme), then identical optimizer steps on every rank.
#include "atoll/train/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "agreed.h"
#include "atoll/sparse/trace.h"
#include "atoll/sync/scheme.h"
#include "atoll/train/corpus.h"
#include "atoll/util/fault_point.h"
#include "atoll/util/files.h"
#include "checkpoint.h"
#include "ddp.h"
#include "dense_sync.h"
#include "embedding_grad.h"
#include "embedding_rows.h"
#include "engine.h"
#include "evaluation.h"
#include "faults.h"
#include "layer_events.h"
#include "lazy_adamw.h"
#include "local_sgd.h"
#include "mesh.h"
#include "model.h"
#include "nonfinite.h"
#include "run_checkpoint.h"
#include "run_log.h"
#include "run_plan.h"
#include "scheme_comparison.h"
#include "settings.h"
#include "sharded_optimizer.h"
#include "site_training.h"
#include "step_timer.h"
#include "timeline.h"

namespace atl::train {

using comm::Communicator;
using comm::ReduceOp;

namespace {

// Every rank reads the corpus' training documents for the vocabulary and keeps its shard; word
// ids must mean the same on every rank (a host whose corpus differs would train other words).
RankData load_data(Communicator& comm, const TrainConfig& cfg) {
  RankData data;
  agreed(comm, [&] {
    CorpusOptions co;
    co.dir = cfg.corpus.empty() ? default_corpus_dir() : std::filesystem::path(cfg.corpus);
    co.vocab_size = static_cast<std::size_t>(cfg.model.vocab);
    data = load_rank_data(co, comm.rank(), comm.size());
    if (data.train.size() < static_cast<std::size_t>(cfg.model.seq_len) + 1) {
      throw DataError(fmt::format("rank {}: shard of {} tokens is shorter than one sequence",
                                  comm.rank(), data.train.size()));
    }
  });
  const std::uint64_t fnv = vocabulary_fingerprint(data.vocab);
  if (comm.allreduce_value(fnv, ReduceOp::min) != comm.allreduce_value(fnv, ReduceOp::max)) {
    comm.agree(
        "the ranks built different vocabularies: the corpus must hold the same files on every "
        "host (scripts/fetch-corpus checks its SHA-256)");
  }
  return data;
}

void print_setup(const TrainConfig& cfg, int world, const Engine& engine, const RankData& data) {
  std::int64_t params = 0;
  for (const auto& p : engine.model->parameters()) params += p.numel();
  const auto M = static_cast<std::int64_t>(cfg.model.vocab) * cfg.model.d_embed;
  fmt::print(
      "atoll train: preset {}, {} ranks, {} parameters ({} in the embedding, {:.0f}%), vocab {}, "
      "{} training documents ({} on rank 0), sync {}{}{}\n",
      cfg.preset, world, params, M, 100.0 * static_cast<double>(M) / static_cast<double>(params),
      data.vocab.size(), data.train_documents, data.shard_documents, cfg.sync,
      cfg.topk > 0 ? fmt::format(", dense top-k {}", cfg.topk) : "",
      cfg.strategy == "ddp" ? ""
      : cfg.strategy == "aedit"
          ? fmt::format(", strategy aedit (a round every {} s)", cfg.sync_seconds)
          : fmt::format(", strategy {} (H = {})", cfg.strategy, cfg.sync_every));
}

// This rank's forward and backward pass on its batch of `step` (the hooks see every unit: an
// overlapped synchronization completes inside the forward pass; simulated compute is charged per
// unit). Returns the loss.
torch::Tensor forward_backward(Engine& engine, LayerEvents& events, const RankData& data,
                               const TrainConfig& cfg, int step, int rank) {
  auto tokens =
      to_tensor(sample_batch(data.train, cfg.batch, cfg.model.seq_len, cfg.seed, step, rank),
                cfg.model.seq_len);
  engine.model->zero_grad(true);
  // The 2-D mesh, sharded: the embedding rows the group's batches use, gathered at unit 0.
  if (engine.sharded) {
    engine.sharded->embedding().expect(
        {tokens.data_ptr<std::int64_t>(), static_cast<std::size_t>(tokens.numel())});
  }
  auto loss = engine.model->loss(tokens, &events);
  events.begin_backward();
  loss.backward();
  events.end_step();
  return loss;
}

// A local-SGD step's fields in its metrics line; rank 0 names the workers dropped (EDiT's penalty,
// or diloco's non-finite pseudo-gradients).
template <class Index>
void record_local_step(nlohmann::json& j, const TrainConfig& cfg, const LocalSgd<Index>& diloco,
                       int step, bool synced, double outer_sync_s, bool leader) {
  j["local"] = true;
  j["synced"] = synced;
  j["outer_sync_s"] = outer_sync_s;  // exposed: at the sync point and in the next forward pass
  if (!synced) return;
  if (diloco.fault_fired()) j["fault_injected"] = cfg.inject_fault;
  if (cfg.strategy == "edit" || cfg.strategy == "aedit") {
    j["edit_dropped"] = diloco.last_dropped();  // [layer, worker] pairs
    j["edit_skipped_layers"] = diloco.last_skipped_layers();
    j["edit_weight_max"] = diloco.last_weights().max;
    j["edit_effective_workers"] = diloco.last_weights().effective_workers;
  } else if (!diloco.last_dropped().empty()) {  // diloco: a non-finite pseudo-gradient
    j["dropped"] = diloco.last_dropped();
  }
  if (!leader || diloco.last_dropped().empty()) return;
  std::map<int, int> layers_of;  // worker -> layers it was dropped in
  for (const auto& [layer, w] : diloco.last_dropped()) ++layers_of[w];
  for (const auto& [w, count] : layers_of) {
    fmt::print(stderr, "atoll train: step {}: {} dropped worker {} in {} of {} layers\n", step,
               cfg.strategy == "diloco" ? "non-finite pseudo-gradient:" : "EDiT", w, count,
               diloco.penalty_layers());
  }
}

// aedit: the round this step joined: its index, whether it was skipped, each worker's steps since
// its last sync, and the tokens all workers have trained.
template <class Index>
void record_round(nlohmann::json& j, const TimedRounds::Round& round, const LocalSgd<Index>& diloco,
                  double batch_tokens) {
  j["round"] = diloco.rounds()->rounds();
  j["round_skipped"] = round.skipped;
  j["round_steps"] = round.steps;
  j["tokens"] = static_cast<double>(round.total_steps()) * batch_tokens;
}

// The report's totals before the first step.
RunReport new_report(const TrainConfig& cfg, int world) {
  const auto M = static_cast<double>(cfg.model.vocab) * static_cast<double>(cfg.model.d_embed);
  RunReport report;
  report.world = world;
  report.steps = cfg.steps;
  report.sync = cfg.sync;
  report.tokens_per_step = static_cast<double>(world) * cfg.batch * cfg.model.seq_len;
  report.dense_equivalent_bytes = world > 1 ? 2.0 * (world - 1) / world * M * 4.0 : 0.0;
  return report;
}

// Validation before training (step 0 of a run that does not resume). Collective.
void first_validation(Communicator& comm, const TrainConfig& cfg, Gpt& model,
                      const std::vector<std::int64_t>& val_windows, RunReport& report,
                      MetricsLog& metrics) {
  const Evaluation first = evaluate(comm, model, val_windows, cfg.model.seq_len);
  report.have_first = true;
  report.first_ppl = first.perplexity;
  if (comm.rank() != 0) return;
  if (!cfg.quiet) {
    fmt::print("step 0: validation loss {:.4f}, perplexity {:.1f}\n", first.loss, first.perplexity);
  }
  metrics.record({{"step", 0},
                  {"val_loss", first.loss},
                  {"val_ppl", first.perplexity},
                  {"unigram_val_ppl", report.unigram_ppl}});
}

// The state a rank holds, in bytes (the largest over ranks: the model's parameters, the inner
// optimizers' state, local SGD's θ̄ + outer momentum + Δ) and the largest peak RSS of a rank's
// process (meaningful under mpirun; SMPI's ranks share one process). Collective; rank 0 prints.
template <class Index>
void print_memory(Communicator& comm, const Engine& engine, const LocalSgd<Index>* diloco,
                  const SiteTraining* sites, bool leader) {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::vector<double> bytes{static_cast<double>(engine.parameter_bytes()),
                            static_cast<double>(engine.optimizer_state_bytes()),
                            diloco  ? static_cast<double>(diloco->state_bytes())
                            : sites ? static_cast<double>(sites->state_bytes())
                                    : 0.0,
                            static_cast<double>(usage.ru_maxrss) * 1024.0};
  comm.allreduce(std::span<double>(bytes), ReduceOp::max);
  if (!leader) return;
  const auto mb = [](double b) { return b / 1e6; };
  fmt::print(
      "  state per rank (largest): parameters {:.2f} MB, inner optimizer {:.2f} MB, local SGD "
      "(θ̄, outer momentum, Δ) {:.2f} MB, total {:.2f} MB; peak RSS {:.1f} MB\n",
      mb(bytes[0]), mb(bytes[1]), mb(bytes[2]), mb(bytes[0] + bytes[1] + bytes[2]), mb(bytes[3]));
}

// What a step did, for its metrics line.
struct StepFacts {
  int step = 0;
  bool local_step = false, synced = false;
  double mean_loss = 0, lr = 0, delay_s = 0;
  std::uint64_t bytes_sent = 0;
  std::size_t embedding_rows = 0;
};

// A step's metrics line (validation is added by the caller); adds the step to the report and to
// the scheme comparison.
template <class Index>
nlohmann::json step_metrics(const TrainConfig& cfg, const StepTimer& timer, const StepFacts& f,
                            DataParallel<Index>& ddp, const LocalSgd<Index>* diloco,
                            RunReport& report, bool leader) {
  const double step_s = timer.total() - timer.seconds("compare");
  const double model_s = cfg.sim_compute_s > 0
                             ? cfg.sim_compute_s
                             : timer.seconds("model") + timer.seconds("optimizer");
  const double emb_sync_s = timer.seconds("embedding_sync");
  auto& comparison = ddp.comparison();
  if (comparison.active())
    comparison.record_step(step_s - emb_sync_s - timer.seconds("rows"),
                           emb_sync_s + timer.seconds("rows"));
  const double comm_s = timer.seconds("wait") + emb_sync_s + timer.seconds("dense_sync") +
                        timer.seconds("outer_sync") + timer.seconds("param_gather");
  const double emb_bytes =
      f.local_step
          ? (f.synced && diloco ? static_cast<double>(diloco->last_embedding_stats().bytes_sent())
                                : 0)
          : static_cast<double>(ddp.embedding_result().stats.bytes_sent());
  report.add_step(step_s, comm_s, emb_bytes);

  nlohmann::json j{{"step", f.step},
                   {"loss", f.mean_loss},
                   {"lr", f.lr},
                   {"tokens_per_s", report.tokens_per_step / step_s},
                   {"step_s", step_s},
                   {"comm_s", comm_s},
                   {"wait_s", timer.seconds("wait")},
                   {"embedding_sync_s", emb_sync_s},
                   {"model_s", model_s},
                   {"bytes_sent", f.bytes_sent},
                   {"embedding_bytes_sent", emb_bytes},
                   {"embedding_rows", f.embedding_rows}};
  // aedit's local steps: the tokens of all workers are known at rounds only.
  if (cfg.strategy != "aedit" || !f.local_step) j["tokens"] = f.step * report.tokens_per_step;
  if (f.delay_s > 0) j["delay_s"] = f.delay_s;
  if (!f.local_step) {
    for (const auto& ph : ddp.embedding_result().stats.phases)
      j["embedding_phases_s"][ph.name] = ph.time_s;
    return j;
  }
  if (!diloco) {  // training across sites: site_training.h records its meetings
    j["local"] = true;
    j["synced"] = f.synced;
    return j;
  }
  record_local_step(j, cfg, *diloco, f.step, f.synced, timer.seconds("outer_sync"), leader);
  if (const auto& round = diloco->last_round()) {
    record_round(j, *round, *diloco, static_cast<double>(cfg.batch) * cfg.model.seq_len);
  }
  return j;
}

// Training across sites: the model clock, and a meeting's round, this site's clique (−1: idle)
// and its WAN time (rank 0's site).
void record_site_step(nlohmann::json& j, const SiteTraining& sites,
                      const std::optional<SiteTraining::Meeting>& meeting) {
  j["sim_time_s"] = sites.clock();
  j["wall_s"] = sites.wall();  // simulated under SMPI (the model clock's cross-check)
  if (!meeting) return;
  j["round"] = meeting->round;
  j["clique"] = meeting->clique;
  j["wan_s"] = meeting->wan_s;
}

// A local step's gradient: under the 2-D mesh its shard group's average (and the loss, the
// group's mean); else this worker's own, with no collective (the loss logged is rank 0's).
// `nonfinite` names a NaN or infinity in the worker's gradient (its group agrees on it).
template <class Index>
RowGradient worker_gradient(Mesh& mesh, std::optional<DataParallel<Index>>& group_ddp,
                            const Engine& engine, int rank, StepTimer& timer, int step,
                            sparse::SparseGradient<Index> local, double loss, double& mean_loss,
                            std::optional<NonFinite>& nonfinite) {
  if (group_ddp) {
    auto rows = group_ddp->synchronize(*mesh.group(), timer, step, local, loss, mean_loss);
    nonfinite = group_ddp->nonfinite();
    return rows;
  }
  timer.start("check");
  if (const int bad = first_nonfinite(engine, local.values); bad >= 0) {
    nonfinite = NonFinite{rank, gradient_name(engine, bad)};
    mean_loss = loss;
    return {};
  }
  timer.start("rows");
  sync::SyncResult<Index> own;
  own.sparse = std::move(local);
  mean_loss = loss;
  return touched_rows(own, engine.model->tok->weight.size(1), 1.0);
}

// A step whose gradient held a NaN or an infinity: --nonfinite fail ends the run (every rank at
// once when they agreed on it: `agreed`; else this worker's process ends the job), skip reports it
// (`reporter`: the rank that prints) and the caller takes no optimizer step.
void on_nonfinite(const TrainConfig& cfg, const NonFinite& bad, int step, bool agreed,
                  bool reporter) {
  const bool fail = cfg.nonfinite == "fail";
  const std::string message = describe_nonfinite(bad, step, fail);
  if (fail) throw NonFiniteGradientError(message, agreed);
  if (reporter) fmt::print(stderr, "atoll train: {}\n", message);
}

// Rank 0 at the end: metrics closed, the loss plot.
void close_run(const TrainConfig& cfg, MetricsLog& metrics) {
  const std::filesystem::path out = cfg.out;
  if (out.empty()) return;
  metrics.close();
  if (cfg.plot) {
    try {
      const auto png = plot_loss(out);
      if (!png.empty() && !cfg.quiet) fmt::print("  loss curve: {}\n", png);
    } catch (const util::FileError& e) {
      std::fprintf(stderr, "atoll: warning: no loss plot: %s\n", e.what());
    }
  }
  if (!cfg.quiet) fmt::print("  metrics: {}\n", (out / "metrics.jsonl").string());
}

template <class Index>
int run(Communicator& comm, const TrainConfig& cfg);

}  // namespace

int train(Communicator& comm, const TrainConfig& cfg) {
  comm.agree(check_config(cfg));
  agree_settings(comm, cfg);
  if (comm.size() % cfg.shard_group_size != 0) {
    comm.agree(fmt::format(
        "--shard-group-size {} does not divide the {} ranks (a worker is a group of that many "
        "consecutive ranks)",
        cfg.shard_group_size, comm.size()));
  }
  const int workers = comm.size() / cfg.shard_group_size;
  if (const auto& c = parse_faults(cfg.inject_fault).corrupt; c && c->rank >= workers) {
    comm.agree(fmt::format("--inject-fault {}: worker {} does not exist (this run has {} workers)",
                           cfg.inject_fault, c->rank, workers));
  }
  if (const int r = parse_faults(cfg.inject_fault).largest_rank(); r >= comm.size()) {
    comm.agree(fmt::format("--inject-fault {}: rank {} does not exist (this run has {} ranks)",
                           cfg.inject_fault, r, comm.size()));
  }
  const std::uint64_t M = static_cast<std::uint64_t>(cfg.model.vocab) * cfg.model.d_embed;
  return M < (std::uint64_t{1} << 32) ? run<std::uint32_t>(comm, cfg)
                                      : run<std::uint64_t>(comm, cfg);
}

namespace {

template <class Index>
int run(Communicator& comm, const TrainConfig& cfg) {
  const int rank = comm.rank(), world = comm.size();
  const bool leader = rank == 0;
  torch::set_num_threads(1);

  const RankData data = load_data(comm, cfg);
  const auto val_windows =
      validation_windows(data.validation, cfg.model.seq_len, cfg.eval_windows, rank, world);
  torch::manual_seed(cfg.seed);
  Engine engine(comm, cfg);
  auto& model = engine.model;

  const std::filesystem::path out = cfg.out;
  const RunRecord this_run = run_record(cfg, world, vocabulary_fingerprint(data.vocab));
  std::optional<LocalSgd<Index>> local_sgd;
  // The 2-D mesh: local SGD synchronizes over `outer` (the sync group; the world when S = 1);
  // under S > 1 a local step's gradients are averaged over the shard group by `group_ddp`.
  Mesh mesh(comm, cfg.shard_group_size);
  Communicator& outer = mesh.sync();
  std::optional<DataParallel<Index>> group_ddp;
  if (mesh.group() && cfg.shard) engine.shard_optimizer(cfg, *mesh.group());
  // ddp steps (and local SGD's warm-up steps); sharded: reduce-scatter in the group, allreduce
  // of the pieces across the groups.
  DataParallel<Index> ddp(comm, cfg, engine, rank, engine.sharded != nullptr, &mesh.sync());
  // Training across sites: each rank a site; diloco meets in the schedule's cliques.
  std::optional<SiteTraining> sites;
  if (!cfg.topology.empty()) sites.emplace(cfg, comm, engine);
  if (cfg.strategy != "ddp" && !sites) {
    local_sgd.emplace(cfg, engine, mesh.workers(), mesh.group());
    if (mesh.group()) group_ddp.emplace(*mesh.group(), cfg, engine, rank, cfg.shard);
  }
  // Bytes this rank sent, on all its communicators.
  const auto bytes_sent = [&] {
    std::uint64_t b = comm.traffic().bytes_sent;
    if (mesh.group()) b += mesh.group()->traffic().bytes_sent + outer.traffic().bytes_sent;
    if (sites) b += sites->bytes_sent();
    return b;
  };
  LocalSgd<Index>* diloco = local_sgd ? &*local_sgd : nullptr;
  int start = 0, own_start = 0;  // aedit: own_start is this worker's step count (start rank 0's)
  int saved_world = world;       // the ranks that wrote the checkpoint resumed from
  if (cfg.resume || !cfg.resume_from.empty()) {
    start = resume(comm, cfg, engine, diloco, sites ? &*sites : nullptr, this_run, own_start,
                   saved_world);
    if (leader && !cfg.quiet) fmt::print("atoll train: resumed after step {}\n", start);
  }
  const bool timed = cfg.strategy == "aedit";
  // aedit: batches all workers have trained so far (the round schedule's measure of progress).
  const std::int64_t trained =
      timed ? comm.allreduce_value<std::int64_t>(own_start, ReduceOp::sum) : 0;
  RunPlan plan(cfg, world, trained);
  const Faults faults = parse_faults(cfg.inject_fault);
  faults.arm(rank);  // kill:... / stop:... (util/fault_point.h)
  const Slowdown slowdown(faults, rank, cfg.seed);
  MetricsLog metrics;
  agreed(comm, [&] {
    if (!leader) return;
    metrics.open(out, start);
    if (!cfg.timeline.empty()) util::check_writable(cfg.timeline);  // now, not after the run
  });

  RunReport report = new_report(cfg, world);
  if (leader && !cfg.quiet) print_setup(cfg, world, engine, data);
  if (sites && leader && !cfg.quiet) {
    fmt::print("  {} sites of {}: {}\n", sites->topology().size(), cfg.topology, sites->describe());
  }
  report.unigram_ppl = unigram_perplexity(comm, data.vocab, val_windows, cfg.model.seq_len);
  Evaluation last{};
  if (start == 0 && cfg.eval_every > 0) {
    first_validation(comm, cfg, model, val_windows, report, metrics);
  }

  StepTimer timer([&comm] { return comm.wtime(); });
  const bool fixed_compute = cfg.sim_compute_s > 0;
  Timeline timeline;
  LayerEvents events(comm, unit_compute_weights(engine, cfg.model.layers), cfg.sim_compute_s,
                     cfg.timeline.empty() ? nullptr : &timeline);
  int current_step = 0;
  if (diloco && !cfg.timeline.empty()) {
    diloco->on_sync_event([&](int unit, double posted, double wait, double end) {
      timeline.record(current_step, Timeline::Kind::sync, unit, posted, wait, end);
    });
  }
  bool finished = timed ? plan.done() : start >= cfg.steps;
  for (int step = own_start + 1; !finished; ++step) {
    current_step = step;
    util::set_fault_step(step);
    timer.reset();
    const auto bytes0 = bytes_sent();
    const bool local_step = (diloco && diloco->is_local(step)) || (sites && sites->is_local(step));
    if (local_step && diloco) diloco->begin_step(outer, step);
    if (sites) sites->begin_step(step);
    // Model work (forward, backward, optimizer): measured, or charged as --sim-compute-s per
    // unit; an overlapped synchronization completes unit by unit inside the forward pass.
    timer.start("model");
    LayerEvents::StepSync step_sync;
    if (diloco && diloco->pending()) {
      step_sync.before_unit = [&](int unit) { diloco->before_unit(outer, unit); };
      step_sync.progress = [&] { diloco->progress(outer); };
    }
    if (engine.sharded) {  // the 2-D mesh: each unit's parameters gathered before its compute
      // The next unit's gather is prefetched once no synchronization is pending (an overlapped
      // sync still changes the next units' pieces).
      step_sync.gather_unit = [&](int unit) {
        if (unit == 0) return engine.sharded->embedding().gather_expected();  // the batch's rows
        engine.sharded->params().gather_unit(unit, !(diloco && diloco->pending()));
      };
      step_sync.progress = [&] {
        if (diloco && diloco->pending()) diloco->progress(outer);
        engine.sharded->params().progress();
      };
    }
    events.begin_step(step, std::move(step_sync), &timer);
    const auto loss = forward_backward(engine, events, data, cfg, step, rank);
    if (slowdown.poisons(step)) poison_gradient(engine);  // --inject-fault nan:RANK:STEP
    timer.start("delay");                                 // --inject-fault straggler / stall
    const double delay_s =
        slowdown.apply(comm, step, fixed_compute ? cfg.sim_compute_s : timer.seconds("model"));
    timer.start("dump");
    auto local = embedding_gradient<Index>(engine.embedding, model->tok_rows, engine.vocab);
    if (!cfg.dump_grads.empty() &&
        (cfg.dump_grads_steps == 0 || step - start <= cfg.dump_grads_steps)) {
      agreed(comm, [&] {
        sparse::write_trace(sparse::trace_path(cfg.dump_grads, step, rank), local, rank, world,
                            step);
      });
    }

    double mean_loss = 0;
    std::optional<NonFinite> nonfinite;
    const RowGradient rows =
        local_step ? worker_gradient(mesh, group_ddp, engine, rank, timer, step, std::move(local),
                                     loss.item<double>(), mean_loss, nonfinite)
                   : ddp.synchronize(comm, timer, step, local, loss.item<double>(), mean_loss);
    if (!local_step) nonfinite = ddp.nonfinite();
    if (nonfinite) {
      const bool agreed = !local_step;
      on_nonfinite(cfg, *nonfinite, step, agreed,
                   agreed ? leader : !mesh.group() || mesh.group()->rank() == 0);
    }

    timer.start("optimizer");
    if (fixed_compute) comm.fixed_compute_begin();
    const double lr = learning_rate(cfg, cfg.lr, step);
    if (!nonfinite) engine.inner_step(rows, lr, learning_rate(cfg, cfg.embed_lr, step), step);
    if (fixed_compute) comm.fixed_compute_end(0);  // charged with the forward/backward above
    bool synced = false;
    StepPlan now = plan.at_step(step);
    std::optional<SiteTraining::Meeting> meeting;
    if (sites) {  // the model clock; diloco's meetings in the schedule's cliques
      sites->charge_compute(timer.seconds("model") + timer.seconds("optimizer"));
      if (!local_step) sites->charge_ddp_step(comm, ddp.embedding_result().stats.bytes_sent());
      meeting = sites->end_local_step(step);
      if (now.last) sites->finish();  // an overlapped exchange lands before the last validation
      synced = meeting && meeting->clique >= 0;
    }
    if (local_step && diloco) {
      timer.start("outer_sync");
      synced = diloco->end_step(outer, step, rows);
      if (timed) now = synced ? plan.at_round(diloco->last_round()->total_steps()) : StepPlan{};
      // An overlapped sync completes now if validation, a checkpoint or the end needs θ̄.
      if (now.eval || now.checkpoint || now.last) diloco->flush(outer);
    }
    timer.stop();
    finished = now.last;
    const bool eval_now = now.eval, checkpoint_now = now.checkpoint;
    if (diloco && (eval_now || checkpoint_now)) diloco->pause_clock(outer);

    StepFacts facts{
        step, local_step, synced, mean_loss, lr, delay_s, bytes_sent() - bytes0, rows.rows.size()};
    nlohmann::json j = step_metrics(cfg, timer, facts, ddp, diloco, report, leader);
    if (sites) record_site_step(j, *sites, meeting);
    if (nonfinite) j["nonfinite"] = {{"rank", nonfinite->rank}, {"tensor", nonfinite->tensor}};
    if (step == own_start + 1 && !cfg.inject_fault.empty()) j["inject_fault"] = cfg.inject_fault;
    if (step == own_start + 1 && saved_world > 0 && saved_world != world) {  // elastic resume
      j["world"] = world;
      j["resumed_from_world"] = saved_world;
    }
    if (eval_now) {
      // Validation evaluates θ̄ (the synchronized parameters) under local SGD.
      auto run_eval = [&] {
        engine.with_full_params(
            val_windows, [&] { last = evaluate(comm, model, val_windows, cfg.model.seq_len); });
      };
      if (sites) {  // the mean of the sites' θ̄, and their spread
        sites->with_mean_anchor(comm, run_eval);
        j["site_spread"] = sites->last_spread();
      } else if (diloco) {
        diloco->with_outer_params(outer, run_eval);
      } else {
        run_eval();
      }
      j["val_loss"] = last.loss;
      j["val_ppl"] = last.perplexity;
      report.evaluated = true;
      report.last_ppl = last.perplexity;
    }
    if (leader) {
      metrics.record(j);
      if (!cfg.quiet && (step % cfg.log_every == 0 || finished || eval_now))
        report.print_progress(step, mean_loss, eval_now ? &last.loss : nullptr);
    }
    if (checkpoint_now) {  // aedit: named after rank 0's step count
      const int name =
          timed && local_step ? static_cast<int>(diloco->last_round()->local_steps[0]) : step;
      save_checkpoint(comm, outer, cfg, engine, diloco, sites ? &*sites : nullptr, this_run, name,
                      step);
    }
    if (diloco && (eval_now || checkpoint_now)) diloco->resume_clock(outer);
  }

  if (diloco) diloco->flush(outer);
  if (!cfg.timeline.empty()) agreed(comm, [&] { timeline.write(comm, cfg.timeline); });
  if (leader && !cfg.quiet && report.timed_steps > 0) report.print();
  if (sites) {
    const double clock = comm.allreduce_value(sites->clock(), ReduceOp::max);
    const double wall = sites->training_span(comm);
    if (leader && !cfg.quiet) {
      fmt::print(
          "  model clock at the end: {:.4f} s (the latest site); MPI_Wtime of training "
          "{:.4f} s{} (validation left out)\n",
          clock, wall, Communicator::simulated() ? ", simulated" : "");
    }
  }
  if (!cfg.quiet) print_memory(comm, engine, diloco, sites ? &*sites : nullptr, leader);
  ddp.comparison().report(comm, cfg.sync, report.tokens_per_step, out);
  if (leader) close_run(cfg, metrics);
  return 0;
}

}  // namespace
}  // namespace atl::train
