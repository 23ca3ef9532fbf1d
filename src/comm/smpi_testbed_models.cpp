// Simulation only (built into atoll-smpi): models of the namespace testbed (scripts/testbed) that a
// platform of separate machines lacks.
//
// 1. Shared CPU. The testbed's hosts are not separate machines. On the namespace testbed (scripts/testbed) N ranks share this machine's C
// cores, so a rank that computes while the others wait in MPI runs at a full core, and k ranks that
// compute at once each get min(1, C/k) of one. A fixed host speed of C/N charges every computation
// as if all ranks always computed together (docs/results/testbed.md).
//
// With ATOLL_SIM_SHARED_CORES=C, every simulated host switches power state whenever a computation
// starts or ends anywhere: with k computations running, every host runs at pstate k-1, whose speed
// the platform sets to min(1, C/k) of the first (scripts/make-platform --shared-cores C).
//
// 2. Token buckets. Linux tbf shapes each host's link with a bucket of B bytes refilled at the rate:
// after an idle moment up to B bytes leave at the unshaped (veth) speed, far above the rate; then
// the link runs at the rate. SimGrid's links have no such state, so with ATOLL_SIM_TBF=B,V every
// host gets two buckets (what it sends, what it receives: tbf sits on both ends of its veth), and
// each message, when it starts, is sped up by the bandwidth factor that makes its duration
// fast/V + (size - fast)/bandwidth, where fast = the tokens both buckets hold (at most its size);
// its size is then taken from both (a bucket may go below zero: bytes still queued). Concurrent
// messages draw on the same buckets in the order they start.
#include <xbt/config.hpp>
#include <simgrid/kernel/resource/NetworkModelIntf.hpp>
#include <simgrid/s4u.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "atoll/comm/smpi_testbed_models.h"

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


void install_shared_cpu(int rank, int ranks) {
  const char* env = std::getenv("ATOLL_SIM_SHARED_CORES");
  if (env == nullptr || *env == '\0') return;
  char* end = nullptr;
  const long cores = std::strtol(env, &end, 10);
  if (*end != '\0' || cores < 1)
    throw std::invalid_argument(std::string("ATOLL_SIM_SHARED_CORES must be a positive integer (got '") +
                                env + "')");
  auto* engine = simgrid::s4u::Engine::get_instance();
  auto hosts = engine->get_all_hosts();
  // Every host needs one power state per possible number of concurrent computations.
  for (auto* h : hosts) {
    if (h->get_pstate_count() < static_cast<unsigned long>(ranks)) {
      throw std::invalid_argument(
          "ATOLL_SIM_SHARED_CORES needs a platform whose hosts have one speed per number of "
          "concurrent computations (at least " +
          std::to_string(ranks) + "; host " + h->get_name() + " has " +
          std::to_string(h->get_pstate_count()) +
          "): make it with scripts/make-platform --shared-cores " + env);
    }
  }
  for (auto* h : hosts) {
    for (int k = 1; k <= ranks; ++k) {
      const double want = h->get_pstate_speed(0) * std::min(1.0, static_cast<double>(cores) / k);
      const double got = h->get_pstate_speed(static_cast<unsigned long>(k - 1));
      if (std::abs(got - want) > 0.01 * want) {
        throw std::invalid_argument(
            "ATOLL_SIM_SHARED_CORES=" + std::string(env) + ": host " + h->get_name() +
            "'s speed " + std::to_string(k) + " is " + std::to_string(got) + " flop/s, not " +
            std::to_string(want) + " (min(1, cores/k) of the first): make the platform with " +
            "scripts/make-platform --shared-cores " + env);
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


struct Bucket {
  double tokens = 0;
  double last = 0;
};

struct TokenBuckets {
  double burst = 0;     // bytes
  double unshaped = 0;  // bytes/s
  std::unordered_map<const simgrid::s4u::Host*, Bucket> out, in;

  double refill(Bucket& b, double now, double rate) const {
    b.tokens = std::min(burst, b.tokens + rate * (now - b.last));
    b.last = now;
    return b.tokens;
  }

  double factor(double size, const simgrid::s4u::Host* src, const simgrid::s4u::Host* dst,
                const std::vector<simgrid::s4u::Link*>& links) {
    if (size <= 0 || src == dst || links.empty()) return 1.0;
    double bandwidth = links.front()->get_bandwidth();
    for (const auto* l : links) bandwidth = std::min(bandwidth, l->get_bandwidth());
    const double now = simgrid::s4u::Engine::get_clock();
    auto& o = out.try_emplace(src, Bucket{burst, now}).first->second;
    auto& i = in.try_emplace(dst, Bucket{burst, now}).first->second;
    const double fast =
        std::clamp(std::min(refill(o, now, bandwidth), refill(i, now, bandwidth)), 0.0, size);
    o.tokens -= size;
    i.tokens -= size;
    return (size / bandwidth) / (fast / unshaped + (size - fast) / bandwidth);
  }
};

double parse_positive(const std::string& text, const char* what) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || !(v > 0) || !std::isfinite(v))
    throw std::invalid_argument(std::string("ATOLL_SIM_TBF: ") + what +
                                " must be a positive number (got '" + text + "')");
  return v;
}

void install_token_buckets(int rank) {
  const char* env = std::getenv("ATOLL_SIM_TBF");
  if (env == nullptr || *env == '\0') return;
  const std::string text(env);
  const auto comma = text.find(',');
  if (comma == std::string::npos)
    throw std::invalid_argument("ATOLL_SIM_TBF must be BURST_BYTES,UNSHAPED_BIT_S (got '" + text +
                                "')");
  auto model = std::make_shared<TokenBuckets>();
  model->burst = parse_positive(text.substr(0, comma), "BURST_BYTES");
  model->unshaped = parse_positive(text.substr(comma + 1), "UNSHAPED_BIT_S") / 8;
  if (!simgrid::config::is_default("network/bandwidth-factor") ||
      !simgrid::config::is_default("smpi/bw-factor"))
    throw std::invalid_argument(
        "ATOLL_SIM_TBF sets the bandwidth factor itself: leave network/bandwidth-factor "
        "(smpi/bw-factor) unset (scripts/simulate does when ATOLL_SIM_TBF is set)");
  if (rank != 0) return;  // one model for the whole process, as for the shared CPU
  simgrid::s4u::Engine::get_instance()->get_netzone_root()->get_network_model()->set_bw_factor_cb(
      [model](double size, const simgrid::s4u::Host* src, const simgrid::s4u::Host* dst,
              const std::vector<simgrid::s4u::Link*>& links,
              const std::unordered_set<simgrid::s4u::NetZone*>&) {
        return model->factor(size, src, dst, links);
      });
}

}  // namespace

void install_testbed_models(int rank, int ranks) {
  install_shared_cpu(rank, ranks);
  install_token_buckets(rank);
}

}  // namespace atl::comm
