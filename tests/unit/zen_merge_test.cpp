// zen_merge_sum (src/sync/zen_merge.h): the grouped push's per-server sum of G sorted blocks,
// against a dense reference, for every run count from 0 to 9 (odd ones carried across rounds),
// empty runs, index 0 and the largest index, and values that cancel.
#include "sync/zen_merge.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <span>
#include <vector>

namespace {

using atl::sparse::Entry;

template <class Index>
void expect_merged(const std::vector<std::vector<Entry<Index>>>& runs, const std::string& label) {
  std::map<Index, float> ref;
  for (const auto& r : runs)
    for (const auto& e : r) ref[e.index] += e.value;
  std::vector<std::span<const Entry<Index>>> spans(runs.begin(), runs.end());
  std::vector<Entry<Index>> out{Entry<Index>{7, 1.0f}}, tmp;  // appended after what is there
  atl::sync::zen_merge_sum<Index>(spans, out, tmp);
  ASSERT_EQ(out.size(), ref.size() + 1) << label;
  EXPECT_EQ(out[0].index, Index{7}) << label;
  std::size_t k = 1;
  for (const auto& [index, value] : ref) {
    EXPECT_EQ(out[k].index, index) << label << " entry " << k;
    EXPECT_EQ(out[k].value, value) << label << " index " << index;
    ++k;
  }
}

template <class Index>
std::vector<Entry<Index>> random_run(std::mt19937_64& rng, Index universe, double density) {
  std::vector<Entry<Index>> run;
  std::bernoulli_distribution take(density);
  std::uniform_int_distribution<int> value(-3, 3);  // integers: sums exact in any order
  for (Index i = 0; i < universe; ++i)
    if (take(rng)) run.push_back(Entry<Index>{i, static_cast<float>(value(rng))});
  return run;
}

TEST(ZenMergeSum, EveryRunCountAgainstAReference) {
  std::mt19937_64 rng(5);
  for (std::size_t count = 0; count <= 9; ++count) {
    for (double density : {0.0, 0.05, 0.5, 1.0}) {
      std::vector<std::vector<Entry<std::uint32_t>>> runs;
      for (std::size_t k = 0; k < count; ++k)
        runs.push_back(random_run<std::uint32_t>(rng, 300, k % 3 == 1 ? 0.0 : density));
      expect_merged<std::uint32_t>(
          runs, "runs " + std::to_string(count) + " d " + std::to_string(density));
    }
  }
}

TEST(ZenMergeSum, FirstAndLastIndexAndCancellation) {
  const std::uint64_t last = (std::uint64_t{1} << 40) - 1;
  std::vector<std::vector<Entry<std::uint64_t>>> runs{{{0, 1.0f}, {5, 2.0f}, {last, 1.0f}},
                                                      {{0, -1.0f}, {last, 3.0f}},
                                                      {},
                                                      {{5, -2.0f}, {6, 1.0f}},
                                                      {{last, -4.0f}}};
  // Cancelling sums stay as explicit zeros (the server's aggregation drops them).
  expect_merged<std::uint64_t>(runs, "edges");
}

}  // namespace
