// Files that do not fit: traces, checkpoint containers and topology files are refused with an
// error naming the file and the field (issue 17, item 3; fuzz/ explores the rest).
#include <gtest/gtest.h>

#include <cstring>
#include <sstream>
#include <string>

#include "atoll/sparse/trace.h"
#include "atoll/util/files.h"
#include "atoll/wan/schedule_file.h"
#include "atoll/wan/topology.h"
#include "train/checkpoint_container.h"

namespace {

template <class Error, class F>
void expect_error(F f, std::initializer_list<std::string> parts) {
  try {
    f();
    FAIL() << "accepted; expected an error mentioning " << *parts.begin();
  } catch (const Error& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what();
  }
}

// A trace header (format: include/atoll/sparse/trace.h) with `nnz`, followed by `tail` bytes.
std::vector<std::uint8_t> trace_bytes(std::uint64_t elements, std::uint64_t nnz, std::size_t tail) {
  std::vector<std::uint8_t> b{'A', 'T', 'O', 'L', 'L', 'G', 'R', 'D'};
  atl::util::append_pod<std::uint32_t>(b, 1);
  atl::util::append_pod<std::uint32_t>(b, 4);
  atl::util::append_pod<std::uint64_t>(b, elements);
  atl::util::append_pod<std::uint64_t>(b, nnz);
  atl::util::append_pod<std::uint32_t>(b, 0);
  atl::util::append_pod<std::uint32_t>(b, 1);
  atl::util::append_pod<std::uint64_t>(b, 0);
  b.resize(b.size() + tail, 0);
  return b;
}

TEST(FileDecoders, TraceWithAnOverflowingEntryCountIsTruncatedNotAllocated) {
  // 48 + nnz·8 + 8 wraps around 2^64 to the file's own size: the old size check passed and the
  // reader allocated and read nnz entries. Now nnz is bounded by the bytes present first.
  const std::uint64_t nnz = (std::uint64_t{1} << 61) + 1;  // nnz·8 + 56 ≡ 64 (mod 2^64)
  const auto b = trace_bytes(~std::uint64_t{0}, nnz, 16);
  ASSERT_EQ(b.size(), 64u);
  expect_error<atl::sparse::InvalidGradient>(
      [&] { atl::sparse::parse_trace<std::uint64_t>(b, "t.atg"); },
      {"t.atg", "truncated", "offset 24"});
  expect_error<atl::sparse::InvalidGradient>(
      [&] { atl::sparse::parse_trace<std::uint32_t>(trace_bytes(10, 11, 0), "u.atg"); },
      {"u.atg", "exceeds M"});
}

TEST(FileDecoders, CheckpointContainerNamesFileAndOffset) {
  const std::vector<std::uint8_t> payload{1, 2, 3};
  auto b = atl::train::encode_checkpoint_container(42, payload);
  const auto c = atl::train::parse_checkpoint_container(b, "c.ckpt");
  EXPECT_EQ(c.step, 42u);
  EXPECT_EQ(std::vector<std::uint8_t>(c.payload.begin(), c.payload.end()), payload);
  using atl::train::CheckpointError;
  auto grown = b;
  const std::uint64_t huge = ~std::uint64_t{0} - 20;
  std::memcpy(grown.data() + 16, &huge, 8);
  expect_error<CheckpointError>([&] { atl::train::parse_checkpoint_container(grown, "c.ckpt"); },
                                {"c.ckpt", "offset 16"});
  auto flipped = b;
  flipped[25] ^= 1;
  expect_error<CheckpointError>([&] { atl::train::parse_checkpoint_container(flipped, "c.ckpt"); },
                                {"c.ckpt", "checksum mismatch at offset 27"});
  b[0] = 'X';
  expect_error<CheckpointError>([&] { atl::train::parse_checkpoint_container(b, "c.ckpt"); },
                                {"bad magic at offset 0"});
  expect_error<CheckpointError>(
      [&] { atl::train::parse_checkpoint_container(std::vector<std::uint8_t>(31), "c.ckpt"); },
      {"truncated: 31 bytes"});
}

TEST(FileDecoders, TopologyRefusesAnFpgaMemoryPastUint64) {
  std::istringstream in(
      "A,Alpha,EU,10,10,1,1,1e300\n"
      "B,Beta,EU,11,11,1,1,1\n");
  expect_error<atl::wan::TopologyError>([&] { atl::wan::parse_topology_csv(in, "sites.csv"); },
                                        {"sites.csv:1", "FPGA memory"});
  std::istringstream matrix("code,A,B\nA,0,x\n");
  std::istringstream ok("A,Alpha,EU,10,10\nB,Beta,EU,11,11\n");
  auto t = atl::wan::parse_topology_csv(ok, "sites.csv");
  expect_error<atl::wan::TopologyError>(
      [&] { atl::wan::parse_latency_matrix_csv(t, matrix, "m.csv"); }, {"m.csv:2", "'x'"});
}

// Found by fuzz/schedule.cpp: a count past size_t was cast (undefined behaviour).
TEST(FileDecoders, ScheduleRefusesARoundCountPastSizeT) {
  const std::string text =
      "atoll-wan-schedule 1\nsites A B\npayload_bytes 100\nrounds_to_consensus 2e28\n"
      "round\nclique unicast A B\n";
  expect_error<atl::wan::ScheduleFileError>([&] { atl::wan::parse_schedule(text, "s.txt"); },
                                            {"s.txt", "rounds_to_consensus", "2e28"});
}

}  // namespace
