// median_phase_stats (scheme.h): the per-phase breakdown bench sync reports with a median time.
#include <gtest/gtest.h>

#include <vector>

#include "atoll/sync/scheme.h"

namespace {
using atl::sync::PhaseStats;

TEST(MedianPhaseStats, EachPhaseOnItsOwnAbsentCountsAsZero) {
  const std::vector<std::vector<PhaseStats>> calls = {
      {{"a", 1.0, 10, 1}, {"b", 2.0, 20, 2}},
      {{"a", 3.0, 30, 3}},
      {{"a", 2.0, 5, 5}, {"c", 5.0, 50, 7}, {"a", 1.0, 5, 5}},  // a twice: adds up to 3.0
  };
  const auto m = atl::sync::median_phase_stats(calls);
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[0].name, "a");  // in the order names first appear
  EXPECT_EQ(m[1].name, "b");
  EXPECT_EQ(m[2].name, "c");
  EXPECT_DOUBLE_EQ(m[0].time_s, 3.0);  // {1, 3, 3}
  EXPECT_EQ(m[0].bytes_sent, 10u);     // {10, 30, 10}
  EXPECT_EQ(m[0].bytes_received, 3u);  // {1, 3, 10}
  EXPECT_DOUBLE_EQ(m[1].time_s, 0.0);  // {2, 0, 0}: run by one call of three
  EXPECT_EQ(m[1].bytes_sent, 0u);
  EXPECT_DOUBLE_EQ(m[2].time_s, 0.0);
}

TEST(MedianPhaseStats, EvenCountsAverageTheMiddleTwoAndNoCallsGiveNothing) {
  const auto m = atl::sync::median_phase_stats({{{"push", 1.0, 4, 4}}, {{"push", 2.0, 8, 8}}});
  ASSERT_EQ(m.size(), 1u);
  EXPECT_DOUBLE_EQ(m[0].time_s, 1.5);
  EXPECT_EQ(m[0].bytes_sent, 6u);
  EXPECT_TRUE(atl::sync::median_phase_stats({}).empty());
}

}  // namespace
