// Messages from peers that do not fit: every decoder refuses them with MalformedMessage naming
// the sender, before anything is written out of bounds (issue 17, item 3; fuzz/ explores the rest).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "atoll/sync/zen_partition.h"
#include "sync/omnireduce_blocks.h"
#include "sync/received_entries.h"
#include "sync/sparcml_message.h"

namespace {
using namespace atl::sync;
using E32 = atl::sparse::Entry<std::uint32_t>;

// Runs `f`, expects MalformedMessage whose message contains every one of `parts`.
template <class F>
void expect_refused(F f, std::initializer_list<std::string> parts) {
  try {
    f();
    FAIL() << "accepted; expected a refusal mentioning " << *parts.begin();
  } catch (const MalformedMessage& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

// The first index >= from that `server` owns (or does not own, with owned = false).
std::uint32_t index_owned(const HashLayout& layout, std::uint32_t server, bool owned,
                          std::uint32_t from = 0) {
  for (std::uint32_t x = from;; ++x)
    if ((layout.owner_table()[x / kZenGranule] == server) == owned) return x;
}

TEST(ReceivedMessages, ZenGroupsRefusesForeignAndOutOfRangeIndices) {
  const HashLayout layout(4096, 3, 7);
  const std::uint32_t mine = index_owned(layout, 1, true), theirs = index_owned(layout, 1, false);
  std::vector<E32> ok{{mine, 1.0f}, {mine, 2.0f}};
  std::vector<std::size_t> counts{1, 1, 0};
  EXPECT_NO_THROW(zen_check_push<std::uint32_t>(layout, 1, ok, counts));
  std::vector<E32> foreign{{mine, 1.0f}, {theirs, 2.0f}};
  expect_refused([&] { zen_check_push<std::uint32_t>(layout, 1, foreign, counts); },
                 {"zen push", "from rank 1", std::to_string(theirs)});
  std::vector<E32> past_m{{4096, 1.0f}, {mine, 2.0f}};
  expect_refused([&] { zen_check_push<std::uint32_t>(layout, 1, past_m, counts); },
                 {"from rank 0", "4096"});
  std::vector<std::size_t> too_many{1, 1, 1};
  expect_refused([&] { zen_check_push<std::uint32_t>(layout, 1, ok, too_many); },
                 {"announced more"});
  // Each sender's block in increasing index order (the aggregation searches it); a new sender's
  // block starts low again.
  const std::uint32_t next = index_owned(layout, 1, true, mine + 1);
  std::vector<E32> ordered{{mine, 1.0f}, {next, 2.0f}, {mine, 3.0f}};
  EXPECT_NO_THROW(
      zen_check_push<std::uint32_t>(layout, 1, ordered, std::vector<std::size_t>{2, 1, 0}));
  std::vector<E32> backwards{{mine, 1.0f}, {next, 2.0f}, {mine, 3.0f}};
  expect_refused(
      [&] {
        zen_check_push<std::uint32_t>(layout, 1, backwards, std::vector<std::size_t>{0, 3, 0});
      },
      {"from rank 1", "not above the previous"});
  std::vector<E32> twice{{mine, 1.0f}, {mine, 2.0f}};
  expect_refused(
      [&] {
        zen_check_push<std::uint32_t>(layout, 1, twice, std::vector<std::size_t>{2, 0, 0});
      },
      {"from rank 0", "not above the previous"});
}

// The aggregation with the senders' counts checks the push as it adds it, range by range of the
// slots and task by task: it must refuse exactly what zen_check_push refuses, naming the sender,
// wherever the fault lies (first or last entry of a block, inside a range, across the boundary of
// two ranges or two tasks), for any number of tasks.
TEST(ReceivedMessages, ZenAggregateRefusesWhatTheCheckRefuses) {
  const std::uint64_t M = 1000003;  // 3 servers: ≈ 333,000 slots each, 6 ranges of 65,536
  const std::uint32_t n = 3, server = 1;
  const HashLayout layout(M, n, 5);
  const auto buckets = zen_granule_bounds(M, zen_pull_buckets(M));
  // Sender j sends every index of the server's congruent to j mod 3 (a dense push: the sums are
  // built in ranges), in increasing order.
  std::vector<E32> valid;
  std::vector<std::size_t> counts(n, 0);
  for (std::uint32_t j = 0; j < n; ++j)
    for (std::uint32_t x = j; x < M; x += 3)
      if (layout.owner_table()[x / kZenGranule] == server) {
        valid.push_back({x, 1.0f + static_cast<float>(j)});
        ++counts[j];
      }
  const std::uint32_t foreign = index_owned(layout, server, false);
  const std::size_t first = counts[0], last = counts[0] + counts[1] - 1;  // sender 1's block
  // Sender 1's last entry before slot `slot` (the start of a range or of a task's words).
  const auto before_slot = [&](std::size_t slot) {
    std::size_t k = first;
    while (layout.slot(valid[k + 1].index) < slot) ++k;
    return k;
  };
  struct Fault {
    std::string what;
    std::size_t at;
    std::uint32_t sender;
    std::function<void(std::vector<E32>&, std::size_t)> apply;
  };
  const auto foreign_at = [&](auto& v, std::size_t k) { v[k].index = foreign; };
  const auto swap_next = [](auto& v, std::size_t k) { std::swap(v[k], v[k + 1]); };
  const auto repeat = [](auto& v, std::size_t k) { v[k + 1].index = v[k].index; };
  const std::size_t straddle = before_slot(1024 * kZenGranule);  // across the first two ranges
  std::vector<Fault> faults{
      {"foreign index", 0, 0, foreign_at},  // the first entry of the first block
      {"foreign index", first, 1, foreign_at},
      {"foreign index", last, 1, foreign_at},
      {"foreign index", valid.size() - 1, 2, foreign_at},  // the last entry of the last block
      {"index past M", last, 1, [&](auto& v, std::size_t k) { v[k].index = M; }},
      {"index past M", first + 1000, 1, [&](auto& v, std::size_t k) { v[k].index = M + 64; }},
      {"swap", first, 1, swap_next},
      {"swap", straddle, 1, swap_next},
      {"swap", last - 1, 1, swap_next},
      {"swap", valid.size() - 2, 2, swap_next},
      {"repeat", straddle, 1, repeat},
      {"repeat", last - 1, 1, repeat},
      {"first moved last", first, 1, [&](auto& v, std::size_t k) {
         std::rotate(v.begin() + static_cast<long>(k), v.begin() + static_cast<long>(k) + 1,
                     v.begin() + static_cast<long>(last) + 1);
       }}};
  // Tasks run on threads too, as zen's worker threads run them.
  const ParallelTasks on_threads = [](std::size_t tasks,
                                      const std::function<void(std::size_t)>& task) {
    std::vector<std::thread> threads;
    for (std::size_t t = 0; t < tasks; ++t) threads.emplace_back(task, t);
    for (auto& t : threads) t.join();
  };
  const std::size_t words = layout.slot_count(server) / kZenGranule;
  for (const unsigned parts : {1u, 2u, 3u, 7u})
    for (const bool threaded : {false, true}) {
      const ParallelTasks parallel = threaded ? on_threads : ParallelTasks{};
      ZenServerSums<std::uint32_t> sums;
      auto copy = valid;
      EXPECT_NO_THROW(zen_aggregate(layout, server, copy, buckets, sums,
                                    std::span<const std::size_t>(counts), parts, parallel));
      ASSERT_FALSE(sums.sparse);
      auto all = faults;  // and across each boundary between two tasks
      for (unsigned t = 1; t < parts; ++t) {
        const std::size_t k = before_slot(words * t / parts * kZenGranule);
        all.push_back({"swap at a task boundary", k, 1, swap_next});
        all.push_back({"repeat at a task boundary", k, 1, repeat});
      }
      for (const auto& fault : all) {
        SCOPED_TRACE(::testing::Message() << fault.what << " at entry " << fault.at << ", " << parts
                                          << " tasks" << (threaded ? " on threads" : ""));
        auto bad = valid;
        fault.apply(bad, fault.at);
        const std::string sender = "from rank " + std::to_string(fault.sender);
        expect_refused([&] { zen_check_push<std::uint32_t>(layout, server, bad, counts); },
                       {"zen push", sender});
        expect_refused(
            [&] {
              zen_aggregate(layout, server, bad, buckets, sums,
                            std::span<const std::size_t>(counts), parts, parallel);
            },
            {"zen push", sender});
      }
    }
  // Counts whose sum wraps around (a caller's error, refused before any entry is read).
  std::vector<std::size_t> wrapping{~std::size_t{0}, valid.size() + 1, 0};
  ZenServerSums<std::uint32_t> sums;
  EXPECT_THROW(
      zen_aggregate(layout, server, valid, buckets, sums, std::span<const std::size_t>(wrapping)),
      std::invalid_argument);
}

TEST(ReceivedMessages, ZenPullRefusesCountsPastTheBuffer) {
  const HashLayout layout(1000, 2, 3);
  std::vector<E32> none;
  const auto b0 = zen_encode_pull_block<std::uint32_t>(layout, 0, none, PullCoding::bitmap_or_coo);
  const auto b1 = zen_encode_pull_block<std::uint32_t>(layout, 1, none, PullCoding::bitmap_or_coo);
  std::vector<std::uint8_t> blocks(b0);
  blocks.insert(blocks.end(), b1.begin(), b1.end());
  atl::sparse::SparseGradient<std::uint32_t> out;
  std::vector<std::size_t> counts{b0.size(), b1.size()};
  ASSERT_NO_THROW(zen_decode_pull<std::uint32_t>(layout, blocks, counts, out));
  EXPECT_EQ(out.nnz(), 0u);
  // A count that wraps `offset + count` around (the check used to add them).
  std::vector<std::size_t> wrapping{b0.size(), ~std::size_t{0} - 2};
  expect_refused([&] { zen_decode_pull<std::uint32_t>(layout, blocks, wrapping, out); },
                 {"server 1", "too short"});
}

// An Elias-Fano pull block (of the non-zero slots, or of the empty ones) with any one bit of its
// index code flipped is refused with the sender named, or decodes to another valid set of the same
// size (a flipped low bit can do that); never out of its server's slots, never unsorted.
TEST(ReceivedMessages, ZenPullRefusesACorruptEliasFanoBlock) {
  const HashLayout layout(5000, 2, 3);
  std::vector<E32> to0;
  for (std::uint32_t x = 0; x < 5000; x += 7)
    if (atl::sync::zen_owner(x, 2, 3) == 0) to0.push_back({x, 1.0f});
  std::vector<E32> none;
  for (const auto coding : {PullCoding::elias_fano, PullCoding::elias_fano_complement}) {
    SCOPED_TRACE(::testing::Message() << "coding " << static_cast<int>(coding));
    auto b0 = zen_encode_pull_block<std::uint32_t>(layout, 0, to0, coding);
    const auto b1 = zen_encode_pull_block<std::uint32_t>(layout, 1, none, coding);
    ASSERT_EQ(b0[0], coding == PullCoding::elias_fano ? 2 : 3) << "format byte";
    const std::size_t header = 9, code = b0.size() - header - to0.size() * sizeof(float);
    ASSERT_GT(code, 0u);
    std::size_t refused = 0;
    for (std::size_t bit = 0; bit < code * 8; ++bit) {
      auto bad = b0;
      bad[header + bit / 8] ^= static_cast<std::uint8_t>(1u << (bit % 8));
      std::vector<std::uint8_t> blocks(bad);
      blocks.insert(blocks.end(), b1.begin(), b1.end());
      const std::vector<std::size_t> counts{bad.size(), b1.size()};
      atl::sparse::SparseGradient<std::uint32_t> out;
      try {
        zen_decode_pull<std::uint32_t>(layout, blocks, counts, out);
        ASSERT_FALSE(out.check().has_value()) << "bit " << bit << ": " << out.check().value_or("");
        ASSERT_EQ(out.nnz(), to0.size()) << "bit " << bit;
        for (auto x : out.indices) ASSERT_EQ(atl::sync::zen_owner(x, 2, 3), 0u) << "bit " << bit;
      } catch (const std::runtime_error& e) {
        ++refused;
        EXPECT_NE(std::string(e.what()).find("server 0"), std::string::npos) << e.what();
      }
    }
    EXPECT_GT(refused, code * 8 / 4) << "most flips of the high part are refused";
  }
}

TEST(ReceivedMessages, ZenEncodesAnEmptySparseServer) {
  // Regression (fuzz/regressions/zen_push): the sparse path copied from an empty vector's null
  // data() pointer. The block of a server that received nothing is its header and nothing more.
  const HashLayout layout(1, 1, 0);
  std::vector<E32> none;
  const auto block = zen_encode_pull_block<std::uint32_t>(layout, 0, none, PullCoding::coo);
  EXPECT_EQ(block.size(), 9u);
}

std::vector<std::uint8_t> sparcml_message(std::uint8_t form, std::uint64_t count,
                                          std::vector<std::uint32_t> idx, std::size_t values) {
  // Sized once and filled in place (an insert from idx made GCC 12 warn -Warray-bounds).
  std::vector<std::uint8_t> b(9 + idx.size() * 4 + values * 4, 0);
  b[0] = form;
  std::memcpy(b.data() + 1, &count, 8);
  if (!idx.empty()) std::memcpy(b.data() + 9, idx.data(), idx.size() * 4);
  return b;
}

TEST(ReceivedMessages, SparcmlRefusesWhatDoesNotFitM) {
  const std::uint64_t M = 100;
  auto decode = [&](const std::vector<std::uint8_t>& b) {
    return sparcml_decode<std::uint32_t>(b, M, 3);
  };
  EXPECT_EQ(decode(sparcml_message(0, 2, {5, 99}, 2)).idx.size(), 2u);
  EXPECT_EQ(decode(sparcml_message(1, M, {}, M)).val.size(), M);
  expect_refused([&] { decode(sparcml_message(2, 0, {}, 0)); }, {"rank 3", "unknown form 2"});
  expect_refused([&] { decode(sparcml_message(1, 10, {}, 10)); }, {"rank 3", "10 values"});
  expect_refused([&] { decode(sparcml_message(0, 1, {100}, 1)); }, {"index 100"});
  expect_refused([&] { decode(sparcml_message(0, 2, {7, 7}, 2)); }, {"not above the previous"});
  expect_refused([&] { decode(sparcml_message(0, 2, {5, 6}, 3)); }, {"bytes after the header"});
  expect_refused([&] { decode(sparcml_message(0, 3, {5, 6}, 2)); }, {"bytes after the header"});
  expect_refused([&] { decode({0, 1}); }, {"9-byte header"});
  // A count whose byte size overflows 64 bits must not pass the size check.
  expect_refused([&] { decode(sparcml_message(0, std::uint64_t{1} << 62, {1}, 1)); },
                 {"values for M"});
  expect_refused([&] { sparcml_checked_size<std::uint32_t>(~0ull, M, 2); }, {"rank 2 announced"});
}

// One OmniReduce record of block `id` with B = 4.
std::vector<std::uint8_t> omni_record(std::uint32_t id) {
  std::vector<std::uint8_t> r(4 + 4 * 4, 0);
  std::memcpy(r.data(), &id, 4);
  return r;
}

TEST(ReceivedMessages, OmnireduceRefusesPartialRecordsAndForeignBlocks) {
  std::vector<float> sums, dense;
  std::vector<std::uint8_t> present;
  // M = 40, B = 4: 10 blocks; aggregator 1 of 2 owns blocks [5, 10).
  const auto r5 = omni_record(5), r2 = omni_record(2);
  std::vector<std::size_t> one{0, r5.size()};
  EXPECT_NO_THROW(omnireduce_aggregate<std::uint32_t>(r5, one, 5, 5, 4, sums, present));
  expect_refused([&] { omnireduce_aggregate<std::uint32_t>(r2, one, 5, 5, 4, sums, present); },
                 {"push", "rank 1", "block 2"});
  std::vector<std::uint8_t> partial(r5.begin(), r5.end() - 1);
  std::vector<std::size_t> short_count{0, partial.size()};
  expect_refused(
      [&] { omnireduce_aggregate<std::uint32_t>(partial, short_count, 5, 5, 4, sums, present); },
      {"rank 1", "whole"});
  // The pull: aggregator 0 may only send blocks [0, 5).
  std::vector<std::size_t> from0{r5.size(), 0};
  expect_refused([&] { omnireduce_decode_pull<std::uint32_t>(r5, from0, 40, 4, dense); },
                 {"pull", "rank 0", "block 5"});
  EXPECT_NO_THROW(omnireduce_decode_pull<std::uint32_t>(r2, from0, 40, 4, dense));
}

TEST(ReceivedMessages, SparsePsAndAgsparseRefuseIndicesOutsideTheirRange) {
  // M = 100, 2 ranks: server 1 owns [50, 100).
  std::vector<E32> push{{60, 1.0f}, {10, 1.0f}};
  std::vector<std::size_t> counts{1, 1};
  expect_refused([&] { sparse_ps_check_push<std::uint32_t>(100, 2, 1, push, counts); },
                 {"sparse_ps push", "rank 1", "index 10"});
  std::vector<E32> pull{{10, 1.0f}, {60, 1.0f}, {60, 2.0f}};
  std::vector<std::size_t> pull_counts{1, 2};
  expect_refused([&] { sparse_ps_check_pull<std::uint32_t>(100, pull, pull_counts); },
                 {"sparse_ps pull", "rank 1", "not above"});
  std::vector<E32> all{{10, 1.0f}, {100, 1.0f}};
  expect_refused([&] { agsparse_check_entries<std::uint32_t>(100, all, counts); },
                 {"agsparse", "rank 1", "index 100"});
}

}  // namespace
