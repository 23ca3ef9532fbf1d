#include "faults.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace atl::train {

namespace {

constexpr const char* kForms =
    "corrupt:RANK:STEP:SCALE, straggler:RANK:FACTOR, stall:PROB:SECONDS, stop:RANK:STEP, "
    "stop:RANK:PHASE:STEP, kill:RANK:PHASE:STEP or nan:RANK:STEP, comma-separated";

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> parts;
  std::size_t at = 0;
  while (true) {
    const auto next = s.find(sep, at);
    parts.push_back(s.substr(at, next == std::string::npos ? next : next - at));
    if (next == std::string::npos) return parts;
    at = next + 1;
  }
}

// One spec; `bad` builds the error for it.
struct SpecParser {
  const std::string& spec;
  std::invalid_argument bad(const std::string& why) const {
    return std::invalid_argument(
        fmt::format("--inject-fault '{}': {} (expected {})", spec, why, kForms));
  }
  // An int or a finite double, the whole of `text`.
  template <class T>
  T parse(const std::string& text, const char* what) const {
    std::size_t used = 0;
    T v{};
    try {
      if constexpr (std::is_same_v<T, int>) {
        v = std::stoi(text, &used);
      } else {
        v = std::stod(text, &used);
      }
    } catch (const std::logic_error&) {
      used = 0;
    }
    if (used == 0 || used != text.size()) {
      throw bad(fmt::format("{} '{}' is not a number", what, text));
    }
    if (!std::isfinite(static_cast<double>(v))) {
      throw bad(fmt::format("{} '{}' is not a finite number", what, text));
    }
    return v;
  }
};

// kill:RANK:PHASE:STEP, stop:RANK:PHASE:STEP or stop:RANK:STEP (after the backward pass).
ProcessFault parse_process_fault(const SpecParser& p, const std::vector<std::string>& parts) {
  ProcessFault f;
  f.signal = parts[0] == "kill" ? util::FaultSignal::kill : util::FaultSignal::stop;
  f.rank = p.parse<int>(parts[1], "RANK");
  if (f.rank < 0) throw p.bad("RANK must be a rank number");
  if (parts.size() == 4) {
    f.phase = parts[2];
    const auto& known = fault_phases();
    if (std::find(known.begin(), known.end(), f.phase) == known.end()) {
      throw p.bad(fmt::format("unknown PHASE '{}' (known: {})", f.phase, fmt::join(known, ", ")));
    }
  }
  f.step = p.parse<int>(parts.back(), "STEP");
  if (f.step < 1) throw p.bad("STEP must be a step >= 1");
  return f;
}

}  // namespace

const std::vector<std::string>& fault_phases() {
  static const std::vector<std::string> phases{// the trainer's
                                               "backward", "dense_sync", "outer_sync", "checkpoint",
                                               // the sparse schemes' (PhaseScope names)
                                               "partition", "push", "aggregate", "pull", "encode",
                                               "allgather", "sum", "densify", "allreduce", "fold",
                                               "unfold", "recursive_doubling"};
  return phases;
}

void Faults::arm(int rank) const {
  if (!process || process->rank != rank) return;
  util::arm_fault_point(process->signal, process->phase, process->step,
                        fmt::format("rank {}", rank));
}

int Faults::largest_rank() const {
  int r = -1;
  if (corrupt) r = std::max(r, corrupt->rank);
  if (straggler) r = std::max(r, straggler->rank);
  if (process) r = std::max(r, process->rank);
  if (nan) r = std::max(r, nan->rank);
  return r;
}

Faults parse_faults(const std::string& all) {
  Faults f;
  if (all.empty()) return f;
  for (const auto& spec : split(all, ',')) {
    const SpecParser p{spec};
    const auto parts = split(spec, ':');
    const auto& kind = parts[0];
    const bool process = kind == "kill" || kind == "stop";
    const std::size_t want = kind == "corrupt" || kind == "kill"                       ? 4
                             : kind == "straggler" || kind == "stall" || kind == "nan" ? 3
                             : kind == "stop" ? (parts.size() == 4 ? 4 : 3)
                                              : 0;
    if (want == 0 || parts.size() != want) throw p.bad("unknown form");
    if (process) {
      if (f.process) throw p.bad("one kill or stop per run");
      f.process = parse_process_fault(p, parts);
      continue;
    }
    if (kind == "corrupt") {
      if (f.corrupt) throw p.bad("corrupt given twice");
      FaultInjection c;
      c.rank = p.parse<int>(parts[1], "RANK");
      if (c.rank < 0) throw p.bad("RANK must be a rank number");
      c.step = p.parse<int>(parts[2], "STEP");
      if (c.step < 1) throw p.bad("STEP must be a step >= 1");
      c.scale = parts[3] == "nan" ? std::nan("") : p.parse<double>(parts[3], "SCALE");
      f.corrupt = c;
    } else if (kind == "nan") {
      if (f.nan) throw p.bad("nan given twice");
      Stop s;
      s.rank = p.parse<int>(parts[1], "RANK");
      if (s.rank < 0) throw p.bad("RANK must be a rank number");
      s.step = p.parse<int>(parts[2], "STEP");
      if (s.step < 1) throw p.bad("STEP must be a step >= 1");
      f.nan = s;
    } else if (kind == "straggler") {
      if (f.straggler) throw p.bad("straggler given twice");
      Straggler s;
      s.rank = p.parse<int>(parts[1], "RANK");
      if (s.rank < 0) throw p.bad("RANK must be a rank number");
      s.factor = p.parse<double>(parts[2], "FACTOR");
      if (s.factor < 1) throw p.bad("FACTOR must be at least 1 (how many times slower)");
      f.straggler = s;
    } else {
      if (f.stall) throw p.bad("stall given twice");
      Stall s;
      s.probability = p.parse<double>(parts[1], "PROB");
      if (s.probability < 0 || s.probability > 1) throw p.bad("PROB must be in [0, 1]");
      s.seconds = p.parse<double>(parts[2], "SECONDS");
      if (s.seconds <= 0) throw p.bad("SECONDS must be positive");
      f.stall = s;
    }
  }
  return f;
}

Slowdown::Slowdown(const Faults& faults, int rank, std::uint64_t seed) : rank_(rank), seed_(seed) {
  if (faults.straggler && faults.straggler->rank == rank) factor_ = faults.straggler->factor;
  if (faults.stall) stall_ = *faults.stall;
  if (faults.nan && faults.nan->rank == rank) nan_step_ = faults.nan->step;
}

double Slowdown::extra_seconds(int step, double model_s) const {
  double extra = (factor_ - 1) * model_s;
  if (stall_.probability > 0) {
    // SplitMix64 of (seed, rank, step): one uniform draw per rank and step, the same every run.
    std::uint64_t z = seed_ * 0x9e3779b97f4a7c15ull +
                      static_cast<std::uint64_t>(rank_) * 0xbf58476d1ce4e5b9ull +
                      static_cast<std::uint64_t>(step) * 0x94d049bb133111ebull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    const double u = static_cast<double>(z >> 11) * 0x1.0p-53;
    if (u < stall_.probability) extra += stall_.seconds;
  }
  return extra;
}

double Slowdown::apply(comm::Communicator& comm, int step, double model_s) const {
  util::fault_point("backward");  // --inject-fault kill/stop after the backward pass
  const double extra = extra_seconds(step, model_s);
  if (extra > 0) comm.delay(extra);
  return extra;
}

}  // namespace atl::train
