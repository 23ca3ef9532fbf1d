// Writes trace directories for the bad-input tests (tests/cli/bad_input.sh), 2 ranks each:
//   good/       valid traces, M = 1000
//   index_oob/  rank 1 holds index 1000 = M (checksum valid, so only the range check can catch it)
//   m_differ/   rank 0 has M = 1000, rank 1 M = 1001
//   truncated/  rank 1's file cut short
// The bytes are laid out here by hand, following the format in include/atoll/sparse/trace.h, so
// this also checks that the documented format is what the reader accepts.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <vector>

namespace fs = std::filesystem;

namespace {

template <class T>
void put(std::vector<std::uint8_t>& b, T v) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
  b.insert(b.end(), p, p + sizeof(T));
}

void write(const fs::path& dir, int rank, std::uint64_t M, std::vector<std::uint32_t> idx,
           std::size_t cut = 0) {
  std::vector<std::uint8_t> b;
  const char magic[8] = {'A', 'T', 'O', 'L', 'L', 'G', 'R', 'D'};
  b.insert(b.end(), magic, magic + 8);
  put<std::uint32_t>(b, 1);
  put<std::uint32_t>(b, 4);
  put<std::uint64_t>(b, M);
  put<std::uint64_t>(b, idx.size());
  put<std::uint32_t>(b, rank);
  put<std::uint32_t>(b, 2);
  put<std::uint64_t>(b, 0);
  for (auto x : idx) put<std::uint32_t>(b, x);
  for (std::size_t k = 0; k < idx.size(); ++k) put<float>(b, 1.0f);
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (auto byte : b) {
    h ^= byte;
    h *= 0x100000001b3ull;
  }
  put<std::uint64_t>(b, h);
  if (cut) b.resize(b.size() - cut);
  fs::create_directories(dir);
  char name[64];
  std::snprintf(name, sizeof name, "step-%06d.rank-%05d.atg", 0, rank);
  std::ofstream(dir / name, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: make_test_traces DIR\n";
    return 2;
  }
  const fs::path root = argv[1];
  write(root / "good", 0, 1000, {0, 5, 999});
  write(root / "good", 1, 1000, {5, 6});
  write(root / "index_oob", 0, 1000, {0, 5});
  write(root / "index_oob", 1, 1000, {5, 1000});
  write(root / "m_differ", 0, 1000, {0, 5});
  write(root / "m_differ", 1, 1001, {5, 6});
  write(root / "truncated", 0, 1000, {0, 5});
  write(root / "truncated", 1, 1000, {5, 6, 7}, 5);
  return 0;
}
