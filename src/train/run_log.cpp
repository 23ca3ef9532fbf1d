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

}  // namespace atl::train
