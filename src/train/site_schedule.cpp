// SiteTraining's schedule (site_training.h): planned for the model's payload (the planner as a
// library call, on rank 0), all-to-all, or read from a file; checked (consensus, feasibility,
// --pseudo-topk's one clique), agreed by every site, and one communicator per round for this site's
// clique.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <numeric>
#include <stdexcept>

#include "atoll/wan/mixing.h"
#include "atoll/wan/planner.h"
#include "atoll/wan/schedule_file.h"
#include "site_training.h"

namespace atl::train {
namespace {

wan::Transport transport_of(const std::string& name) {
  if (name == "unicast") return wan::Transport::unicast;
  if (name == "multicast_fpga") return wan::Transport::multicast_fpga;
  return wan::Transport::best;
}

std::string site_list(const wan::Topology& t, const wan::Clique& c) {
  std::string s;
  for (auto i : c) s += (s.empty() ? "" : " ") + t.site(i).code;
  return s;
}

// The cliques of each round (the partitions the consensus check reads).
wan::Schedule partitions_of(const std::vector<wan::ResolvedRound>& rounds) {
  wan::Schedule partitions;
  for (const auto& round : rounds) {
    wan::Partition p;
    for (const auto& e : round) p.push_back(e.sites);
    partitions.push_back(p);
  }
  return partitions;
}

}  // namespace

// The planned schedule as a schedule file's text (wan/schedule_file.h): rank 0 plans, every site
// gets the text (the exhaustive search over nine sites takes seconds: once a job, not once a
// rank). Every rank calls it.
std::string SiteTraining::planned_schedule(comm::Communicator& comm) const {
  std::string text;
  std::optional<std::string> problem;
  if (comm.rank() == 0) {
    try {
      wan::PlanRequest request;
      request.payload_bytes = payload_bytes_;
      const auto plan = wan::best_plan(topology_, wan::plan_options(topology_, request));
      text = wan::format_schedule(wan::to_schedule_file(topology_, plan, payload_bytes_));
    } catch (const std::exception& e) {
      problem = fmt::format("--schedule planned: {}", e.what());
    }
  }
  comm.agree(problem);
  const auto all = comm.allgatherv<char>(std::span<const char>(text.data(), text.size()), nullptr);
  return std::string(all.begin(), all.end());  // rank 0's alone
}

void SiteTraining::build_schedule(const TrainConfig& cfg, comm::Communicator& comm) {
  std::optional<std::string> problem;
  const auto n = topology_.size();
  const bool planned = cfg.schedule == "planned";
  const auto planned_text = planned ? planned_schedule(comm) : std::string{};
  try {
    wan::PlanRequest request;
    request.payload_bytes = payload_bytes_;
    const auto options = wan::plan_options(topology_, request);
    round_options_ = options.round;
    // --pseudo-topk: the sparse schemes send point to point (unicast).
    const auto transport = sparse_ ? wan::Transport::unicast : transport_of(cfg.transport);
    wan::Schedule partitions;
    if (cfg.schedule == "planned" || cfg.schedule == "all-to-all") {
      schedule_name_ = cfg.schedule;
      if (planned) {  // its cliques, mapped onto this site's topology by their codes
        const auto file = wan::parse_schedule(planned_text, "rank 0's planned schedule");
        partitions = partitions_of(wan::rounds_on(file, topology_));
      } else {
        wan::Clique all(n);
        std::iota(all.begin(), all.end(), std::size_t{0});
        partitions = {{all}};
      }
      for (const auto& p : partitions)
        rounds_.push_back(wan::resolve(topology_, p, transport, round_options_));
    } else {  // a schedule file: its groups and transports
      const auto file = wan::read_schedule_file(cfg.schedule);
      if (file.name == "hierarchical") {
        throw std::invalid_argument(
            "a hierarchical schedule reduces to continent leaders and sends the result back; "
            "that is not clique averaging (its leaders' round is weighted by continent size), "
            "so local SGD cannot follow it");
      }
      schedule_name_ = file.name + " (" + cfg.schedule + ")";
      rounds_ = wan::rounds_on(file, topology_);
      partitions = partitions_of(rounds_);
    }
    if (wan::consensus_rate(partitions, n) > 1 - 1e-9) {
      throw std::invalid_argument(fmt::format(
          "schedule {} never averages every site with every other, directly or through others "
          "(its consensus rate is 1): the sites' models would never agree",
          schedule_name_));
    }
    for (const auto& round : rounds_)
      for (const auto& e : round)
        if (!std::isfinite(wan::exchange_time(topology_, e, round_options_))) {
          throw std::invalid_argument(fmt::format(
              "schedule {}: the {} clique {{{}}} is infeasible for a {:.0f}-byte payload (an "
              "FPGA's memory cannot hold one aggregation unit per stream)",
              schedule_name_, wan::to_string(e.kind), site_list(topology_, e.sites),
              payload_bytes_));
        }
    if (sparse_) {
      for (const auto& round : rounds_)
        if (round.size() != 1 || round[0].sites.size() != n) {
          throw std::invalid_argument(fmt::format(
              "--pseudo-topk needs a common anchor, every round one clique of all {} sites (a sum "
              "of sparse pseudo-gradients against differing anchors is not the cliques' mean); "
              "schedule {} has smaller cliques: use --schedule all-to-all, or more FPGA memory",
              n, schedule_name_));
        }
    }
  } catch (const std::exception& e) {
    problem = fmt::format("--schedule {}: {}", cfg.schedule, e.what());
  }
  comm.agree(problem);
  // Every site read --topology (and any schedule file) itself: from files that differ between
  // hosts the rounds could differ, and the cliques' communicators would not match.
  const auto mine = static_cast<std::uint64_t>(std::hash<std::string>{}(describe()));
  if (comm.allreduce_value(mine, comm::ReduceOp::min) !=
      comm.allreduce_value(mine, comm::ReduceOp::max)) {
    comm.agree(
        "the sites hold different schedules (each site reads --topology and any schedule "
        "file itself, and resolves rank 0's plan on them: every host must see the same files)");
  }
  for (const auto& round : rounds_) {
    int c = -1;
    cliques_.push_back(clique_comm(comm, round, c));
    clique_index_.push_back(c);
  }
}

comm::Communicator SiteTraining::clique_comm(comm::Communicator& comm,
                                             const wan::ResolvedRound& round, int& clique) {
  clique = -1;
  int key = 0;  // the member's place in the clique (a ring's order)
  for (std::size_t c = 0; c < round.size(); ++c) {
    const auto& s = round[c].sites;
    const auto at = std::find(s.begin(), s.end(), site_);
    if (at == s.end()) continue;
    clique = static_cast<int>(c);
    key = static_cast<int>(at - s.begin());
  }
  const int color = clique >= 0 ? clique : static_cast<int>(round.size()) + comm.rank();
  return comm.split(color, key);
}

std::string SiteTraining::describe() const {
  std::string s = fmt::format("schedule {}, {} round(s) per period, payload {:.1f} MB",
                              schedule_name_, rounds_.size(), payload_bytes_ / 1e6);
  for (std::size_t r = 0; r < rounds_.size(); ++r) {
    s += fmt::format("\n    round {}: {:.3f} s", r + 1,
                     wan::round_time(topology_, rounds_[r], round_options_));
    for (const auto& e : rounds_[r])
      s += fmt::format("  {} {{{}}}", wan::to_string(e.kind), site_list(topology_, e.sites));
  }
  return s;
}

std::string SiteTraining::fingerprint() const {
  // The defaults (landing at the meeting, a correction) say "1" alone, as before those choices.
  std::string overlap = overlap_ ? "1" : "0";
  if (overlap_ && land_at_arrival_) overlap += ", landing at arrival";
  if (overlap_ && mix_ >= 0) overlap += fmt::format(", mixed {}", mix_);
  return fmt::format(
      "schedule {}, {} round(s), rounds hash {:016x}, overlap rounds {}{}{}", schedule_name_,
      rounds_.size(), std::hash<std::string>{}(describe()), overlap,
      sparse_ ? ", sparse pseudo-gradients" : "",
      timed_ ? fmt::format(", aedit steps per round {}", fmt::join(round_steps_, " ")) : "");
}

}  // namespace atl::train
