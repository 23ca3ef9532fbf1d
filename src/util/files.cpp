#include "atoll/util/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace atl::util {
namespace {

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what) {
  throw FileError(fmt::format("{}: {}", file.string(), what));
}

void sync_path(const std::filesystem::path& path, int flags) {
  const int fd = ::open(path.c_str(), flags);
  if (fd < 0) return;  // best effort (e.g. directories on file systems that refuse O_RDONLY)
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

std::uint64_t fnv1a(std::span<const std::uint8_t> bytes, std::uint64_t h) {
  for (std::uint8_t b : bytes) {
    h ^= b;
    h *= 0x100000001b3ull;
  }
  return h;
}

namespace {

// A temporary file's path beside `file` (its directory created), named with `tag` and the pid.
std::filesystem::path temp_beside(const std::filesystem::path& file, const char* tag) {
  const auto dir = file.parent_path().empty() ? std::filesystem::path(".") : file.parent_path();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) fail(file, "cannot create directory " + dir.string() + " (" + ec.message() + ")");
  return dir / fmt::format(".{}.{}.{}", file.filename().string(), tag, ::getpid());
}

}  // namespace

void check_writable(const std::filesystem::path& file) {
  const auto tmp = temp_beside(file, "check");
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(file, fmt::format("cannot create {} ({})", tmp.string(), std::strerror(errno)));
  }
  std::error_code ec;
  std::filesystem::remove(tmp, ec);
}

void write_file_atomic(const std::filesystem::path& file, std::span<const std::uint8_t> bytes) {
  const auto tmp = temp_beside(file, "tmp");
  const auto dir = tmp.parent_path();
  std::error_code ec;
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) fail(file, fmt::format("cannot create {} ({})", tmp.string(), std::strerror(errno)));
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    out.flush();
    if (!out) {
      std::filesystem::remove(tmp, ec);
      fail(file, "write failed (disk full?)");
    }
  }
  sync_path(tmp, O_RDONLY);
  std::filesystem::rename(tmp, file, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    fail(file, "cannot rename the temporary file into place");
  }
  sync_path(dir, O_RDONLY | O_DIRECTORY);
}

void write_file_atomic(const std::filesystem::path& file, const std::string& text) {
  write_file_atomic(file, std::span<const std::uint8_t>(
                              reinterpret_cast<const std::uint8_t*>(text.data()), text.size()));
}

std::vector<std::uint8_t> read_file(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) fail(file, fmt::format("cannot open ({})", std::strerror(errno)));
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  if (in.bad()) fail(file, "read failed");
  return bytes;
}

}  // namespace atl::util
