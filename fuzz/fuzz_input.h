// The byte layout the sync fuzz targets read (and fuzz/make_seeds.cpp writes): parameters first,
// then per-sender counts, then the payload exactly as it arrives from the peers. Shared by the
// targets and the seed generator so that seeds are real messages in the layout the targets parse.
//   u32 elements (M = 1 + value % 2^18)   u8 ranks (n = 1 + value % 16)   u8 rank (value % n)
//   u8 flags (bit 0: 64-bit indices; other bits: per target)   u8 extra (per target)
//   u32 hash seed   n × u32 counts (entries or bytes, per target)   payload: the rest
#pragma once

#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace atl::fuzz {

constexpr std::uint64_t kMaxElements = std::uint64_t{1} << 18;  // keeps one input fast
constexpr std::uint32_t kMaxRanks = 16;

struct SyncInput {
  std::uint64_t elements = 1;
  std::uint32_t ranks = 1;
  std::uint32_t rank = 0;
  std::uint8_t flags = 0;
  std::uint8_t extra = 0;
  std::uint64_t seed = 0;
  std::vector<std::size_t> counts;
  std::span<const std::uint8_t> payload;

  bool index64() const { return flags & 1; }
};

// Reads little-endian fields; a field past the end reads as zero.
class InputReader {
 public:
  explicit InputReader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
  template <class T>
  T read() {
    T v{};
    const std::size_t n = std::min(sizeof(T), bytes_.size() - at_);
    std::memcpy(&v, bytes_.data() + at_, n);
    at_ += n;
    return v;
  }
  std::span<const std::uint8_t> rest() const { return bytes_.subspan(at_); }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t at_ = 0;
};

inline SyncInput read_sync_input(std::span<const std::uint8_t> bytes) {
  InputReader r(bytes);
  SyncInput in;
  in.elements = 1 + r.read<std::uint32_t>() % kMaxElements;
  in.ranks = 1 + r.read<std::uint8_t>() % kMaxRanks;
  in.rank = r.read<std::uint8_t>() % in.ranks;
  in.flags = r.read<std::uint8_t>();
  in.extra = r.read<std::uint8_t>();
  in.seed = r.read<std::uint32_t>();
  in.counts.resize(in.ranks);
  for (auto& c : in.counts) c = r.read<std::uint32_t>();
  in.payload = r.rest();
  return in;
}

// A sync target's entry point: reads the input and calls run(Index{}, input) with the index width
// it asks for (flags bit 0: 64-bit).
template <class Run>
int run_sync_target(const std::uint8_t* data, std::size_t size, Run run) {
  const auto in = read_sync_input({data, size});
  if (in.index64())
    run(std::uint64_t{}, in);
  else
    run(std::uint32_t{}, in);
  return 0;
}

// The inverse, for the seed generator: values must already be in range.
inline std::vector<std::uint8_t> write_sync_input(const SyncInput& in,
                                                  std::span<const std::uint8_t> payload) {
  std::vector<std::uint8_t> b;
  auto put = [&](const auto v) {
    const auto* p = reinterpret_cast<const std::uint8_t*>(&v);
    b.insert(b.end(), p, p + sizeof(v));
  };
  put(static_cast<std::uint32_t>(in.elements - 1));
  put(static_cast<std::uint8_t>(in.ranks - 1));
  put(static_cast<std::uint8_t>(in.rank));
  put(in.flags);
  put(in.extra);
  put(static_cast<std::uint32_t>(in.seed));
  for (const auto c : in.counts) put(static_cast<std::uint32_t>(c));
  b.insert(b.end(), payload.begin(), payload.end());
  return b;
}

// The payload read as whole items of T (a trailing partial item is dropped).
template <class T>
std::vector<T> items_of(std::span<const std::uint8_t> payload) {
  std::vector<T> out(payload.size() / sizeof(T));
  if (!out.empty()) std::memcpy(out.data(), payload.data(), out.size() * sizeof(T));
  return out;
}

}  // namespace atl::fuzz
