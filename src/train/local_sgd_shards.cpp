#include "local_sgd_shards.h"

#include <stdexcept>

namespace atl::train {

std::vector<std::size_t> StateShards::split(std::size_t n, int parts) {
  const auto p = static_cast<std::size_t>(parts);
  std::vector<std::size_t> counts(p, n / p);
  for (std::size_t g = 0; g < n % p; ++g) ++counts[g];
  return counts;
}

StateShards::StateShards(std::vector<Range> units, std::int64_t rows, std::int64_t width,
                         comm::Communicator* group)
    : group_(group && group->size() > 1 ? group : nullptr), width_(width), full_(std::move(units)) {
  const int parts = group_ ? group_->size() : 1;
  rank_ = group_ ? static_cast<std::size_t>(group_->rank()) : 0;
  for (const auto& u : full_) {
    auto counts = split(u.size(), parts);
    std::size_t at = u.begin;
    for (std::size_t g = 0; g < rank_; ++g) at += counts[g];
    piece_begin_.push_back(at);
    local_.push_back({local_elements_, local_elements_ + counts[rank_]});
    local_elements_ += counts[rank_];
    piece_counts_.push_back(std::move(counts));
  }
  std::int64_t at = 0;
  for (auto n : split(static_cast<std::size_t>(rows), parts)) {
    row_begin_.push_back(at);
    row_count_.push_back(static_cast<std::int64_t>(n));
    row_elements_.push_back(n * static_cast<std::size_t>(width));
    at += static_cast<std::int64_t>(n);
  }
}

std::size_t StateShards::piece_begin(int unit, int g) const {
  std::size_t at = full(unit).begin;
  for (int q = 0; q < g; ++q) at += piece_size(unit, q);
  return at;
}

std::size_t StateShards::local_elements(int g) const {
  std::size_t n = 0;
  for (std::size_t u = 0; u < full_.size(); ++u) n += piece_counts_[u][static_cast<std::size_t>(g)];
  return n;
}

std::vector<double> StateShards::sum_over_group(std::vector<double> values) {
  if (!group_) return values;
  const auto all = group_->allgather_each<double>(values);  // rank-major
  const std::size_t n = values.size();
  for (std::size_t i = 0; i < n; ++i) {
    double s = 0;
    for (std::size_t g = 0; g < static_cast<std::size_t>(group_->size()); ++g) s += all[g * n + i];
    values[i] = s;
  }
  return values;
}

std::vector<float> StateShards::gather(std::span<const float> mine,
                                       std::span<const std::size_t> counts) {
  if (!group_) return {mine.begin(), mine.end()};
  if (mine.size() != counts[rank_]) throw std::logic_error("StateShards: piece of the wrong size");
  std::size_t total = 0;
  for (auto c : counts) total += c;
  std::vector<float> out(total);
  auto request = group_->iallgatherv<float>(mine, counts, out);
  group_->wait(request);
  return out;
}

std::vector<float> StateShards::gather_rows(std::span<const float> block) {
  return gather(block, row_elements_);
}

}  // namespace atl::train
