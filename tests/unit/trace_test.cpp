#include "atoll/sparse/trace.h"

#include <gtest/gtest.h>

#include <fstream>

namespace {
using namespace atl::sparse;
namespace fs = std::filesystem;

fs::path temp_dir() {
  auto d = fs::temp_directory_path() / ("atoll-trace-test-" + std::to_string(::getpid()));
  fs::create_directories(d);
  return d;
}

TEST(Trace, RoundTrip32And64) {
  const auto dir = temp_dir();
  SparseGradient<std::uint32_t> g{1000, {0, 7, 999}, {1.5f, -2.0f, 3.0f}};
  write_trace(trace_path(dir, 3, 1), g, 1, 4, 3);
  TraceHeader h;
  const auto back = read_trace<std::uint32_t>(trace_path(dir, 3, 1), &h);
  EXPECT_EQ(back.indices, g.indices);
  EXPECT_EQ(back.values, g.values);
  EXPECT_EQ(h.world, 4u);
  EXPECT_EQ(h.rank, 1u);
  EXPECT_EQ(h.step, 3u);
  const auto wide = read_trace<std::uint64_t>(trace_path(dir, 3, 1));
  EXPECT_EQ(wide.indices, (std::vector<std::uint64_t>{0, 7, 999}));
  EXPECT_EQ(trace_steps(dir, 1), (std::vector<std::uint64_t>{3}));
  fs::remove_all(dir);
}

TEST(Trace, DetectsTruncationAndCorruption) {
  const auto dir = temp_dir();
  SparseGradient<std::uint32_t> g{1000, {0, 7, 999}, {1.5f, -2.0f, 3.0f}};
  const auto file = trace_path(dir, 0, 0);
  write_trace(file, g, 0, 1, 0);
  const auto size = fs::file_size(file);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(50);
    f.put('\x7f');
  }
  try {
    read_trace<std::uint32_t>(file);
    FAIL() << "corruption not detected";
  } catch (const InvalidGradient& e) {
    EXPECT_NE(std::string(e.what()).find("checksum"), std::string::npos) << e.what();
  }
  write_trace(file, g, 0, 1, 0);
  fs::resize_file(file, size - 3);
  try {
    read_trace<std::uint32_t>(file);
    FAIL() << "truncation not detected";
  } catch (const InvalidGradient& e) {
    EXPECT_NE(std::string(e.what()).find("truncated"), std::string::npos) << e.what();
  }
  fs::resize_file(file, 10);
  EXPECT_THROW(read_trace<std::uint32_t>(file), InvalidGradient);
  EXPECT_THROW(read_trace<std::uint32_t>(dir / "missing.atg"), InvalidGradient);
  fs::remove_all(dir);
}

TEST(Trace, RefusesInvalidGradientOnWrite) {
  SparseGradient<std::uint32_t> g{10, {3, 2}, {1, 1}};
  EXPECT_THROW(write_trace(temp_dir() / "x.atg", g, 0, 1, 0), InvalidGradient);
}

}  // namespace
