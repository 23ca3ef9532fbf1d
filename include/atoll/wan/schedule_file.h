// The schedule file: a plain, line-oriented text format for a synchronization schedule over WAN
// sites, written by `atoll plan --schedule-out` and read by `atoll wan-sim` (and, later, by the
// local-SGD trainer, which averages within each round's cliques).
//
//     # comments and blank lines are ignored
//     atoll-wan-schedule 1                      first line: format name and version
//     name planned                              a word naming the schedule
//     sites TYO HKG SIN LAX CHI NYC LON AMS FRA the topology's site codes, in its order
//     payload_bytes 1e+08                       bytes each site contributes per exchange
//     rounds_to_consensus 2                     optional: rounds to reach the planner's ε
//     round                                     starts a round (one period of rounds follows;
//     clique multicast_fpga TYO HKG SIN         the schedule repeats it)
//     clique unicast LAX CHI NYC                 kind, then the member site codes
//     round
//     ring LON AMS FRA                          ring allreduce, members in ring order
//
// Kinds: `clique multicast_fpga` (one copy per link, FPGA aggregation at each member's edge),
// `clique unicast` (full mesh), `ring` (ring allreduce). In every round each site appears at most
// once; a site not listed idles that round (keeps its own model). Averaging semantics: every
// member of a group ends the round with the mean of the group's models.
#pragma once

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "atoll/wan/planner.h"
#include "atoll/wan/round_model.h"
#include "atoll/wan/topology.h"

namespace atl::wan {

// A malformed or inconsistent schedule file; the message names the file, line and problem.
class ScheduleFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ScheduleFile {
  std::string name = "schedule";
  std::vector<std::string> site_codes;  // the topology's codes, in its order
  double payload_bytes = 0;
  std::optional<std::size_t> rounds_to_consensus;
  std::vector<ResolvedRound> rounds;  // one period; site indices refer to site_codes
};

std::string format_schedule(const ScheduleFile& schedule);

// Parses the text; `source` names it in errors. Checks: header, every code listed in `sites`
// exactly once, groups of >= 2 known sites, no site twice in a round, at least one round,
// positive payload.
ScheduleFile parse_schedule(const std::string& text, const std::string& source = "schedule");

// The file for a planned schedule: its name, the topology's codes, its resolved period and rounds
// to consensus, and the payload it was planned for.
ScheduleFile to_schedule_file(const Topology& topology, const EvaluatedSchedule& schedule,
                              double payload_bytes);

// Atomic: writes FILE.tmp.<pid> then renames it over FILE. ScheduleFileError if it cannot.
void write_schedule_file(const std::filesystem::path& file, const ScheduleFile& schedule);
ScheduleFile read_schedule_file(const std::filesystem::path& file);

// The schedule's rounds with site indices mapped onto `topology` (codes looked up by name).
// ScheduleFileError naming a site the topology lacks.
std::vector<ResolvedRound> rounds_on(const ScheduleFile& schedule, const Topology& topology);

}  // namespace atl::wan
