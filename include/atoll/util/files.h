// Files that must never be half-written: results, traces and checkpoints.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace atl::util {

class FileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Native-endian fields of the binary formats (traces, checkpoints).
template <class T>
void append_pod(std::vector<std::uint8_t>& bytes, T value) {
  const auto* p = reinterpret_cast<const std::uint8_t*>(&value);
  bytes.insert(bytes.end(), p, p + sizeof(T));
}
template <class T>
T load_pod(const std::uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// 64-bit FNV-1a, continued from `h` (so a checksum can be computed over several pieces).
std::uint64_t fnv1a(std::span<const std::uint8_t> bytes, std::uint64_t h = 0xcbf29ce484222325ull);

// Writes `bytes` to `file` atomically: a temporary file in the same directory, flushed to disk
// (fsync), then renamed over `file`, then the directory synced. A reader (or a crash) sees either
// the old file or the whole new one. Creates the parent directory. Throws FileError naming the
// file.
void write_file_atomic(const std::filesystem::path& file, std::span<const std::uint8_t> bytes);
void write_file_atomic(const std::filesystem::path& file, const std::string& text);

// Fails early what write_file_atomic(file, ...) would fail at the end of a long run: creates the
// parent directory and a temporary file beside `file`, then removes the temporary file (`file`
// itself is not touched). Throws FileError naming the file.
void check_writable(const std::filesystem::path& file);

// The whole file; throws FileError naming the file and the reason if it cannot be read.
std::vector<std::uint8_t> read_file(const std::filesystem::path& file);

}  // namespace atl::util
