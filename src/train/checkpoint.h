// Training checkpoints (LibTorch archives inside a checked container). Private to src/train.
//
// File: out/checkpoints/step-<8 digits>.ckpt, written atomically (util::write_file_atomic):
//   bytes 0-7   magic "ATLCKPT1"
//   bytes 8-15  step (u64, little endian): the number of completed optimizer steps
//   bytes 16-23 payload size P (u64)
//   bytes 24-.. payload: a torch::serialize archive (model, optimizers, the run record below)
//   last 8      FNV-1a 64 of everything before
// A truncated file (size differs from 32 + P) or a checksum mismatch is refused with an error
// naming the file; older checkpoints are kept (keep_checkpoints) so one of them can be used.
#pragma once

#include <torch/torch.h>

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "atoll/train/trainer.h"
#include "checkpoint_container.h"

namespace atl::train {

std::filesystem::path checkpoint_dir(const std::filesystem::path& out);
std::filesystem::path checkpoint_path(const std::filesystem::path& out, std::uint64_t step);
// Checkpoint files in out/checkpoints, oldest first.
std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& out);

// Serialises `archive` into the container and writes it atomically; returns its checksum.
std::uint64_t write_checkpoint(const std::filesystem::path& file, std::uint64_t step,
                               torch::serialize::OutputArchive& archive);
// Verifies the container and loads the archive; returns the step (and the file's checksum, the
// trailer, in `checksum`). Throws CheckpointError.
std::uint64_t read_checkpoint(const std::filesystem::path& file,
                              torch::serialize::InputArchive& archive,
                              std::uint64_t* checksum = nullptr);

// A rank's own part of the checkpoint `main_file` (local SGD: replicas differ), beside it:
// step-N.rank-RRRRR.ckpt, in the same container. Written by every rank before rank 0 writes the
// main file, whose manifest lists every rank file's checksum: a main file implies its rank files,
// and a rank file from another checkpoint is refused.
std::filesystem::path rank_checkpoint_path(const std::filesystem::path& main_file, int rank);

// Deletes all but the newest `keep` checkpoints (with their per-rank files).
void prune_checkpoints(const std::filesystem::path& out, int keep);

// What a checkpoint records about the run that wrote it, beside its tensors. Archive keys: "shape"
// (int64 tensor: vocab, d_embed, d_model, layers, heads, seq_len, adaptive head 0/1; every
// version), "run" (a JSON string with the rest; absent before issue 13, when world, settings and
// fingerprint are unknown and only what the archive holds is checked; with --topk its
// "topk_residual_files" counts the per-rank files holding the residuals) and, before issue 14,
// "topk_residual_rank<r>" (one per rank with --topk, in the main file).
struct RunRecord {
  ModelShape shape;
  bool cutoffs_known = true;  // false: an older checkpoint of an adaptive head
  int world = 0;              // ranks that wrote it; 0: unknown
  int topk_residuals = 0;  // ranks whose top-k error-feedback residual it (or its rank files) holds
  // Settings a run may change on resume (noted, not refused), as the flags spell them.
  double topk = 0, lr = 0, embed_lr = 0, weight_decay = 0;
  double pseudo_topk_decay = 1;  // 1 for checkpoints written before it was recorded
  int batch = 0, warmup_steps = 0;
  std::uint64_t seed = 0;
  std::string sync;
  // Refused when they differ: another strategy or inner optimizer holds other state. "ddp" and
  // "adamw" for checkpoints written before they were recorded.
  std::string strategy = "ddp", optimizer = "adamw";
  // The 2-D mesh: refused when they differ (the local-SGD state is split by S when sharded).
  int shard_group_size = 1;
  bool shard = true;
  // Training across sites: the schedule and its exchange (SiteTraining::fingerprint()); refused
  // when it differs: the meetings so far, the model clocks and an exchange in flight belong to
  // it. Empty: not across sites (or not recorded).
  std::string sites;
  bool settings_known = false;
  std::uint64_t vocabulary_fnv = 0;  // FNV-1a of the word list, one word per line; 0: unknown
};

RunRecord run_record(const TrainConfig& config, int world, std::uint64_t vocabulary_fnv);
void write_run_record(torch::serialize::OutputArchive& archive, const RunRecord& record);
// Throws CheckpointError naming `file` when the record is unreadable.
RunRecord read_run_record(const std::filesystem::path& file,
                          torch::serialize::InputArchive& archive);

// Differences between the run that wrote a checkpoint and the one resuming it. `refusals`: the
// resumed run would crash or silently train something else (another model, world size or
// vocabulary, missing top-k residuals); `notes`: settings the user changed on purpose (learning
// rate, batch, ...) or state that is dropped (residuals when --topk is off). Sentences without
// the file name; the caller names it.
struct ResumeCheck {
  std::vector<std::string> refusals;
  std::vector<std::string> notes;
};
ResumeCheck check_resume(const RunRecord& saved, const RunRecord& now);
// An elastic resume (saved.world != now.world) is possible: ddp or diloco, no mesh (per-rank state
// is then redistributed or reset: docs/reliability.md).
bool elastic(const RunRecord& saved, const RunRecord& now);

}  // namespace atl::train
