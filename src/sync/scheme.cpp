#include "atoll/sync/scheme.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <stdexcept>

#include "atoll/util/fault_point.h"
#include "atoll/util/memory.h"
#include "schemes.h"

namespace atl::sync {

double SyncStats::time_s() const {
  double t = 0;
  for (const auto& p : phases) t += p.time_s;
  return t;
}
std::uint64_t SyncStats::bytes_sent() const {
  std::uint64_t b = 0;
  for (const auto& p : phases) b += p.bytes_sent;
  return b;
}
std::uint64_t SyncStats::bytes_received() const {
  std::uint64_t b = 0;
  for (const auto& p : phases) b += p.bytes_received;
  return b;
}

template <class Index>
std::vector<float> SyncResult<Index>::to_dense() const {
  if (dense_form) return dense;
  if (!in_views()) return sparse.to_dense();
  std::vector<float> out(sparse.elements, 0.0f);
  const std::size_t w = sparse.width;
  for (std::size_t k = 0; k < sparse.indices.size(); ++k)
    std::copy(block(k), block(k) + w,
              out.begin() + static_cast<std::ptrdiff_t>(sparse.indices[k] * w));
  return out;
}

namespace {
// FNV-1a over the bytes of (index, value) for every non-zero entry in index order.
struct Fnv1a {
  std::uint64_t h = 0xcbf29ce484222325ull;
  void add(std::uint64_t x) {
    for (int i = 0; i < 8; ++i) {
      h ^= (x >> (8 * i)) & 0xff;
      h *= 0x100000001b3ull;
    }
  }
  void add_entry(std::uint64_t index, float value) {
    add(index);
    add(std::bit_cast<std::uint32_t>(value));
  }
};
}  // namespace

template <class Index>
std::uint64_t SyncResult<Index>::checksum() const {
  Fnv1a f;
  if (dense_form) {
    for (std::size_t i = 0; i < dense.size(); ++i)
      if (dense[i] != 0.0f) f.add_entry(i, dense[i]);
  } else {
    const std::size_t w = sparse.width;
    for (std::size_t k = 0; k < sparse.indices.size(); ++k) {
      const float* v = block(k);
      for (std::size_t c = 0; c < w; ++c)
        if (v[c] != 0.0f) f.add_entry(static_cast<std::uint64_t>(sparse.indices[k]) * w + c, v[c]);
    }
  }
  return f.h;
}

template struct SyncResult<std::uint32_t>;
template struct SyncResult<std::uint64_t>;

std::optional<std::string> local_input_problem(const Communicator& comm, const SyncScheme& scheme,
                                               const std::optional<std::string>& local_problem,
                                               std::uint64_t elements, std::uint64_t local_nnz) {
  if (local_problem) return local_problem;
  if (elements == 0) return "element count M must be positive";
  return util::memory_problem(
      scheme.dense_memory_bytes(elements, comm.size(), local_nnz), comm.ranks_on_node(),
      fmt::format("scheme {} at M = {} on {} ranks", scheme.name(), elements, comm.size()));
}

void settle_input(Communicator& comm, const InputVerdicts& all,
                  const std::optional<std::string>& problem, std::uint64_t elements,
                  std::uint32_t width) {
  if (all.failed) comm.agree(problem);  // collective on every rank (`all` is the same); throws
  if (all.min_elements != all.max_elements) {
    throw comm::CollectiveError(
        fmt::format("element count M differs across ranks (min {}, max {}; this rank has {})",
                    all.min_elements, all.max_elements, elements));
  }
  if (all.min_index_bytes != all.max_index_bytes) {
    throw comm::CollectiveError(
        fmt::format("index width differs across ranks ({}-bit and {}-bit indices)",
                    8 * all.min_index_bytes, 8 * all.max_index_bytes));
  }
  if (all.min_width != all.max_width) {
    throw comm::CollectiveError(
        fmt::format("block width differs across ranks (min {}, max {}; this rank has {})",
                    all.min_width, all.max_width, width));
  }
}

void check_input(Communicator& comm, const SyncScheme& scheme,
                 const std::optional<std::string>& local_problem, std::uint64_t elements,
                 std::uint64_t local_nnz, std::uint32_t width, std::uint32_t index_bytes) {
  const auto problem = local_input_problem(comm, scheme, local_problem, elements, local_nnz);
  // One collective on the hot path: the max of (failed?, M, ~M, w, ~w, i, ~i) tells every rank
  // whether any rank failed and the largest and smallest M, block width and index width. Only a
  // failure pays for agree()'s message broadcast. Sent to every rank at once where ranks are few:
  // one latency, which every call pays in full across a WAN.
  std::uint64_t v[7] = {
      problem ? 1u : 0u,          elements, ~elements, width, ~std::uint64_t{width}, index_bytes,
      ~std::uint64_t{index_bytes}};
  comm.allreduce_direct<std::uint64_t>(v, comm::ReduceOp::max);
  settle_input(comm, InputVerdicts{v[0] != 0, ~v[2], v[1], ~v[4], v[3], ~v[6], v[5]}, problem,
               elements, width);
}

std::vector<PhaseStats> max_phase_stats(Communicator& comm, const SyncStats& stats) {
  std::string mine;
  for (const auto& p : stats.phases) mine += p.name + '\n';
  const auto bytes = comm.allgatherv<char>(std::span<const char>(mine), nullptr);
  std::vector<PhaseStats> out;
  std::size_t begin = 0;
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] != '\n') continue;
    std::string name(bytes.begin() + begin, bytes.begin() + i);
    begin = i + 1;
    const bool seen =
        std::any_of(out.begin(), out.end(), [&](const auto& p) { return p.name == name; });
    if (!seen) out.push_back(PhaseStats{std::move(name)});
  }
  // Per phase: time, bytes sent, bytes received (as doubles: one allreduce).
  std::vector<double> v(3 * out.size(), 0.0);
  for (const auto& p : stats.phases) {
    for (std::size_t k = 0; k < out.size(); ++k) {
      if (out[k].name != p.name) continue;
      v[3 * k] += p.time_s;
      v[3 * k + 1] += static_cast<double>(p.bytes_sent);
      v[3 * k + 2] += static_cast<double>(p.bytes_received);
    }
  }
  comm.allreduce<double>(v, comm::ReduceOp::max);
  for (std::size_t k = 0; k < out.size(); ++k) {
    out[k].time_s = v[3 * k];
    out[k].bytes_sent = static_cast<std::uint64_t>(v[3 * k + 1]);
    out[k].bytes_received = static_cast<std::uint64_t>(v[3 * k + 2]);
  }
  return out;
}

