// The run log of `atoll train` on rank 0: metrics.jsonl (one object per step; on resume the lines
// after the checkpoint are dropped), progress lines, the final report and the loss plot. Free of
// LibTorch. Private to src/train.
#pragma once

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace atl::train {

std::string format_duration(double seconds);  // H:MM:SS
std::string format_bytes(double bytes);       // "1.23 MB"

// loss.png from metrics.jsonl with gnuplot; returns the path, or "" with a warning on stderr.
std::string plot_loss(const std::filesystem::path& out);

// What the progress lines and the final report of rank 0 say: running totals of the step loop.
struct RunReport {
  int world = 1, steps = 0;
  std::string sync;
  double tokens_per_step = 0, dense_equivalent_bytes = 0;  // per step: dense allreduce's bytes
  double sum_step_s = 0, sum_comm_s = 0, embedding_bytes = 0;
  int timed_steps = 0;
  bool have_first = false, evaluated = false;
  double first_ppl = 0, last_ppl = 0, unigram_ppl = 0;

  void add_step(double step_s, double comm_s, double emb_bytes);
  // "step 10/300  loss ...  tok/s  comm %  ETA" (+ the validation result when given).
  void print_progress(int step, double loss, const double* val_loss) const;
  // The report at the end (stdout).
  void print() const;
};

class MetricsLog {
 public:
  // Opens out/metrics.jsonl for appending (nothing when `out` is empty), keeping only the lines
  // of steps <= start_step (a resumed run rewrites what followed its checkpoint). Throws
  // util::FileError when it cannot write.
  void open(const std::filesystem::path& out, int start_step);
  bool is_open() const { return file_.is_open(); }
  void record(const nlohmann::json& line);
  void close() { file_.close(); }

 private:
  std::ofstream file_;
};

}  // namespace atl::train
