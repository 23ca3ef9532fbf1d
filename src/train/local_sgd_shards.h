// How local SGD's state (θ̄, outer momentum, pseudo-gradient) is split over a worker's shard group
// under the 2-D mesh (mesh.h): every unit's range of the flat dense buffer is cut into S
// consecutive pieces, piece g kept by the group's rank g, and the embedding's rows into S
// consecutive blocks, block g kept by rank g. A rank's local buffers hold its pieces in unit
// order. Unsharded (no group), a rank's piece is the whole unit and its block every row. Private
// to src/train.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "atoll/comm/communicator.h"

namespace atl::train {

class StateShards {
 public:
  struct Range {
    std::size_t begin = 0, end = 0;
    std::size_t size() const { return end - begin; }
  };
  // `units`: each unit's range of the full flat dense buffer; `rows` × `width`: the embedding.
  // `group`: the shard group (null: unsharded).
  StateShards(std::vector<Range> units, std::int64_t rows, std::int64_t width,
              comm::Communicator* group);

  bool sharded() const { return group_ != nullptr; }
  int units() const { return static_cast<int>(full_.size()); }
  // Unit u's range of the full buffer, and this rank's piece of it (in the full buffer, and in
  // the local buffers).
  const Range& full(int unit) const { return full_[static_cast<std::size_t>(unit)]; }
  std::size_t piece_begin(int unit) const { return piece_begin_[static_cast<std::size_t>(unit)]; }
  const Range& local(int unit) const { return local_[static_cast<std::size_t>(unit)]; }
  std::size_t local_elements() const { return local_elements_; }
  // This rank's block of embedding rows: [row_begin(), row_begin() + rows()).
  std::int64_t row_begin() const { return row_begin_[rank_]; }
  std::int64_t rows() const { return row_count_[rank_]; }
  // The same for group rank `g` (the sharded optimizer writes every rank's share into the model).
  int group_size() const { return static_cast<int>(row_begin_.size()); }
  std::size_t piece_size(int unit, int g) const {
    return piece_counts_[static_cast<std::size_t>(unit)][static_cast<std::size_t>(g)];
  }
  std::size_t piece_begin(int unit, int g) const;
  std::size_t local_elements(int g) const;
  std::int64_t row_begin(int g) const { return row_begin_[static_cast<std::size_t>(g)]; }
  std::int64_t rows(int g) const { return row_count_[static_cast<std::size_t>(g)]; }

  // Element-wise sums over the group, added in rank order (the same bits on every rank).
  // Unsharded: `values` unchanged. Collective over the group.
  std::vector<double> sum_over_group(std::vector<double> values);
  // The whole embedding (rows × width, row-major) from every rank's block. Collective.
  std::vector<float> gather_rows(std::span<const float> block);

  // The sizes of n elements cut into `parts` consecutive pieces (the first n % parts one larger).
  static std::vector<std::size_t> split(std::size_t n, int parts);

 private:
  std::vector<float> gather(std::span<const float> mine, std::span<const std::size_t> counts);

  comm::Communicator* group_;
  std::size_t rank_ = 0;
  std::int64_t width_;
  std::vector<Range> full_, local_;
  std::vector<std::size_t> piece_begin_;
  std::vector<std::vector<std::size_t>> piece_counts_;  // per unit, per group rank
  std::size_t local_elements_ = 0;
  std::vector<std::int64_t> row_begin_, row_count_;
  std::vector<std::size_t> row_elements_;  // per group rank: rows × width
};

}  // namespace atl::train
