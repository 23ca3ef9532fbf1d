#include "checkpoint_container.h"

#include <fmt/format.h>

#include <cstring>

#include "atoll/util/files.h"

namespace atl::train {
namespace {

constexpr char kMagic[8] = {'A', 'T', 'L', 'C', 'K', 'P', 'T', '1'};
constexpr std::size_t kHeader = 24;  // magic, step, payload size
constexpr std::size_t kTrailer = 8;  // FNV-1a 64 of everything before

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what) {
  throw CheckpointError(fmt::format("checkpoint {}: {}", file.string(), what));
}

}  // namespace

std::vector<std::uint8_t> encode_checkpoint_container(std::uint64_t step,
                                                      std::span<const std::uint8_t> payload) {
  std::vector<std::uint8_t> b(sizeof(kMagic));  // (insert from kMagic trips GCC 12's -Wstringop)
  b.reserve(kHeader + payload.size() + kTrailer);
  std::memcpy(b.data(), kMagic, sizeof(kMagic));
  util::append_pod<std::uint64_t>(b, step);
  util::append_pod<std::uint64_t>(b, payload.size());
  b.insert(b.end(), payload.begin(), payload.end());
  util::append_pod<std::uint64_t>(b, util::fnv1a(b));
  return b;
}

CheckpointContainer parse_checkpoint_container(std::span<const std::uint8_t> b,
                                               const std::filesystem::path& file) {
  if (b.size() < kHeader + kTrailer) {
    fail(file, fmt::format("truncated: {} bytes, header and checksum need {}", b.size(),
                           kHeader + kTrailer));
  }
  if (std::memcmp(b.data(), kMagic, 8) != 0) {
    fail(file, "not an atoll checkpoint (bad magic at offset 0)");
  }
  CheckpointContainer c;
  c.step = util::load_pod<std::uint64_t>(b.data() + 8);
  const auto size = util::load_pod<std::uint64_t>(b.data() + 16);
  if (size != b.size() - kHeader - kTrailer) {
    fail(file, fmt::format("truncated or padded: {} bytes, the payload size at offset 16 "
                           "promises {} + {} header and checksum bytes",
                           b.size(), size, kHeader + kTrailer));
  }
  const std::size_t sum_at = b.size() - kTrailer;
  const auto stored = util::load_pod<std::uint64_t>(b.data() + sum_at);
#ifndef ATOLL_FUZZ_SKIP_CHECKSUMS  // fuzz builds only: lets the fuzzer past the checksum
  if (util::fnv1a(b.first(sum_at)) != stored) {
    fail(file, fmt::format("checksum mismatch at offset {}: the file is corrupt", sum_at));
  }
#else
  (void)stored;
#endif
  c.payload = b.subspan(kHeader, size);
  return c;
}

}  // namespace atl::train
