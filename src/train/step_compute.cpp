// A training step's own work (step_compute.h).
#include "step_compute.h"

#include <fmt/format.h>

#include <string>

#include "agreed.h"
#include "model.h"
#include "settings.h"
#include "sharded_optimizer.h"

namespace atl::train {

using comm::Communicator;
using comm::ReduceOp;

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

void on_nonfinite(const TrainConfig& cfg, const NonFinite& bad, int step, bool agreed,
                  bool reporter) {
  const bool fail = cfg.nonfinite == "fail";
  const std::string message = describe_nonfinite(bad, step, fail);
  if (fail) throw NonFiniteGradientError(message, agreed);
  if (reporter) fmt::print(stderr, "atoll train: {}\n", message);
}

template RowGradient worker_gradient(Mesh&, std::optional<DataParallel<std::uint32_t>>&,
                                     const Engine&, int, StepTimer&, int,
                                     sparse::SparseGradient<std::uint32_t>, double, double&,
                                     std::optional<NonFinite>&);
template RowGradient worker_gradient(Mesh&, std::optional<DataParallel<std::uint64_t>>&,
                                     const Engine&, int, StepTimer&, int,
                                     sparse::SparseGradient<std::uint64_t>, double, double&,
                                     std::optional<NonFinite>&);

}  // namespace atl::train
