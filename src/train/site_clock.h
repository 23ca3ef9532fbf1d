// The model clock of training across sites (docs/wan-train.md): one clock per site, advanced by
// local work (compute seconds over the site's speed), by its clique's meetings (each member leaves
// when the exchange's model says, from the members' arrivals: for most exchanges the latest
// arrival plus the clique's exchange time, for a ring each member at its own time,
// wan/ring_exits.h) and by ddp's per-step
// collectives (every site at the latest arrival plus their time). With a fixed compute time per
// step (--compute-s) every site's clock is a function of the configuration alone, so each rank
// keeps all sites' clocks and a meeting costs no message for the clock (under SMPI a clock
// collective across the WAN would itself take simulated time); with the measured compute time
// the members exchange their clocks (one small allreduce per meeting). Free of LibTorch.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/wan/round_model.h"

namespace atl::train {

class SiteClock {
 public:
  // speeds: every site's compute speed factor; compute_s: seconds per local step (0: measured).
  SiteClock(std::vector<double> speeds, std::size_t self, double compute_s);

  double now() const { return clocks_[self_]; }
  bool known_everywhere() const { return compute_s_ > 0; }

  // One step at every site (compute_s / speed), or at this one (measured_s / speed). A local step
  // (`local`) under aedit, where site j takes round_steps[j] local steps per round: for each of
  // this site's, site j's clock advances by round_steps[j]/round_steps[self] of its steps, so
  // that at every meeting it has advanced by its own round's compute.
  void local_step(double measured_s, bool local = false);
  void set_round_steps(const std::vector<std::int64_t>& round_steps);
  // When each member of clique c (round[c].sites, in that order) leaves, given when each arrived.
  using MemberExits =
      std::function<std::vector<double>(std::size_t c, const std::vector<double>& arrivals)>;
  // Every member of clique c leaves at the latest arrival plus exchange_s[c].
  static MemberExits together(std::vector<double> exchange_s);
  // The meetings of one round; `mine` this site's clique (−1: idle), `clique` its communicator
  // (used only with a measured clock, to learn the members' arrivals). Overlapped, a member's
  // exchange ends in the background and land() waits for it. Returns the end of this site's
  // exchange (now() if idle).
  double meet(const wan::ResolvedRound& round, const MemberExits& exits, int mine,
              comm::Communicator& clique, bool overlap);
  // Every site's clock waits for the end of its exchange in flight, if any.
  void land();
  // Whether this site's exchange in flight (if any) has ended by now on its clock; every site's
  // that has is no longer in flight (no clock moves).
  bool arrived() const { return clocks_[self_] >= in_flight_[self_]; }
  void land_arrived();
  // A collective over all sites taking `seconds`: every clock to the latest plus that.
  void all_meet(comm::Communicator& world, double seconds);

  // Every clock, then every exchange in flight (for checkpoints); restore() refuses a state of
  // another number of sites (std::invalid_argument).
  std::vector<double> state() const;
  void restore(const std::vector<double>& state);

 private:
  std::vector<double> clocks_, speeds_;
  std::vector<double> in_flight_;    // per site: the end of its overlapped exchange (< 0: none)
  std::vector<double> local_share_;  // per site: its local steps per one of this site's
  std::size_t self_;
  double compute_s_;
};

}  // namespace atl::train
