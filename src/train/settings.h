// Training settings beyond parsing: presets, range checks (trainer.h), agreement across ranks and
// the learning-rate schedule. Private to src/train; free of LibTorch.
#pragma once

#include <optional>
#include <string>

#include "atoll/comm/communicator.h"
#include "atoll/sync/scheme.h"
#include "atoll/train/corpus.h"
#include "atoll/train/trainer.h"

namespace atl::train {

// Every rank must run the same number of steps, evaluations, checkpoints and compared schemes, so
// every rank must have the same settings: ranks started with different ones (an MPMD launch, a
// config file that differs between hosts) stop here with an error naming the first difference,
// instead of running different sequences of collectives (a hang). Paths are left out: a host may
// name its own copy of the corpus or output directory. Collective.
void agree_settings(comm::Communicator& comm, const TrainConfig& config);

// Everything `atoll train` checks before it builds its model, on every rank: the settings' ranges
// (check_config), their agreement across ranks, and what depends on the world size (the shard
// group, --inject-fault's ranks). Throws the same CollectiveError on every rank. Collective.
void check_run(comm::Communicator& comm, const TrainConfig& config);

// The sync schemes' options for this run (--sync-threads).
sync::SchemeOptions sync_options(const TrainConfig& config);

// Linear warm-up over --warmup-steps, then cosine decay to 10% of `peak` at --steps.
double learning_rate(const TrainConfig& config, double peak, int step);

// FNV-1a of the vocabulary's words, one per line: tells checkpoints of another vocabulary apart.
std::uint64_t vocabulary_fingerprint(const Vocabulary& vocab);

}  // namespace atl::train
