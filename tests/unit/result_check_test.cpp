// count_mismatches (include/atoll/sync/result_check.h), the check behind `bench sync --verify`:
// against a count made on the dense form, for dense and sparse results, blocks of several values
// (also left in views), index 0 and M - 1, empty results, indices outside [0, M), out of order or
// held twice, and NaN.
#include "atoll/sync/result_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace {

using atl::sync::count_mismatches;
using atl::sync::SyncResult;

// The count on the dense form, as --verify made it before: the expected answer.
template <class Index>
std::uint64_t dense_count(const SyncResult<Index>& r, const std::vector<float>& ref,
                          const std::vector<float>& mag, float slack) {
  std::vector<float> got(r.sparse.elements, 0.0f);  // (SyncResult::to_dense is in the MPI library)
  for (std::size_t k = 0; k < r.sparse.indices.size(); ++k)
    for (std::uint32_t e = 0; e < r.sparse.width; ++e)
      got[r.sparse.indices[k] * r.sparse.width + e] = r.sparse.values[k * r.sparse.width + e];
  std::uint64_t bad = 0;
  for (std::size_t i = 0; i < got.size(); ++i)
    bad += std::fabs(got[i] - ref[i]) > slack * mag[i] || std::isnan(got[i]);
  return bad;
}

SyncResult<std::uint32_t> sparse_result(std::uint64_t m, std::uint32_t width,
                                        std::vector<std::uint32_t> idx, std::vector<float> val) {
  SyncResult<std::uint32_t> r;
  r.sparse.elements = m;
  r.sparse.width = width;
  r.sparse.indices = std::move(idx);
  r.sparse.values = std::move(val);
  return r;
}

TEST(ResultCheck, AgreesWithTheDenseCountOnRandomResults) {
  std::mt19937_64 rng(7);
  for (std::uint32_t width : {1u, 3u}) {
    for (int trial = 0; trial < 200; ++trial) {
      const std::uint64_t blocks = 1 + rng() % 40, m = blocks * width;
      std::vector<float> ref(m, 0.0f), mag(m, 1.0f);
      std::vector<std::uint32_t> idx;
      std::vector<float> val;
      for (std::uint64_t b = 0; b < blocks; ++b) {
        if (rng() % 3 == 0) continue;
        idx.push_back(static_cast<std::uint32_t>(b));
        for (std::uint32_t e = 0; e < width; ++e) {
          const float v = static_cast<float>(static_cast<int>(rng() % 7) - 3);
          val.push_back(v);
          ref[b * width + e] += v;
        }
      }
      for (auto& x : ref)  // a few wrong or missing elements
        if (rng() % 10 == 0) x += 1.0f;
      const auto r = sparse_result(m, width, idx, val);
      EXPECT_EQ(count_mismatches(r, ref, mag, 0.0f).count, dense_count(r, ref, mag, 0.0f))
          << "width " << width << " trial " << trial;
    }
  }
}

TEST(ResultCheck, FirstMismatchAtTheEnds) {
  const std::vector<float> mag(5, 1.0f);
  // The result misses index 0 and carries a wrong value at M - 1.
  auto r = sparse_result(5, 1, {2, 4}, {1.0f, 9.0f});
  const auto m = count_mismatches(r, {3.0f, 0.0f, 1.0f, 0.0f, 5.0f}, mag, 0.0f);
  EXPECT_EQ(m.count, 2u);
  EXPECT_EQ(m.first, 0u);
  EXPECT_EQ(m.got, 0.0f);
  EXPECT_EQ(m.expected, 3.0f);
  // An empty result of an all-zero sum, and of a sum with a value at M - 1.
  const auto empty = sparse_result(5, 1, {}, {});
  EXPECT_EQ(count_mismatches(empty, std::vector<float>(5, 0.0f), mag, 0.0f).count, 0u);
  const auto last = count_mismatches(empty, {0, 0, 0, 0, 2.0f}, mag, 0.0f);
  EXPECT_EQ(last.count, 1u);
  EXPECT_EQ(last.first, 4u);
}

