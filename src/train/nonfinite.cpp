#include "nonfinite.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

namespace atl::train {

int first_nonfinite(const Engine& engine, std::span<const float> embedding_values) {
  if (!all_finite(embedding_values)) return 0;
  for (std::size_t i = 0; i < engine.dense.size(); ++i) {
    const auto& g = engine.dense[i].grad();
    if (!g.defined()) continue;
    const auto c = g.contiguous();
    if (!all_finite({c.data_ptr<float>(), static_cast<std::size_t>(c.numel())})) {
      return static_cast<int>(i) + 1;
    }
  }
  return -1;
}

std::string gradient_name(const Engine& engine, int index) {
  if (index == 0) return "tok.weight";
  return engine.dense_names.at(static_cast<std::size_t>(index - 1));
}

StepAgreement agree_step(comm::Communicator& comm, const Engine& engine, int local, int rank,
                         double loss) {
  // One code per (rank, tensor), ordered by rank: the minimum names the lowest rank.
  struct Report {
    std::int64_t code;
    double loss;
  };
  const auto tensors = static_cast<std::int64_t>(engine.dense.size()) + 1;
  const std::int64_t none = std::numeric_limits<std::int64_t>::max();
  const Report mine{local < 0 ? none : std::int64_t{rank} * tensors + local, loss};
  std::int64_t first = none;
  StepAgreement agreed;
  for (const Report& r : comm.allgather_direct(mine)) {
    first = std::min(first, r.code);
    agreed.loss_sum += r.loss;
  }
  if (first != none) {
    agreed.nonfinite = NonFinite{static_cast<int>(first / tensors),
                                 gradient_name(engine, static_cast<int>(first % tensors))};
  }
  return agreed;
}

void poison_gradient(Engine& engine) {
  for (auto& p : engine.dense) {
    auto g = p.mutable_grad();
    if (!g.defined() || g.numel() == 0) continue;
    torch::NoGradGuard no_grad;
    g.view(-1)[0] = std::numeric_limits<float>::quiet_NaN();
    return;
  }
}

std::string describe_nonfinite(const NonFinite& bad, int step, bool fail) {
  return fmt::format("step {}: rank {}'s gradient of {} holds a NaN or an infinity{}", step,
                     bad.rank, bad.tensor,
                     fail ? " (--nonfinite fail: the run stops)"
                          : ": the optimizer step is skipped (--nonfinite skip)");
}

}  // namespace atl::train
