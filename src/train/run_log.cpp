#include "run_log.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "atoll/util/files.h"

namespace atl::train {

std::string format_duration(double s) {
  const auto t = static_cast<long>(std::max(0.0, s));
  return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
}

std::string format_bytes(double b) {
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.2f} MB", b / 1e6);
  return fmt::format("{:.1f} kB", b / 1e3);
}

std::string plot_loss(const std::filesystem::path& out) {
  std::ifstream in(out / "metrics.jsonl");
  std::ostringstream train, val;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    if (j.contains("loss")) train << j["step"] << ' ' << j["loss"] << '\n';
    if (j.contains("val_loss")) val << j["step"] << ' ' << j["val_loss"] << '\n';
  }
  util::write_file_atomic(out / "loss-train.dat", train.str());
  util::write_file_atomic(out / "loss-val.dat", val.str());
  const auto png = out / "loss.png";
  const std::string script = fmt::format(
      "set terminal pngcairo size 900,540 noenhanced\n"
      "set output '{0}'\nset xlabel 'step'\nset ylabel 'loss (nats/token)'\nset grid\n"
      "set title 'atoll train: training and validation loss'\n"
      "plot '{1}' using 1:2 with lines title 'training (mean over ranks)', "
      "'{2}' using 1:2 with linespoints title 'validation'\n",
      png.string(), (out / "loss-train.dat").string(), (out / "loss-val.dat").string());
  util::write_file_atomic(out / "loss.gnuplot", script);
  const std::string cmd = fmt::format(
      "gnuplot '{}' 2>/dev/null || gnuplot -e \"set terminal png\" '{}' >/dev/null "
      "2>&1",
      (out / "loss.gnuplot").string(), (out / "loss.gnuplot").string());
  if (std::system(cmd.c_str()) != 0 || !std::filesystem::exists(png)) {
    std::fprintf(stderr, "atoll: warning: gnuplot could not draw %s\n", png.c_str());
    return "";
  }
  return png.string();
}

void MetricsLog::open(const std::filesystem::path& out, int start_step) {
  if (out.empty()) return;
  std::string kept;
  if (start_step > 0) {
    std::ifstream old(out / "metrics.jsonl");
    std::string line;
    while (std::getline(old, line)) {
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.value("step", -1) <= start_step) kept += line + "\n";
    }
  }
  util::write_file_atomic(out / "metrics.jsonl", kept);
  file_.open(out / "metrics.jsonl", std::ios::app);
  if (!file_) throw util::FileError((out / "metrics.jsonl").string() + ": cannot append");
}

void MetricsLog::record(const nlohmann::json& line) {
  if (file_.is_open()) file_ << line.dump() << "\n" << std::flush;
}

void RunReport::add_step(double step_s, double comm_s, double emb_bytes) {
  sum_step_s += step_s;
  sum_comm_s += comm_s;
  embedding_bytes += emb_bytes;
  ++timed_steps;
}

void RunReport::print_progress(int step, double loss, const double* val_loss) const {
  const double mean_step = sum_step_s / timed_steps;
  fmt::print("step {}/{}  loss {:.4f}  {:.0f} tok/s  comm {:.0f}%  ETA {}{}\n", step, steps, loss,
             tokens_per_step / mean_step, 100.0 * sum_comm_s / sum_step_s,
             format_duration(mean_step * (steps - step)),
             val_loss
                 ? fmt::format("  | validation loss {:.4f}, perplexity {:.1f}", *val_loss, last_ppl)
                 : "");
  std::fflush(stdout);
}

void RunReport::print() const {
  fmt::print("\natoll train: report ({} ranks, sync {})\n", world, sync);
  if (have_first && evaluated) {
    fmt::print(
        "  validation perplexity: {:.1f} before training, {:.1f} after {} steps ({:.2f}x "
        "lower)\n",
        first_ppl, last_ppl, steps, first_ppl / last_ppl);
  } else if (evaluated) {
    fmt::print("  validation perplexity after {} steps: {:.1f}\n", steps, last_ppl);
  }
  fmt::print("  unigram baseline (training word frequencies): validation perplexity {:.1f}\n",
             unigram_ppl);
  if (world > 1) {
    fmt::print(
        "  embedding gradient synchronized by {}: {} sent by rank 0 over {} steps; dense "
        "allreduce would send {} ({:.1f}x more)\n",
        sync, format_bytes(embedding_bytes), timed_steps,
        format_bytes(dense_equivalent_bytes * timed_steps),
        embedding_bytes > 0 ? dense_equivalent_bytes * timed_steps / embedding_bytes : 0.0);
  }
  fmt::print("  throughput {:.0f} tokens/s, {:.0f}% of step time in communication\n",
             tokens_per_step * timed_steps / sum_step_s, 100.0 * sum_comm_s / sum_step_s);
}

}  // namespace atl::train
