// Dense gradients of all parameters but the embedding: flattened into one buffer (FlatParams),
// summed by bucketed allreduce, or top-k compressed with error feedback (TopkFeedback) and summed
// by a sparse scheme; then averaged and written back as the parameters' gradients. With the model's
// units known (set_units), the dense sums overlap the backward pass as PyTorch's DDP does: a unit's
// gradients are posted (non-blocking allreduce) as soon as its backward ends, and waited for only
// before the optimizer step. Private to src/train.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <optional>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/sync/scheme.h"
#include "flat_params.h"
#include "timeline.h"
#include "topk_feedback.h"

namespace atl::train {

class DenseSync {
 public:
  // topk_share 0: dense bucketed allreduce; > 0: top-k + error feedback through `scheme`.
  DenseSync(std::vector<torch::Tensor> params, std::uint64_t bucket_bytes, double topk_share);
  std::size_t elements() const { return flat_params_.elements(); }
  TopkFeedback* topk() { return topk_ ? &*topk_ : nullptr; }

  // Collective: every parameter's gradient becomes the mean over the ranks of `comm`.
  void run(comm::Communicator& comm, sync::SyncScheme& scheme) {
    gather();
    run_gathered(comm, scheme);
  }
  // run() in two parts, so that the gradients are checked in the pass that copies them: gather()
  // copies them into the flat buffer and returns the list index of the first parameter whose
  // gradient holds a NaN or an infinity (−1: all finite); run_gathered() sums that buffer.
  int gather();
  void run_gathered(comm::Communicator& comm, sync::SyncScheme& scheme);
  // run_gathered() of the dense allreduce in two halves, so that the sums travel while the caller
  // does other work (the embedding's sync): post_gathered() posts the whole gathered buffer
  // (non-blocking allreduce, pieces of at most the bucket size), finish_gathered() waits for it
  // and writes the means. Collective; not with top-k nor with units posted (std::logic_error).
  void post_gathered(comm::Communicator& comm);
  void finish_gathered(comm::Communicator& comm);

  // The model unit of each parameter (in the list's order); a unit's parameters must be
  // consecutive in the list (std::invalid_argument otherwise). Enables post_unit/finish.
  void set_units(const std::vector<int>& unit_of_param);
  // True when the sums can overlap the backward pass: units set and no top-k.
  bool overlaps() const { return !unit_ranges_.empty() && !topk_; }
  // Collective over `comm`, called by every rank for the same units in the same order: posts the
  // sum of `unit`'s gradients (non-blocking allreduce, pieces of at most the bucket size) once its
  // backward has ended, after moving the sums posted before to their next stage
  // (Communicator::advance_stages). A unit without dense parameters, or posted already this step,
  // posts nothing.
  void post_unit(comm::Communicator& comm, int unit);
  // Collective: posts the units not posted yet (last unit first), waits for every posted sum and
  // writes the mean over the ranks as each parameter's gradient (as run() does). `timeline`, if
  // given, gets one sync event per unit: posted, began to wait, done.
  void finish(comm::Communicator& comm, Timeline* timeline, int step);
  // Collective: completes what post_unit posted without using it (a skipped step).
  void discard(comm::Communicator& comm);

 private:
  struct Posted {
    int unit;
    double at;  // engine clock when posted
    std::vector<comm::Request> requests;
  };
  // Posts flat_[begin, end) (non-blocking allreduce, pieces of at most the bucket size) as
  // `unit`'s sum (−1: the whole buffer, post_gathered).
  void post_range(comm::Communicator& comm, int unit, std::size_t begin, std::size_t end);
  // Waits for every posted sum (a timeline event per sum when `timeline` is given) and writes the
  // means as the parameters' gradients.
  void wait_posted(comm::Communicator& comm, Timeline* timeline, int step);

  FlatParams flat_params_;
  std::size_t bucket_elements_;
  std::optional<TopkFeedback> topk_;
  std::vector<float> flat_;
  sync::SyncResult<std::uint32_t> result_;
  std::vector<std::pair<std::size_t, std::size_t>> unit_ranges_;  // [begin, end) per unit
  std::vector<Posted> posted_;
};

}  // namespace atl::train
