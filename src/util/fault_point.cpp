#include "atoll/util/fault_point.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>

namespace atl::util {

namespace {

struct Armed {
  bool on = false;
  FaultSignal signal = FaultSignal::kill;
  std::string phase, who;
  int step = 0;
};
Armed g_armed;
std::atomic<int> g_step{0};

}  // namespace

void arm_fault_point(FaultSignal signal, std::string phase, int step, std::string who) {
  g_armed = Armed{true, signal, std::move(phase), std::move(who), step};
}

void set_fault_step(int step) { g_step.store(step); }

void fault_point(std::string_view phase) {
  if (!g_armed.on || phase != g_armed.phase || g_step.load() != g_armed.step) return;
  g_armed.on = false;  // once (a stopped process that is continued goes on)
  const bool kill = g_armed.signal == FaultSignal::kill;
  std::fprintf(stderr, "atoll: %s: --inject-fault %s at %s of step %d: raising %s\n",
               g_armed.who.c_str(), kill ? "kill" : "stop", g_armed.phase.c_str(), g_armed.step,
               kill ? "SIGKILL" : "SIGSTOP");
  std::fflush(stderr);
  std::raise(kill ? SIGKILL : SIGSTOP);
  // A frozen host never resumes; but mpirun's teardown sends SIGCONT before SIGTERM, and a rank
  // continued here would finish the work it froze in (kill_matrix saw rank 0, stopped before a
  // checkpoint's main file, write it during the teardown). Continued, it leaves at once.
  std::fprintf(stderr, "atoll: %s: continued after the injected SIGSTOP: exiting\n",
               g_armed.who.c_str());
  std::_Exit(1);
}

}  // namespace atl::util
