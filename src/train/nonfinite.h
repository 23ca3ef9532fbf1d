// Non-finite gradients (--nonfinite skip|fail): a NaN or an infinity in a rank's gradient found
// before it reaches any synchronization. Data-parallel steps agree on it in the one small
// allgather that also serves as the step's barrier (every rank learns, in the same step, the
// lowest rank with a non-finite gradient and its first such tensor); local SGD's inner steps check
// their own worker's gradient with no collective. Private to src/train.
#pragma once

#include <optional>
#include <span>
#include <string>

#include "atoll/comm/communicator.h"
#include "engine.h"
#include "finite_values.h"

namespace atl::train {

struct NonFinite {
  int rank = -1;
  std::string tensor;  // the parameter's name ("tok.weight" for the embedding)
};

// This rank's first gradient holding a NaN or an infinity: −1 none, 0 the embedding's (its
// sparse values `embedding_values`), 1 + i engine.dense[i]'s.
int first_nonfinite(const Engine& engine, std::span<const float> embedding_values);
// The name of tensor `index` of first_nonfinite.
std::string gradient_name(const Engine& engine, int index);

// What a data-parallel step's ranks agree on before they synchronize, in one exchange (16 bytes
// from every rank to every rank): every rank's first_nonfinite (nullopt when all gradients are
// finite) and the sum of the ranks' losses, added in rank order, so the same on every rank.
// Across a WAN each collective costs its round trips, so the step sends one, not two.
struct StepAgreement {
  std::optional<NonFinite> nonfinite;
  double loss_sum = 0;
};
// `local` is this rank's first_nonfinite, `rank` its name in messages (its world rank).
StepAgreement agree_step(comm::Communicator& comm, const Engine& engine, int local, int rank,
                         double loss);

// --inject-fault nan:RANK:STEP: the first element of the first dense parameter's gradient is
// made NaN (after the backward pass).
void poison_gradient(Engine& engine);

// The message of a skipped or failed step.
std::string describe_nonfinite(const NonFinite& bad, int step, bool fail);

}  // namespace atl::train
