#include "atoll/wan/ring_exits.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace atl::wan {
namespace {

constexpr double kNever = std::numeric_limits<double>::infinity();
constexpr double kTimeResolution = 1e-10;  // seconds

// One block in flight from member i to member i + 1 (ring_exits.h).
struct Transfer {
  double start = kNever;  // when its bytes begin to flow (send posted, matched, latency elapsed)
  double left = 0;        // bytes still to flow
  double arrival = kNever;
};

class RingEvents {
 public:
  RingEvents(const Topology& t, const Clique& ring, double block, std::span<const double> entries)
      : k_(ring.size()),
        steps_(2 * (k_ - 1)),
        block_(block),
        entries_(entries),
        hops_(k_),
        transfers_(k_ * steps_) {
    for (std::size_t i = 0; i < k_; ++i) {
      const std::size_t a = ring[i], b = ring[(i + 1) % k_];
      hops_[i] = {t.latency_s(a, b),
                  std::min(t.site(a).egress_bytes_per_s, t.site(b).ingress_bytes_per_s)};
    }
    for (std::size_t i = 0; i < k_; ++i) post(i, 0, entries_[i]);
  }

  std::vector<double> run() {
    double now = *std::min_element(entries_.begin(), entries_.end());
    // Every event starts or ends a transfer: a bound on them turns a bug into an error, not a hang.
    std::size_t events = 0;
    for (std::size_t done = 0; done < transfers_.size(); ++events) {
      const double next = std::max(now, next_event(now));
      if (next == kNever || events > 4 * transfers_.size())
        throw std::logic_error("ring event model: stuck with transfers left");
      flow(now, next);
      now = next;
      done += complete(now);
    }
    std::vector<double> exits(k_);
    for (std::size_t i = 0; i < k_; ++i) {  // an eager send is done when posted
      exits[i] = at((i + k_ - 1) % k_, steps_ - 1).arrival;
      if (block_ > kEagerBytes) exits[i] = std::max(exits[i], at(i, steps_ - 1).arrival);
    }
    return exits;
  }

 private:
  struct Hop {
    double latency, bandwidth;
  };
  Transfer& at(std::size_t member, std::size_t step) { return transfers_[member * steps_ + step]; }
  bool flowing(const Transfer& x, double now) const {
    return x.start <= now && x.arrival == kNever;
  }

  // Member i posts step s's send at `posted`: it moves once the receiver has entered.
  void post(std::size_t i, std::size_t s, double posted) {
    const double matched = std::max(posted, entries_[(i + 1) % k_]);
    Transfer& x = at(i, s);
    x.start = matched + hops_[i].latency;
    x.left = block_;
  }

  std::size_t in_flight(std::size_t i, double now) {
    std::size_t m = 0;
    for (std::size_t s = 0; s < steps_; ++s) m += flowing(at(i, s), now) ? 1 : 0;
    return m;
  }

  // The next start or end of a transfer after `now` (ends at the current equal shares).
  double next_event(double now) {
    double next = kNever;
    for (std::size_t i = 0; i < k_; ++i) {
      const std::size_t m = in_flight(i, now);
      for (std::size_t s = 0; s < steps_; ++s) {
        const Transfer& x = at(i, s);
        if (x.arrival != kNever) continue;
        if (x.start > now) next = std::min(next, x.start);
        if (flowing(x, now))
          next = std::min(next, now + x.left * static_cast<double>(m) / hops_[i].bandwidth);
      }
    }
    return next;
  }

  void flow(double now, double next) {
    for (std::size_t i = 0; i < k_; ++i) {
      const std::size_t m = in_flight(i, now);
      if (m == 0) continue;
      const double bytes = (next - now) * hops_[i].bandwidth / static_cast<double>(m);
      for (std::size_t s = 0; s < steps_; ++s) {
        Transfer& x = at(i, s);
        if (flowing(x, now)) x.left = std::max(0.0, x.left - bytes);
      }
    }
  }

  // Transfers whose bytes have all flowed by `now` arrive (within 0.1 ns of their end: the time
  // steps would otherwise shrink below the clock's resolution); each lets its receiver post the
  // next step.
  std::size_t complete(double now) {
    std::vector<std::size_t> sharing(k_);
    for (std::size_t i = 0; i < k_; ++i) sharing[i] = in_flight(i, now);
    std::size_t done = 0;
    for (std::size_t i = 0; i < k_; ++i) {
      for (std::size_t s = 0; s < steps_; ++s) {
        Transfer& x = at(i, s);
        if (!flowing(x, now)) continue;
        if (x.left * static_cast<double>(sharing[i]) / hops_[i].bandwidth > kTimeResolution)
          continue;
        x.arrival = now;
        ++done;
        const std::size_t next = (i + 1) % k_;
        if (s + 1 < steps_) post(next, s + 1, std::max(entries_[next], now));
      }
    }
    return done;
  }

  std::size_t k_, steps_;
  double block_;
  std::span<const double> entries_;
  std::vector<Hop> hops_;
  std::vector<Transfer> transfers_;
};

}  // namespace

std::vector<double> ring_allreduce_exits(const Topology& topology, const Clique& ring,
                                         const RoundOptions& options,
                                         std::span<const double> entries) {
  if (entries.size() != ring.size()) {
    throw std::invalid_argument("ring of " + std::to_string(ring.size()) + " members, " +
                                std::to_string(entries.size()) + " entry times");
  }
  if (ring.size() < 2) return {entries.begin(), entries.end()};
  return RingEvents(topology, ring, options.payload_bytes / static_cast<double>(ring.size()),
                    entries)
      .run();
}

}  // namespace atl::wan
