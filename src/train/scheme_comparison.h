// Benchmark mode of `atoll train --compare-schemes`: every step the same embedding gradient also
// goes through each compared scheme, timed (sync + row extraction) and checked against the
// training scheme's rows, so schemes are compared under the same machine speed. The order rotates
// every step so that no scheme always meets warm (or cold) caches. Free of LibTorch. Private to
// src/train.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/sync/scheme.h"
#include "embedding_rows.h"

namespace atl::train {

template <class Index>
class SchemeComparison {
 public:
  explicit SchemeComparison(const std::vector<std::string>& names);
  bool active() const { return !compared_.empty(); }
  std::size_t size() const { return compared_.size(); }
  // How many compared schemes run before the training scheme at `step` (rotates with the step).
  std::size_t run_before(int step) const;

  // Runs compared scheme `c` on this step's gradient (collective: a barrier, then the scheme);
  // returns the seconds spent, barrier included (left out of the step's time by the caller).
  double run(comm::Communicator& comm, std::size_t c, const sparse::SparseGradient<Index>& local,
             std::int64_t E);
  // After all ran: each compared scheme's rows against the training scheme's. Equal rows; values
  // equal up to summation order: within 1e-5 of the row's largest magnitude (an element-relative
  // test fails on sums that cancel to nearly zero).
  void check_rows(const RowGradient& training_rows, std::int64_t E);
  // The step's time without the training scheme's sync + rows, and that sync + rows.
  void record_step(double base_s, double training_sync_rows_s);

  // After the loop (collective: the verified flags over ranks): rank 0 prints the same-step table
  // and writes out/compare.jsonl. Needs more than two steps (the first two are warm-up).
  void report(comm::Communicator& comm, const std::string& training_scheme, double tokens_per_step,
              const std::filesystem::path& out);

 private:
  struct Compared {
    std::string name;
    std::unique_ptr<sync::SyncScheme> scheme;
    std::vector<double> sync_rows_s;
    RowGradient rows;  // this step's
    bool verified = true;
  };
  std::vector<Compared> compared_;
  sync::SyncResult<Index> result_;
  std::vector<double> base_s_, training_sync_rows_s_;
};

}  // namespace atl::train
