#include "run_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <functional>

#include "agreed.h"
#include "atoll/util/fault_point.h"
#include "sharded_optimizer.h"
#include "site_training.h"

namespace atl::train {

using comm::Communicator;
using comm::ReduceOp;

namespace {

// The main file's manifest: every rank file's checksum, by rank. A checkpoint made of rank files
// is complete only when its main file, written last and atomically, lists them all.
constexpr const char* kManifestKey = "rank_file_checksums";

// Reads rank `rank`'s file of the checkpoint `file` into `ar`, checked against the manifest of the
// main file `main` (older checkpoints have none); returns the rank file's step.
std::uint64_t read_rank_file(const std::filesystem::path& file,
                             torch::serialize::InputArchive& main, int rank,
                             torch::serialize::InputArchive& ar) {
  const auto path = rank_checkpoint_path(file, rank);
  std::uint64_t sum = 0;
  const auto step = read_checkpoint(path, ar, &sum);
  const auto keys = main.keys();
  if (std::find(keys.begin(), keys.end(), kManifestKey) == keys.end()) return step;
  torch::Tensor listed;
  main.read(kManifestKey, listed);
  if (rank >= listed.numel()) {
    throw CheckpointError(fmt::format("checkpoint {} lists {} rank files; rank {}'s is not one",
                                      file.string(), listed.numel(), rank));
  }
  const auto want = static_cast<std::uint64_t>(listed[rank].item<std::int64_t>());
  if (want != sum) {
    throw CheckpointError(fmt::format(
        "checkpoint {}: checksum {:016x}, but the main file {} lists {:016x} for rank {}: the "
        "rank file belongs to another checkpoint or was rewritten",
        path.string(), sum, file.string(), want, rank));
  }
  return step;
}

}  // namespace

// Loads the checkpoint to resume from (--resume: the newest in out/checkpoints; --resume-from)
// on every rank; returns its step. Refuses, on every rank, what this run cannot continue.
template <class Index>
int resume(Communicator& comm, const TrainConfig& cfg, Engine& engine, LocalSgd<Index>* diloco,
           SiteTraining* sites, const RunRecord& this_run, int& own_step, int& saved_world) {
  int start = 0;
  bool resized = false;
  const std::filesystem::path out = cfg.out;
  agreed(comm, [&] {
    std::filesystem::path file = cfg.resume_from;
    std::string previous;  // named in the error when the newest checkpoint is refused
    if (file.empty()) {
      auto all = list_checkpoints(out);
      if (all.empty()) {
        throw CheckpointError(
            fmt::format("--resume: no checkpoint in {}", checkpoint_dir(out).string()));
      }
      file = all.back();
      previous = all.size() > 1 ? all[all.size() - 2].string() : "";
    }
    torch::serialize::InputArchive ar;
    std::uint64_t step = 0;
    try {
      step = read_checkpoint(file, ar);
    } catch (const CheckpointError& e) {
      if (previous.empty()) throw;
      throw CheckpointError(
          fmt::format("{} (refused); the previous one, {}, can be used with --resume-from {}",
                      e.what(), previous, previous));
    }
    // Refuse what this run cannot continue before any tensor is loaded.
    const RunRecord saved = read_run_record(file, ar);
    const auto check = check_resume(saved, this_run);
    // Elastic: a rank beyond the checkpoint's ranks reads rank 0's file (ranks beyond this run's
    // are dropped); residuals are reset.
    resized = saved.world > 0 && saved.world != comm.size();
    const int source = resized && comm.rank() >= saved.world ? 0 : comm.rank();
    saved_world = saved.world;
    if (!check.refusals.empty()) {
      throw CheckpointError(
          fmt::format("checkpoint {} {}", file.string(), fmt::join(check.refusals, "; and it ")));
    }
    if (comm.rank() == 0) {  // also under --quiet: a resumed run that differs should say so
      for (const auto& note : check.notes) {
        fmt::print(stderr, "atoll train: note: checkpoint {}: {}\n", file.string(), note);
      }
    }
    try {
      if (sites) {  // across sites every site's model differs: its own file
        torch::serialize::InputArchive rank_ar;
        own_step = static_cast<int>(read_rank_file(file, ar, comm.rank(), rank_ar));
        engine.load(rank_ar);
        sites->load(rank_ar);
      } else if (diloco) {  // θ̄ and momentum from the main file (sharded: this rank's share, from
                            // its
        // own file); this worker's state from its own
        torch::serialize::InputArchive rank_ar;
        own_step = static_cast<int>(read_rank_file(file, ar, source, rank_ar));
        diloco->load_shared(diloco->sharded() ? rank_ar : ar);
        engine.load(rank_ar);
        diloco->load_local(rank_ar);
        if (source != comm.rank()) diloco->restart_from_outer();  // a new worker: θ̄
      } else if (engine.sharded) {  // the 2-D mesh: this rank's share of the optimizer state
        torch::serialize::InputArchive rank_ar;
        read_rank_file(file, ar, comm.rank(), rank_ar);
        engine.load(rank_ar);
      } else {
        engine.load(ar);
        if (cfg.topk > 0 &&
            !resized) {  // this rank's residual: its own file (or, older, the main file)
          const auto legacy = "topk_residual_rank" + std::to_string(comm.rank());
          const auto keys = ar.keys();
          if (std::find(keys.begin(), keys.end(), legacy) != keys.end()) {
            engine.load_residual(ar, legacy);
          } else {
            torch::serialize::InputArchive rank_ar;
            read_rank_file(file, ar, comm.rank(), rank_ar);
            engine.load_residual(rank_ar, "topk_residual");
          }
        }
      }
      if (engine.sharded) engine.sharded->params().adopt_model();  // the 2-D mesh's pieces
    } catch (const c10::Error& e) {
      throw CheckpointError(fmt::format("checkpoint {}: cannot load its state ({})", file.string(),
                                        e.what_without_backtrace()));
    } catch (const std::runtime_error& e) {
      throw CheckpointError(fmt::format("checkpoint {}: {}", file.string(), e.what()));
    }
    start = static_cast<int>(step);
    if (!diloco && !sites) own_step = start;  // sites: its own file's (aedit: they differ)
    if (start > cfg.steps && cfg.strategy != "aedit") {  // aedit: rank 0's own step count
      throw CheckpointError(fmt::format("checkpoint {} is at step {}, beyond --steps {}",
                                        file.string(), start, cfg.steps));
    }
  });
  // Each rank read the checkpoint itself: on hosts that see different files (an --out that is
  // not shared) they could resume from different steps and then run different numbers of steps.
  const int lo = comm.allreduce_value<std::int32_t>(start, ReduceOp::min);
  const int hi = comm.allreduce_value<std::int32_t>(start, ReduceOp::max);
  if (lo != hi) {
    comm.agree(
        fmt::format("ranks resumed from different steps ({} to {}): every rank must see the same "
                    "checkpoint, so --out must be one directory shared by all hosts",
                    lo, hi));
  }
  return start;
}

namespace {

// Rank 0 writes the main file last: the model, the run record and, when there are rank files,
// the manifest (`sums`: every rank file's checksum, by rank).
template <class Index>
void write_main_file(Communicator& comm, const TrainConfig& cfg, Engine& engine,
                     LocalSgd<Index>* diloco, const RunRecord& this_run,
                     const std::filesystem::path& file, int step,
                     const std::vector<std::uint64_t>& sums) {
  agreed(comm, [&] {
    util::fault_point("checkpoint");  // --inject-fault: after the rank files, before the main one
    if (comm.rank() != 0) return;
    torch::serialize::OutputArchive ar;
    engine.save(ar);
    if (diloco && !diloco->sharded()) diloco->save_shared(ar);
    write_run_record(ar, this_run);
    if (!sums.empty()) {
      std::vector<std::int64_t> listed(sums.begin(), sums.end());  // bit patterns, as int64
      ar.write(kManifestKey, torch::tensor(listed, torch::kInt64));
    }
    write_checkpoint(file, step, ar);
    prune_checkpoints(cfg.out, cfg.keep_checkpoints);
  });
}

// The files of a checkpoint: the rank files first (where there are any), then the main file.
template <class Index>
void write_checkpoint_files(Communicator& comm, const TrainConfig& cfg, Engine& engine,
                            LocalSgd<Index>* diloco, const SiteTraining* sites,
                            const RunRecord& this_run, const std::filesystem::path& file, int step,
                            int own_step) {
  // What this rank's own file holds (nothing: no rank files).
  std::function<void(torch::serialize::OutputArchive&)> own;
  std::uint64_t own_file_step = step;
  // Across sites: every site its model, optimizer and site state.
  if (sites) {
    own_file_step = own_step;  // aedit: this site's own step count
    own = [&](auto& ar) {
      engine.save(ar);
      sites->save(ar);
    };
  } else if (diloco) {  // replicas differ between synchronizations: model, inner optimizer, rows
    own_file_step = own_step;
    own = [&](auto& ar) {
      engine.save(ar);
      diloco->save_local(ar, comm.wtime());
      if (diloco->sharded()) diloco->save_shared(ar);  // the 2-D mesh: this rank's share
    };
  } else if (engine.sharded) {  // the 2-D mesh: this rank's share of the optimizer state
    own = [&](auto& ar) { engine.save(ar); };
  } else if (engine.dense_sync->topk()) {  // top-k: this rank's error-feedback residual
    own = [&](auto& ar) { engine.save_residual(ar); };
  }
  std::vector<std::uint64_t> sums;
  if (own) {
    std::uint64_t sum = 0;
    agreed(comm, [&] {
      torch::serialize::OutputArchive ar;
      own(ar);
      sum = write_checkpoint(rank_checkpoint_path(file, comm.rank()), own_file_step, ar);
    });
    sums = comm.allgather<std::uint64_t>(sum);
  }
  write_main_file(comm, cfg, engine, sites ? nullptr : diloco, this_run, file, step, sums);
}

}  // namespace

// The checkpoint is named after `step` (aedit: rank 0's step count); each rank's own file records
// its own step count `own_step` (aedit: they differ).
template <class Index>
void save_checkpoint(Communicator& comm, Communicator& outer, const TrainConfig& cfg,
                     Engine& engine, LocalSgd<Index>* diloco, const SiteTraining* sites,
                     const RunRecord& this_run, int step, int own_step) {
  const auto file = checkpoint_path(cfg.out, step);
  if (diloco) diloco->flush(outer);  // an overlapped synchronization completes first
  engine.gather_params();            // the 2-D mesh: the whole model, to be written
  write_checkpoint_files(comm, cfg, engine, diloco, sites, this_run, file, step, own_step);
  engine.release_params();
}

template int resume<std::uint32_t>(Communicator&, const TrainConfig&, Engine&,
                                   LocalSgd<std::uint32_t>*, SiteTraining*, const RunRecord&, int&,
                                   int&);
template int resume<std::uint64_t>(Communicator&, const TrainConfig&, Engine&,
                                   LocalSgd<std::uint64_t>*, SiteTraining*, const RunRecord&, int&,
                                   int&);
template void save_checkpoint<std::uint32_t>(Communicator&, Communicator&, const TrainConfig&,
                                             Engine&, LocalSgd<std::uint32_t>*, const SiteTraining*,
                                             const RunRecord&, int, int);
template void save_checkpoint<std::uint64_t>(Communicator&, Communicator&, const TrainConfig&,
                                             Engine&, LocalSgd<std::uint64_t>*, const SiteTraining*,
                                             const RunRecord&, int, int);

}  // namespace atl::train
