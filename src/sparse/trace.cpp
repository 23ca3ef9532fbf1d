#include "atoll/sparse/trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <regex>

#include "atoll/util/files.h"

namespace atl::sparse {
namespace {

constexpr char kMagic[8] = {'A', 'T', 'O', 'L', 'L', 'G', 'R', 'D'};
constexpr std::uint32_t kVersion = 1;
constexpr std::size_t kHeaderBytes = 48;

std::uint64_t fnv1a(const std::uint8_t* p, std::size_t n) { return util::fnv1a({p, n}); }

using util::append_pod;
using util::load_pod;

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what) {
  throw InvalidGradient(fmt::format("trace {}: {}", file.string(), what));
}

std::vector<std::uint8_t> read_all(const std::filesystem::path& file) {
  try {
    return util::read_file(file);
  } catch (const util::FileError& e) {
    throw InvalidGradient(fmt::format("trace {}", e.what()));
  }
}

TraceHeader parse_header(const std::filesystem::path& file, const std::uint8_t* p, std::size_t n) {
  if (n < kHeaderBytes)
    fail(file, fmt::format("truncated: {} bytes, header needs {}", n, kHeaderBytes));
  if (std::memcmp(p, kMagic, 8) != 0)
    fail(file, "not an atoll gradient trace (bad magic at offset 0)");
  const auto version = load_pod<std::uint32_t>(p + 8);
  if (version != kVersion) fail(file, fmt::format("unsupported version {} at offset 8", version));
  TraceHeader h;
  h.index_bytes = load_pod<std::uint32_t>(p + 12);
  h.elements = load_pod<std::uint64_t>(p + 16);
  h.nnz = load_pod<std::uint64_t>(p + 24);
  h.rank = load_pod<std::uint32_t>(p + 32);
  h.world = load_pod<std::uint32_t>(p + 36);
  h.step = load_pod<std::uint64_t>(p + 40);
  if (h.index_bytes != 4 && h.index_bytes != 8) {
    fail(file, fmt::format("index width {} bytes at offset 12 (must be 4 or 8)", h.index_bytes));
  }
  if (h.nnz > h.elements)
    fail(file, fmt::format("nnz {} (offset 24) exceeds M = {} (offset 16)", h.nnz, h.elements));
  return h;
}

}  // namespace

std::filesystem::path trace_path(const std::filesystem::path& dir, std::uint64_t step, int rank) {
  return dir / fmt::format("step-{:06}.rank-{:05}.atg", step, rank);
}

template <class Index>
void write_trace(const std::filesystem::path& file, const SparseGradient<Index>& grad, int rank,
                 int world, std::uint64_t step) {
  grad.validate();
  std::vector<std::uint8_t> b;
  b.reserve(kHeaderBytes + grad.nnz() * (sizeof(Index) + 4) + 8);
  b.insert(b.end(), kMagic, kMagic + 8);
  append_pod<std::uint32_t>(b, kVersion);
  append_pod<std::uint32_t>(b, sizeof(Index));
  append_pod<std::uint64_t>(b, grad.elements);
  append_pod<std::uint64_t>(b, grad.nnz());
  append_pod<std::uint32_t>(b, static_cast<std::uint32_t>(rank));
  append_pod<std::uint32_t>(b, static_cast<std::uint32_t>(world));
  append_pod<std::uint64_t>(b, step);
  const auto* ip = reinterpret_cast<const std::uint8_t*>(grad.indices.data());
  b.insert(b.end(), ip, ip + grad.nnz() * sizeof(Index));
  const auto* vp = reinterpret_cast<const std::uint8_t*>(grad.values.data());
  b.insert(b.end(), vp, vp + grad.nnz() * sizeof(float));
  append_pod<std::uint64_t>(b, fnv1a(b.data(), b.size()));

  try {
    util::write_file_atomic(file, b);
  } catch (const util::FileError& e) {
    throw InvalidGradient(fmt::format("trace {}", e.what()));
  }
}

