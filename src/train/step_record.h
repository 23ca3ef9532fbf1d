// What the trainer reports: the setup line, the report's totals, validation at step 0, each
// step's metrics line (ddp, local SGD, training across sites), the state per rank at the end and
// the closing of the run's files. Private to src/train.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/train/corpus.h"
#include "atoll/train/trainer.h"
#include "ddp.h"
#include "engine.h"
#include "local_sgd.h"
#include "model.h"
#include "run_log.h"
#include "site_training.h"
#include "step_timer.h"

namespace atl::train {

// Rank 0's first line: preset, ranks, parameters, corpus, synchronization.
void print_setup(const TrainConfig& cfg, int world, const Engine& engine, const RankData& data);

// The report's totals before the first step.
RunReport new_report(const TrainConfig& cfg, int world);

// Validation before training (step 0 of a run that does not resume). Collective.
void first_validation(comm::Communicator& comm, const TrainConfig& cfg, Gpt& model,
                      const std::vector<std::int64_t>& val_windows, RunReport& report,
                      MetricsLog& metrics);

// What a step did, for its metrics line.
struct StepFacts {
  int step = 0;
  bool local_step = false, synced = false;
  double mean_loss = 0, lr = 0, delay_s = 0;
  std::uint64_t bytes_sent = 0;
  std::size_t embedding_rows = 0;
};

// A step's metrics line (validation is added by the caller); adds the step to the report and to
// the scheme comparison. Rank 0 (`leader`) names the workers a local-SGD sync dropped.
template <class Index>
nlohmann::json step_metrics(const TrainConfig& cfg, const StepTimer& timer, const StepFacts& f,
                            DataParallel<Index>& ddp, const LocalSgd<Index>* diloco,
                            RunReport& report, bool leader);

// Training across sites: the model clock, and a meeting's round, this site's clique (−1: idle)
// and its WAN time (rank 0's site).
void record_site_step(nlohmann::json& j, const SiteTraining& sites,
                      const std::optional<SiteTraining::Meeting>& meeting, double batch_tokens);

// The state a rank holds, in bytes (the largest over ranks: the model's parameters, the inner
// optimizers' state, local SGD's θ̄ + outer momentum + Δ) and the largest peak RSS of a rank's
// process (meaningful under mpirun; SMPI's ranks share one process). Collective; rank 0 prints.
template <class Index>
void print_memory(comm::Communicator& comm, const Engine& engine, const LocalSgd<Index>* diloco,
                  const SiteTraining* sites, bool leader);

// Rank 0 at the end: metrics closed, the loss plot.
void close_run(const TrainConfig& cfg, MetricsLog& metrics);

}  // namespace atl::train
