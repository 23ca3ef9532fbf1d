// What the trainer reports (step_record.h).
#include "step_record.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/resource.h>

#include <cstdio>
#include <filesystem>
#include <map>

#include "atoll/util/files.h"
#include "evaluation.h"
#include "timed_rounds.h"

namespace atl::train {

using comm::Communicator;
using comm::ReduceOp;

namespace {

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

}  // namespace

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
  for (const auto& [name, seconds] : timer.phases()) j["phases_s"][name] = seconds;
  if (!f.local_step) {
    const auto& stats = ddp.embedding_result().stats;
    for (const auto& ph : stats.phases) j["embedding_phases_s"][ph.name] = ph.time_s;
    if (!stats.chosen.empty()) {  // --sync auto: what it ran, and whether as a trial
      j["embedding_scheme"] = stats.chosen;
      if (stats.exploring) j["embedding_scheme_trial"] = true;
    }
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
                      const std::optional<SiteTraining::Meeting>& meeting, double batch_tokens) {
  j["sim_time_s"] = sites.clock();
  j["wall_s"] = sites.wall();  // simulated under SMPI (the model clock's cross-check)
  if (sites.landed())
    j["overlap_landed"] = true;  // --overlap-land arrival: applied after this step
  if (!meeting) return;
  j["round"] = meeting->round;
  j["clique"] = meeting->clique;
  j["wan_s"] = meeting->wan_s;
  if (meeting->clique >= 0) j["exchange_bytes"] = meeting->bytes_sent;  // rank 0's site
  if (!meeting->dropped.empty()) j["dropped"] = meeting->dropped;       // sites of rank 0's clique
  if (meeting->skipped) j["meeting_skipped"] = true;
  if (meeting->fault_fired) j["fault_injected"] = true;
  if (sites.timed()) {  // aedit: all sites' steps so far
    j["batches"] = sites.batches();
    j["tokens"] = static_cast<double>(sites.batches()) * batch_tokens;
  }
  if (meeting->clique >= 0 && sites.edit()) {   // EDiT's penalty in rank 0's clique
    j["edit_dropped"] = meeting->edit_dropped;  // [layer, site] pairs
    j["edit_skipped_layers"] = meeting->edit_skipped;
    j["edit_weight_max"] = meeting->edit_weight_max;
  }
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

template nlohmann::json step_metrics(const TrainConfig&, const StepTimer&, const StepFacts&,
                                     DataParallel<std::uint32_t>&, const LocalSgd<std::uint32_t>*,
                                     RunReport&, bool);
template nlohmann::json step_metrics(const TrainConfig&, const StepTimer&, const StepFacts&,
                                     DataParallel<std::uint64_t>&, const LocalSgd<std::uint64_t>*,
                                     RunReport&, bool);
template void print_memory(Communicator&, const Engine&, const LocalSgd<std::uint32_t>*,
                           const SiteTraining*, bool);
template void print_memory(Communicator&, const Engine&, const LocalSgd<std::uint64_t>*,
                           const SiteTraining*, bool);

}  // namespace atl::train
