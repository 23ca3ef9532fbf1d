#include "atoll/sync/result_check.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace atl::sync {
namespace {

struct Checker {
  const std::vector<float>& reference;
  const std::vector<float>& magnitude;
  float slack;
  Mismatches m;

  void check(std::uint64_t i, float got) {
    if (std::fabs(got - reference[i]) > slack * magnitude[i] || std::isnan(got))
      note(i, got, reference[i]);
  }
  void note(std::uint64_t i, float got, float expected) {
    if (m.count++ == 0) m.first = i, m.got = got, m.expected = expected;
  }
};

}  // namespace

template <class Index>
Mismatches count_mismatches(const SyncResult<Index>& result, const std::vector<float>& reference,
                            const std::vector<float>& magnitude, float slack) {
  Checker c{reference, magnitude, slack, {}};
  const std::uint64_t m = reference.size();
  constexpr float none = std::numeric_limits<float>::quiet_NaN();
  if (result.dense_form) {
    for (std::uint64_t i = 0; i < std::min<std::uint64_t>(m, result.dense.size()); ++i)
      c.check(i, result.dense[i]);
    for (std::uint64_t i = result.dense.size(); i < m; ++i) c.note(i, none, reference[i]);
    for (std::uint64_t i = m; i < result.dense.size(); ++i) c.note(i, result.dense[i], none);
    return c.m;
  }
  const auto& idx = result.sparse.indices;
  const std::uint64_t w = std::max<std::uint64_t>(result.sparse.width, 1), blocks = m / w;
  const bool values_fit = result.in_views() ? result.views.size() == idx.size()
                                            : result.sparse.values.size() == idx.size() * w;
  if (result.sparse.elements != m || !values_fit) {  // malformed: reading it could run off its end
    c.note(0, none, m ? reference[0] : none);
    return c.m;
  }
  std::uint64_t next = 0;  // the first element not yet checked
  for (std::size_t k = 0; k < idx.size(); ++k) {
    const std::uint64_t block = idx[k];
    const float* v = result.block(k);
    // A block out of order, held twice or outside [0, M) is wrong whatever its values: results,
    // like gradients, hold sorted unique indices.
    if (block >= blocks || (k > 0 && block <= idx[k - 1])) {
      c.note(block * w, v[0], block < blocks ? reference[block * w] : none);
      continue;
    }
    for (; next < block * w; ++next) c.check(next, 0.0f);
    for (std::uint64_t e = 0; e < w; ++e, ++next) c.check(next, v[e]);
  }
  for (; next < m; ++next) c.check(next, 0.0f);
  return c.m;
}

template Mismatches count_mismatches(const SyncResult<std::uint32_t>&, const std::vector<float>&,
                                     const std::vector<float>&, float);
template Mismatches count_mismatches(const SyncResult<std::uint64_t>&, const std::vector<float>&,
                                     const std::vector<float>&, float);

}  // namespace atl::sync
