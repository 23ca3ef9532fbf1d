// zen_coo: Zen's hash-balanced push with a COO pull (global index + value per non-zero), the
// "balanced parallelism" design point without the hash bitmap. Shares zen.cpp's implementation.
// Cost: push as Zen; pull receives γ_n·d·M·8 · (n-1)/n bytes per rank.
#include "schemes.h"
#include "zen.h"

namespace atl::sync {

std::unique_ptr<SyncScheme> make_zen_coo(const SchemeOptions& o) {
  return make_zen_variant(o, "zen_coo", PullCoding::coo);
}

}  // namespace atl::sync