PhaseScope::PhaseScope(Communicator& comm, SyncStats& stats, std::string name)
    : comm_(comm),
      stats_(stats),
      name_(std::move(name)),
      start_s_(comm.wtime()),
      start_(comm.traffic()) {
  util::fault_point(name_);  // --inject-fault kill/stop at this phase (off unless armed)
}

PhaseScope::~PhaseScope() {
  const auto& now = comm_.traffic();
  stats_.phases.push_back(PhaseStats{name_, comm_.wtime() - start_s_,
                                     now.bytes_sent - start_.bytes_sent,
                                     now.bytes_received - start_.bytes_received});
}

const std::vector<std::string>& scheme_names() {
  static const std::vector<std::string> names{"allreduce",  "agsparse",  "sparcml",
                                              "omnireduce", "sparse_ps", "zen_coo",
                                              "zen",        "zen_ef",    "auto"};
  return names;
}

std::unique_ptr<SyncScheme> make_scheme(std::string_view name, const SchemeOptions& options) {
  if (name == "allreduce") return make_allreduce(options);
  if (name == "agsparse") return make_agsparse(options);
  if (name == "sparcml") return make_sparcml(options);
  if (name == "omnireduce") return make_omnireduce(options);
  if (name == "sparse_ps") return make_sparse_ps(options);
  if (name == "zen_coo") return make_zen_coo(options);
  if (name == "zen") return make_zen(options);
  if (name == "zen_ef") return make_zen_ef(options);
  if (name == "auto") return make_auto(options);
  std::string valid;
  for (const auto& n : scheme_names()) valid += (valid.empty() ? "" : ", ") + n;
  throw std::invalid_argument(fmt::format("unknown scheme '{}' (valid: {})", name, valid));
}

}  // namespace atl::sync