TEST(ResultCheck, ToleranceNanAndOutOfRange) {
  const std::vector<float> ref{1.0f, 2.0f, 0.0f}, mag{1.0f, 1.0f, 1.0f};
  EXPECT_EQ(count_mismatches(sparse_result(3, 1, {0, 1}, {1.05f, 2.0f}), ref, mag, 0.1f).count, 0u);
  EXPECT_EQ(count_mismatches(sparse_result(3, 1, {0, 1}, {1.2f, 2.0f}), ref, mag, 0.1f).count, 1u);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(count_mismatches(sparse_result(3, 1, {0, 1}, {nan, 2.0f}), ref, mag, 0.1f).count, 1u);
  const auto out = count_mismatches(sparse_result(3, 1, {0, 1, 3}, {1, 2, 5}), ref, mag, 0.0f);
  EXPECT_EQ(out.count, 1u);
  EXPECT_EQ(out.first, 3u);
  EXPECT_TRUE(std::isnan(out.expected));
}

TEST(ResultCheck, MalformedResultsAreWrongWithoutBeingRead) {
  const std::vector<float> ref{1.0f, 2.0f, 0.0f}, mag{1.0f, 1.0f, 1.0f};
  // Fewer values than indices, and the right entries under another M.
  EXPECT_EQ(count_mismatches(sparse_result(3, 1, {0, 1}, {1.0f}), ref, mag, 0.0f).count, 1u);
  EXPECT_EQ(count_mismatches(sparse_result(4, 1, {0, 1}, {1.0f, 2.0f}), ref, mag, 0.0f).count, 1u);
  auto views = sparse_result(3, 1, {0, 1}, {});
  const float one = 1.0f;
  views.views = {&one};  // one view for two blocks
  EXPECT_EQ(count_mismatches(views, ref, mag, 0.0f).count, 1u);
}

TEST(ResultCheck, UnsortedOrDuplicateIndicesAreWrong) {
  const std::vector<float> ref{1.0f, 2.0f, 0.0f}, mag{1.0f, 1.0f, 1.0f};
  // The right values, in the wrong order: the later index is refused, then missing.
  const auto swapped = count_mismatches(sparse_result(3, 1, {1, 0}, {2.0f, 1.0f}), ref, mag, 0.0f);
  EXPECT_EQ(swapped.count, 2u);
  EXPECT_EQ(swapped.first, 0u);
  // Index 1 held twice, as two halves of its sum.
  const auto twice =
      count_mismatches(sparse_result(3, 1, {0, 1, 1}, {1.0f, 1.0f, 1.0f}), ref, mag, 0.0f);
  EXPECT_EQ(twice.count, 2u);
  EXPECT_EQ(twice.first, 1u);
}

TEST(ResultCheck, DenseAndViews) {
  const std::vector<float> ref{1, 0, 2, 0, 0, 3}, mag(6, 1.0f);
  SyncResult<std::uint32_t> dense;
  dense.dense_form = true;
  dense.dense = ref;
  EXPECT_EQ(count_mismatches(dense, ref, mag, 0.0f).count, 0u);
  dense.dense[5] = 4;
  EXPECT_EQ(count_mismatches(dense, ref, mag, 0.0f).first, 5u);
  dense.dense.pop_back();  // shorter than M: its last element is missing
  EXPECT_EQ(count_mismatches(dense, ref, mag, 0.0f).count, 1u);
  // Blocks of 2 left in views: blocks 0 and 2 (elements 0-1 and 4-5) and block 1's 2 missing.
  const std::vector<float> a{1, 0}, c{0, 3};
  auto views = sparse_result(6, 2, {0, 2}, {});
  views.views = {a.data(), c.data()};
  const auto m = count_mismatches(views, ref, mag, 0.0f);
  EXPECT_EQ(m.count, 1u);
  EXPECT_EQ(m.first, 2u);
}

}  // namespace
