#include "ddp.h"

#include "atoll/util/fault_point.h"
#include "settings.h"
#include "sharded_optimizer.h"

namespace atl::train {
namespace {
// The embedding's rows are read once, by the optimizer, before the next synchronization: Zen
// leaves them in the pulled blocks (in_place_rows reads them there), and checks its input in its
// push.
sync::SchemeOptions embedding_options(const TrainConfig& cfg) {
  auto options = sync_options(cfg);
  options.row_views = true;
  // One collective less per step (each costs a WAN latency); rows only, so that the element
  // form (--embedding-rows false, for comparison) keeps Zen's element path and its sums' bits.
  options.zen_check_in_push = cfg.embedding_rows;
  return options;
}
}  // namespace

template <class Index>
DataParallel<Index>::DataParallel(comm::Communicator& comm, const TrainConfig& cfg, Engine& engine,
                                  int world_rank, bool reduce_scatter, comm::Communicator* across)
    : engine_(engine),
      world_rank_(world_rank),
      across_(across),
      dense_mode_(dense_mode(cfg, engine, reduce_scatter)),
      E_(cfg.model.d_embed),
      scheme_(sync::make_scheme(cfg.sync, embedding_options(cfg))),
      dense_scheme_(sync::make_scheme(cfg.sync, sync_options(cfg))),
      comparison_(cfg.compare_schemes) {
  scheme_->prepare(comm);  // one-time setup (auto's network probe) before the first timed step
  dense_scheme_->prepare(comm);
}

template <class Index>
typename DataParallel<Index>::DenseMode DataParallel<Index>::dense_mode(const TrainConfig& cfg,
                                                                        const Engine& engine,
                                                                        bool reduce_scatter) {
  if (reduce_scatter && engine.sharded) return DenseMode::sharded;
  if (cfg.backward_overlap && !reduce_scatter && engine.dense_sync->overlaps())
    return DenseMode::overlapped;
  if (engine.dense_sync->topk() || !cfg.compare_schemes.empty()) return DenseMode::after;
  return DenseMode::posted;
}

template <class Index>
int DataParallel<Index>::check_gradients(std::span<const float> embedding_values) {
  // The overlapped sums gathered their units during the backward pass and the mesh's sharded
  // parameters gather their own: the gradients are scanned where they are.
  if (dense_mode_ == DenseMode::sharded || dense_mode_ == DenseMode::overlapped) {
    return first_nonfinite(engine_, embedding_values);
  }
  // Otherwise the dense gradients are checked as they are copied into the buffer the sums use
  // (one pass over them, not two); that copy is needed even when the embedding's is not finite.
  const int dense_bad = engine_.dense_sync->gather();
  if (!all_finite(embedding_values)) return 0;
  return dense_bad < 0 ? -1 : dense_bad + 1;
}

template <class Index>
RowGradient DataParallel<Index>::synchronize(comm::Communicator& comm, StepTimer& timer, int step,
                                             const sparse::SparseGradient<Index>& local,
                                             double loss, double& mean_loss) {
  const int world = comm.size();
  // Ranks reach the synchronization at different times (their compute differs); the barrier
  // makes that wait visible (wait_s) instead of hiding it in the first collective of a scheme.
  timer.start("check");
  const int bad = check_gradients(local.values);
  timer.start("wait");
  // The loss is agreed here too: one collective instead of two (each is round trips on a WAN).
  const StepAgreement agreed = agree_step(comm, engine_, bad, world_rank_, loss);
  nonfinite_ = agreed.nonfinite;
  mean_loss = agreed.loss_sum / world;
  if (nonfinite_) {  // every rank skips (or fails) together; nothing more is sent
    if (dense_mode_ == DenseMode::overlapped) engine_.dense_sync->discard(comm);
    result_ = {};
    return {};
  }
  // The dense sums travel during the embedding's sync (neither reads the other's buffers).
  if (dense_mode_ == DenseMode::posted) engine_.dense_sync->post_gathered(comm);
  // Benchmark mode: compared schemes before and after the training scheme (rotating); their
  // time is left out of the step.
  timer.start("compare");
  const std::size_t before = comparison_.run_before(step);
  for (std::size_t c = 0; c < before; ++c) comparison_.run(comm, c, local, E_);
  if (before > 0) comm.barrier();
  timer.start("embedding_sync");
  scheme_->synchronize(comm, local, result_);
  timer.start("rows");
  RowGradient rows = in_place_rows(result_, E_, 1.0 / world);  // read from result_ in place
  timer.start("compare");
  for (std::size_t c = before; c < comparison_.size(); ++c) comparison_.run(comm, c, local, E_);
  comparison_.check_rows(rows, E_);
  timer.start("dense_sync");
  util::fault_point("dense_sync");  // --inject-fault kill/stop
  switch (dense_mode_) {
    case DenseMode::sharded:
      engine_.sharded->reduce_scatter_grads(1.0 / world, across_);
      break;
    case DenseMode::overlapped:
      engine_.dense_sync->finish(comm, timeline_, step);
      break;
    case DenseMode::posted:
      engine_.dense_sync->finish_gathered(comm);
      break;
    case DenseMode::after:
      engine_.dense_sync->run_gathered(comm, *dense_scheme_);  // gathered by check_gradients
      break;
  }
  return rows;
}

template class DataParallel<std::uint32_t>;
template class DataParallel<std::uint64_t>;

}  // namespace atl::train