template <class Index>
SparseGradient<Index> parse_trace(std::span<const std::uint8_t> bytes,
                                  const std::filesystem::path& file, TraceHeader* header_out) {
  const auto h = parse_header(file, bytes.data(), bytes.size());
  // nnz is bounded by the bytes present before anything is multiplied or allocated.
  const std::uint64_t entry_bytes = h.index_bytes + 4;
  const std::uint64_t room = bytes.size() >= kHeaderBytes + 8 ? bytes.size() - kHeaderBytes - 8 : 0;
  if (h.nnz > room / entry_bytes) {
    fail(file, fmt::format("truncated: {} bytes, the header's nnz (offset 24) promises {} entries",
                           bytes.size(), h.nnz));
  }
  const std::uint64_t expected = kHeaderBytes + h.nnz * entry_bytes + 8;
  if (bytes.size() != expected) {
    fail(file, fmt::format("trailing bytes: {} bytes, header promises {}", bytes.size(), expected));
  }
  const auto stored = load_pod<std::uint64_t>(bytes.data() + expected - 8);
#ifndef ATOLL_FUZZ_SKIP_CHECKSUMS  // fuzz builds only: lets the fuzzer past the checksum
  if (fnv1a(bytes.data(), expected - 8) != stored) {
    fail(file, fmt::format("checksum mismatch at offset {} (corrupt file)", expected - 8));
  }
#else
  (void)stored;
#endif
  if (h.elements > max_elements<Index>()) {
    fail(file, fmt::format("M = {} does not fit {}-bit indices", h.elements, 8 * sizeof(Index)));
  }
  SparseGradient<Index> g;
  g.elements = h.elements;
  g.indices.resize(h.nnz);
  g.values.resize(h.nnz);
  const std::uint8_t* p = bytes.data() + kHeaderBytes;
  for (std::uint64_t k = 0; k < h.nnz; ++k) {
    g.indices[k] = h.index_bytes == 4 ? static_cast<Index>(load_pod<std::uint32_t>(p + 4 * k))
                                      : static_cast<Index>(load_pod<std::uint64_t>(p + 8 * k));
  }
  if (h.nnz > 0)  // an empty vector's data() may be null: memcpy(null, .., 0) is undefined
    std::memcpy(g.values.data(), p + h.nnz * h.index_bytes, h.nnz * sizeof(float));
  if (auto problem = g.check()) fail(file, *problem);
  if (header_out) *header_out = h;
  return g;
}

template <class Index>
SparseGradient<Index> read_trace(const std::filesystem::path& file, TraceHeader* header_out) {
  const auto bytes = read_all(file);
  return parse_trace<Index>(bytes, file, header_out);
}

std::vector<std::uint64_t> trace_steps(const std::filesystem::path& dir, int rank) {
  if (!std::filesystem::is_directory(dir)) {
    throw InvalidGradient(fmt::format("trace directory {} does not exist", dir.string()));
  }
  const std::regex pattern(fmt::format(R"(step-(\d+)\.rank-0*{}\.atg)", rank));
  std::vector<std::uint64_t> steps;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::smatch m;
    const auto name = entry.path().filename().string();
    if (std::regex_match(name, m, pattern)) steps.push_back(std::stoull(m[1].str()));
  }
  std::sort(steps.begin(), steps.end());
  return steps;
}

std::string describe_steps(const std::vector<std::uint64_t>& steps) {
  std::string out;
  for (std::size_t i = 0; i < steps.size();) {
    std::size_t j = i;
    while (j + 1 < steps.size() && steps[j + 1] == steps[j] + 1) ++j;
    out += (out.empty() ? "" : ", ") +
           (j == i ? std::to_string(steps[i]) : fmt::format("{}-{}", steps[i], steps[j]));
    i = j + 1;
  }
  return out.empty() ? "none" : out;
}

template void write_trace(const std::filesystem::path&, const SparseGradient<std::uint32_t>&, int,
                          int, std::uint64_t);
template void write_trace(const std::filesystem::path&, const SparseGradient<std::uint64_t>&, int,
                          int, std::uint64_t);
template SparseGradient<std::uint32_t> read_trace(const std::filesystem::path&, TraceHeader*);
template SparseGradient<std::uint64_t> read_trace(const std::filesystem::path&, TraceHeader*);
template SparseGradient<std::uint32_t> parse_trace(std::span<const std::uint8_t>,
                                                   const std::filesystem::path&, TraceHeader*);
template SparseGradient<std::uint64_t> parse_trace(std::span<const std::uint8_t>,
                                                   const std::filesystem::path&, TraceHeader*);

}  // namespace atl::sparse
