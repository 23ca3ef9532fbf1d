#include "run_checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "agreed.h"
#include "sharded_optimizer.h"
#include "site_training.h"

namespace atl::train {

using comm::Communicator;
using comm::ReduceOp;

// Loads the checkpoint to resume from (--resume: the newest in out/checkpoints; --resume-from)
// on every rank; returns its step. Refuses, on every rank, what this run cannot continue.
template <class Index>
int resume(Communicator& comm, const TrainConfig& cfg, Engine& engine, LocalSgd<Index>* diloco,
           SiteTraining* sites, const RunRecord& this_run, int& own_step) {
  int start = 0;
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
    const auto check = check_resume(read_run_record(file, ar), this_run);
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
        read_checkpoint(rank_checkpoint_path(file, comm.rank()), rank_ar);
        engine.load(rank_ar);
        sites->load(rank_ar);
      } else if (diloco) {  // θ̄ and momentum from the main file (sharded: this rank's share, from
                            // its
        // own file); this worker's state from its own
        torch::serialize::InputArchive rank_ar;
        own_step =
            static_cast<int>(read_checkpoint(rank_checkpoint_path(file, comm.rank()), rank_ar));
        diloco->load_shared(diloco->sharded() ? rank_ar : ar);
        engine.load(rank_ar);
        diloco->load_local(rank_ar);
      } else if (engine.sharded) {  // the 2-D mesh: this rank's share of the optimizer state
        torch::serialize::InputArchive rank_ar;
        read_checkpoint(rank_checkpoint_path(file, comm.rank()), rank_ar);
        engine.load(rank_ar);
      } else {
        engine.load(ar);
        if (cfg.topk > 0) {  // this rank's residual: its own file (or, older, the main file)
          const auto legacy = "topk_residual_rank" + std::to_string(comm.rank());
          const auto keys = ar.keys();
          if (std::find(keys.begin(), keys.end(), legacy) != keys.end()) {
            engine.load_residual(ar, legacy);
          } else {
            torch::serialize::InputArchive rank_ar;
            read_checkpoint(rank_checkpoint_path(file, comm.rank()), rank_ar);
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
    if (!diloco) own_step = start;
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

// The files of a checkpoint (the model whole on every rank).
template <class Index>
void write_checkpoint_files(Communicator& comm, const TrainConfig& cfg, Engine& engine,
                            LocalSgd<Index>* diloco, const SiteTraining* sites,
                            const RunRecord& this_run, const std::filesystem::path& file, int step,
                            int own_step) {
  if (sites) {  // every site its model, optimizer and site state; then rank 0 the main file
    agreed(comm, [&] {
      torch::serialize::OutputArchive ar;
      engine.save(ar);
      sites->save(ar);
      write_checkpoint(rank_checkpoint_path(file, comm.rank()), step, ar);
    });
    agreed(comm, [&] {
      if (comm.rank() != 0) return;
      torch::serialize::OutputArchive ar;
      engine.save(ar);
      write_run_record(ar, this_run);
      write_checkpoint(file, step, ar);
      prune_checkpoints(cfg.out, cfg.keep_checkpoints);
    });
    return;
  }
  if (diloco) {
    // Replicas differ between synchronizations: every rank writes its model, inner optimizer
    // and touched rows to its own file first; then rank 0 the main file with θ̄ and momentum.
    agreed(comm, [&] {
      torch::serialize::OutputArchive ar;
      engine.save(ar);
      diloco->save_local(ar, comm.wtime());
      if (diloco->sharded()) diloco->save_shared(ar);  // the 2-D mesh: this rank's share
      write_checkpoint(rank_checkpoint_path(file, comm.rank()), own_step, ar);
    });
    agreed(comm, [&] {
      if (comm.rank() != 0) return;
      torch::serialize::OutputArchive ar;
      engine.save(ar);
      if (!diloco->sharded()) diloco->save_shared(ar);
      write_run_record(ar, this_run);
      write_checkpoint(file, step, ar);
      prune_checkpoints(cfg.out, cfg.keep_checkpoints);
    });
    return;
  }
  if (engine.sharded) {  // the 2-D mesh: every rank's share of the optimizer state first
    agreed(comm, [&] {
      torch::serialize::OutputArchive ar;
      engine.save(ar);
      write_checkpoint(rank_checkpoint_path(file, comm.rank()), step, ar);
    });
  }
  if (engine.dense_sync->topk()) {  // top-k: every rank's own residual in its own file first
    agreed(comm, [&] {
      torch::serialize::OutputArchive ar;
      engine.save_residual(ar);
      write_checkpoint(rank_checkpoint_path(file, comm.rank()), step, ar);
    });
  }
  agreed(comm, [&] {
    if (comm.rank() != 0) return;
    torch::serialize::OutputArchive ar;
    engine.save(ar);
    write_run_record(ar, this_run);
    write_checkpoint(file, step, ar);
    prune_checkpoints(cfg.out, cfg.keep_checkpoints);
  });
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
                                   LocalSgd<std::uint32_t>*, SiteTraining*, const RunRecord&, int&);
template int resume<std::uint64_t>(Communicator&, const TrainConfig&, Engine&,
                                   LocalSgd<std::uint64_t>*, SiteTraining*, const RunRecord&, int&);
template void save_checkpoint<std::uint32_t>(Communicator&, Communicator&, const TrainConfig&,
                                             Engine&, LocalSgd<std::uint32_t>*, const SiteTraining*,
                                             const RunRecord&, int, int);
template void save_checkpoint<std::uint64_t>(Communicator&, Communicator&, const TrainConfig&,
                                             Engine&, LocalSgd<std::uint64_t>*, const SiteTraining*,
                                             const RunRecord&, int, int);

}  // namespace atl::train
