// Simulation only (built into atoll-smpi): the shared-CPU model of the namespace testbed
// (scripts/testbed), whose hosts are not separate machines. N ranks share this machine's C cores:
// a rank that computes while the others wait in MPI gets a whole core, and k ranks that compute at
// once get min(1, C/k) of one each. A fixed host speed of C/N would charge every computation as if
// all ranks always computed together (docs/results/testbed.md).
//
// On a platform whose cluster has the property atoll_shared_cores=C (scripts/make-platform
// --shared-cores C), every simulated host changes power state whenever a computation starts or
// ends anywhere: while k computations run, every host runs at pstate k-1, whose speed the platform
// sets to min(1, C/k) of the first. Waiting in MPI costs no CPU (the measured ranks yield:
// mpi_yield_when_idle), and neither does the kernel's TCP work, which this model leaves out.
#include "atoll/comm/smpi_testbed_models.h"

#include <algorithm>
#include <cmath>
#include <memory>
#include <simgrid/s4u.hpp>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

namespace atl::comm {
namespace {

struct SharedCpu {
  std::vector<simgrid::s4u::Host*> hosts;
  std::unordered_set<const simgrid::s4u::Exec*> running;
  unsigned long states = 0;

  void apply() {
    const unsigned long k = running.size();
    const unsigned long state = k == 0 ? 0 : std::min(k - 1, states - 1);
    for (auto* h : hosts)
      if (h->get_pstate() != state) h->set_pstate(state);
  }
};

}  // namespace

void install_testbed_models(int rank, int ranks) {
  auto* engine = simgrid::s4u::Engine::get_instance();
  auto hosts = engine->get_all_hosts();
  const char* value = nullptr;
  for (const auto* h : hosts)
    if (const char* v = h->get_englobing_zone()->get_property("atoll_shared_cores")) value = v;
  if (value == nullptr) return;  // separate machines: each host keeps its own CPU
  const std::string text(value);
  const bool digits =
      !text.empty() && text.size() <= 4 &&
      std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  const long cores = digits ? std::stol(text) : 0;
  if (cores < 1)
    throw std::invalid_argument(
        "platform property atoll_shared_cores must be a positive integer (got '" + text + "')");
  // Every host needs one power state per possible number k of concurrent computations, at
  // min(1, cores/k) of the first.
  for (auto* h : hosts) {
    if (h->get_pstate_count() < static_cast<unsigned long>(ranks)) {
      throw std::invalid_argument(
          "platform property atoll_shared_cores needs hosts with one speed per number of "
          "concurrent computations (at least " +
          std::to_string(ranks) + "; host " + h->get_name() + " has " +
          std::to_string(h->get_pstate_count()) +
          "): make the platform with scripts/make-platform --shared-cores " + text);
    }
    for (int k = 1; k <= ranks; ++k) {
      const double want = h->get_pstate_speed(0) * std::min(1.0, static_cast<double>(cores) / k);
      const double got = h->get_pstate_speed(static_cast<unsigned long>(k - 1));
      if (std::abs(got - want) > 0.01 * want) {
        throw std::invalid_argument("atoll_shared_cores=" + text + ": host " + h->get_name() +
                                    "'s speed " + std::to_string(k) + " is " + std::to_string(got) +
                                    " flop/s, not " + std::to_string(want) +
                                    " (min(1, cores/k) of the first): make the platform with " +
                                    "scripts/make-platform --shared-cores " + text);
      }
    }
  }
  // The callbacks are process-wide; one rank installs them (all ranks share the engine).
  if (rank != 0) return;
  auto model = std::make_shared<SharedCpu>();
  model->hosts = std::move(hosts);
  model->states = static_cast<unsigned long>(ranks);
  simgrid::s4u::Exec::on_start_cb([model](const simgrid::s4u::Exec& e) {
    model->running.insert(&e);
    model->apply();
  });
  simgrid::s4u::Activity::on_completion_cb([model](const simgrid::s4u::Activity& a) {
    const auto* e = dynamic_cast<const simgrid::s4u::Exec*>(&a);
    if (e != nullptr && model->running.erase(e) > 0) model->apply();
  });
}

}  // namespace atl::comm
