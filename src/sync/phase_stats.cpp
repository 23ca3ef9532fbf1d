// median_phase_stats (scheme.h): pure, in a file of its own so that the unit tests link it
// without the communicator.
#include <algorithm>
#include <vector>

#include "atoll/sync/scheme.h"

namespace atl::sync {

std::vector<PhaseStats> median_phase_stats(const std::vector<std::vector<PhaseStats>>& calls) {
  std::vector<PhaseStats> out;
  for (const auto& call : calls) {
    for (const auto& p : call) {
      if (std::none_of(out.begin(), out.end(), [&](const auto& q) { return q.name == p.name; }))
        out.push_back(PhaseStats{p.name});
    }
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const std::size_t n = v.size();
    return n == 0 ? 0.0 : n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  };
  for (auto& phase : out) {
    std::vector<double> time, sent, received;
    for (const auto& call : calls) {
      PhaseStats sum{phase.name};  // a name recorded twice in a call adds up, as over ranks
      for (const auto& p : call) {
        if (p.name != phase.name) continue;
        sum.time_s += p.time_s;
        sum.bytes_sent += p.bytes_sent;
        sum.bytes_received += p.bytes_received;
      }
      time.push_back(sum.time_s);
      sent.push_back(static_cast<double>(sum.bytes_sent));
      received.push_back(static_cast<double>(sum.bytes_received));
    }
    phase.time_s = median(time);
    phase.bytes_sent = static_cast<std::uint64_t>(median(sent));
    phase.bytes_received = static_cast<std::uint64_t>(median(received));
  }
  return out;
}

}  // namespace atl::sync
