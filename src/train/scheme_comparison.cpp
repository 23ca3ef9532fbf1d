#include "scheme_comparison.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "atoll/util/files.h"

namespace atl::train {
namespace {
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
std::vector<double> after_warmup(const std::vector<double>& v) {
  return std::vector<double>(v.begin() + std::min<std::size_t>(2, v.size()), v.end());
}
}  // namespace

template <class Index>
SchemeComparison<Index>::SchemeComparison(const std::vector<std::string>& names) {
  for (const auto& name : names) compared_.push_back({name, sync::make_scheme(name), {}, {}, true});
}

template <class Index>
std::size_t SchemeComparison<Index>::run_before(int step) const {
  return compared_.empty() ? 0 : static_cast<std::size_t>(step) % (compared_.size() + 1);
}

template <class Index>
double SchemeComparison<Index>::run(comm::Communicator& comm, std::size_t c,
                                    const sparse::SparseGradient<Index>& local, std::int64_t E) {
  auto& x = compared_[c];
  const double tb = comm.wtime();
  comm.barrier();
  const double ts0 = comm.wtime();
  x.scheme->synchronize(comm, local, result_);
  x.rows = touched_rows(result_, E, 1.0 / comm.size());
  const double ts1 = comm.wtime();
  x.sync_rows_s.push_back(ts1 - ts0);
  return ts1 - tb;
}

template <class Index>
void SchemeComparison<Index>::check_rows(const RowGradient& training_rows, std::int64_t E) {
  if (compared_.empty()) return;
  const RowGradient rows = owned_rows(training_rows, E);
  for (auto& x : compared_) {
    const auto& crows = x.rows;
    bool same = crows.rows == rows.rows && crows.values.size() == rows.values.size();
    for (std::size_t r = 0; same && r < rows.rows.size(); ++r) {
      const float* a = crows.values.data() + r * E;
      const float* b = rows.values.data() + r * E;
      float scale = 0;
      for (std::int64_t j = 0; j < E; ++j) scale = std::max(scale, std::fabs(b[j]));
      for (std::int64_t j = 0; same && j < E; ++j) same = std::fabs(a[j] - b[j]) <= 1e-5f * scale;
    }
    x.verified = x.verified && same;
  }
}

template <class Index>
void SchemeComparison<Index>::record_step(double base_s, double training_sync_rows_s) {
  base_s_.push_back(base_s);
  training_sync_rows_s_.push_back(training_sync_rows_s);
}

template <class Index>
void SchemeComparison<Index>::report(comm::Communicator& comm, const std::string& training_scheme,
                                     double tokens_per_step, const std::filesystem::path& out) {
  if (compared_.empty() || base_s_.size() <= 2) return;
  // Per scheme: step time = (this step without the training scheme's sync + rows) + that
  // scheme's sync + rows, both measured in the same step; median over steps after the first two.
  std::vector<std::pair<std::string, const std::vector<double>*>> all;
  all.emplace_back(training_scheme + " (training)", &training_sync_rows_s_);
  for (auto& x : compared_) {
    // Verified only if every rank saw equal results at every step.
    x.verified = comm.allreduce_value<std::int32_t>(x.verified ? 1 : 0, comm::ReduceOp::min) == 1;
    all.emplace_back(x.name, &x.sync_rows_s);
  }
  if (comm.rank() != 0) return;
  std::string lines;
  fmt::print(
      "\n  same-step comparison ({} steps after 2 warm-up; step = rest of the step + the "
      "scheme's embedding sync + row extraction):\n",
      base_s_.size() - 2);
  fmt::print("  {:<20} {:>12} {:>12} {:>12} {:>9}\n", "scheme", "sync+rows ms", "step ms",
             "tokens/s", "verified");
  for (std::size_t k = 0; k < all.size(); ++k) {
    const auto& [name, times] = all[k];
    std::vector<double> est;
    const auto t = after_warmup(*times), b = after_warmup(base_s_);
    for (std::size_t i = 0; i < t.size(); ++i) est.push_back(b[i] + t[i]);
    const double st = median(est), sr = median(t);
    const bool verified = k == 0 || compared_[k - 1].verified;
    fmt::print("  {:<20} {:>12.2f} {:>12.2f} {:>12.0f} {:>9}\n", name, sr * 1e3, st * 1e3,
               tokens_per_step / st, k == 0 ? "-" : (verified ? "yes" : "NO"));
    lines += nlohmann::json{{"scheme", k == 0 ? training_scheme : name},
                            {"training_scheme", k == 0},
                            {"ranks", comm.size()},
                            {"steps", t.size()},
                            {"sync_rows_s", sr},
                            {"step_s", st},
                            {"tokens_per_s", tokens_per_step / st},
                            {"verified", verified}}
                 .dump() +
             "\n";
  }
  try {
    if (!out.empty()) util::write_file_atomic(out / "compare.jsonl", lines);
  } catch (const util::FileError& e) {
    std::fprintf(stderr, "atoll: warning: %s\n", e.what());
  }
}

template class SchemeComparison<std::uint32_t>;
template class SchemeComparison<std::uint64_t>;

}  // namespace atl::train
