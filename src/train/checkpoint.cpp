#include "checkpoint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <regex>
#include <sstream>

#include "atoll/util/files.h"

namespace atl::train {
namespace {

constexpr char kMagic[8] = {'A', 'T', 'L', 'C', 'K', 'P', 'T', '1'};
constexpr std::size_t kHeader = 24;

using util::append_pod;
using util::load_pod;
[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what) {
  throw CheckpointError(fmt::format("checkpoint {}: {}", file.string(), what));
}

}  // namespace

std::filesystem::path checkpoint_dir(const std::filesystem::path& out) {
  return out / "checkpoints";
}

std::filesystem::path checkpoint_path(const std::filesystem::path& out, std::uint64_t step) {
  return checkpoint_dir(out) / fmt::format("step-{:08}.ckpt", step);
}

std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& out) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  const auto dir = checkpoint_dir(out);
  if (!std::filesystem::is_directory(dir, ec)) return files;
  static const std::regex pattern(R"(step-\d{8}\.ckpt)");
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (std::regex_match(e.path().filename().string(), pattern)) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

void write_checkpoint(const std::filesystem::path& file, std::uint64_t step,
                      torch::serialize::OutputArchive& archive) {
  std::ostringstream payload;
  archive.save_to(payload);
  const std::string p = payload.str();
  std::vector<std::uint8_t> b;
  b.reserve(kHeader + p.size() + 8);
  b.insert(b.end(), kMagic, kMagic + 8);
  append_pod<std::uint64_t>(b, step);
  append_pod<std::uint64_t>(b, p.size());
  b.insert(b.end(), p.begin(), p.end());
  append_pod<std::uint64_t>(b, util::fnv1a(b));
  util::write_file_atomic(file, b);
}

std::uint64_t read_checkpoint(const std::filesystem::path& file,
                              torch::serialize::InputArchive& archive) {
  std::vector<std::uint8_t> b;
  try {
    b = util::read_file(file);
  } catch (const util::FileError& e) {
    throw CheckpointError(fmt::format("checkpoint {}", e.what()));
  }
  if (b.size() < kHeader + 8) fail(file, fmt::format("truncated: {} bytes", b.size()));
  if (std::memcmp(b.data(), kMagic, 8) != 0) fail(file, "not an atoll checkpoint (bad magic)");
  const auto step = load_pod<std::uint64_t>(b.data() + 8);
  const auto size = load_pod<std::uint64_t>(b.data() + 16);
  if (b.size() != kHeader + size + 8) {
    fail(file, fmt::format("truncated or padded: {} bytes, the header promises {}", b.size(),
                           kHeader + size + 8));
  }
  const auto stored = load_pod<std::uint64_t>(b.data() + b.size() - 8);
  if (util::fnv1a({b.data(), b.size() - 8}) != stored) {
    fail(file, "checksum mismatch: the file is corrupt");
  }
  std::istringstream in(std::string(reinterpret_cast<const char*>(b.data() + kHeader), size));
  try {
    archive.load_from(in);
  } catch (const c10::Error& e) {
    fail(file, fmt::format("unreadable archive ({})", e.what_without_backtrace()));
  }
  return step;
}

void prune_checkpoints(const std::filesystem::path& out, int keep) {
  auto files = list_checkpoints(out);
  std::error_code ec;
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < files.size(); ++i) {
    std::filesystem::remove(files[i], ec);
  }
}

}  // namespace atl::train
