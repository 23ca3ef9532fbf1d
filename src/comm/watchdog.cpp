#include "atoll/comm/watchdog.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "atoll/comm/communicator.h"  // simulated()

namespace atl::comm {
namespace {

// The operation this rank is inside (one slot: atoll calls the communicator from one thread).
struct Slot {
  std::atomic<std::int64_t> since_ns{0};  // 0: not inside an operation
  std::atomic<const char*> operation{nullptr};
  std::atomic<int> rank{0}, size{0};
  std::atomic<bool> world{false};
};
Slot g_slot;
std::atomic<double> g_timeout{0};
std::once_flag g_started;
thread_local int t_depth = 0;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void expire(const char* op, int rank, int size, bool world, double waited,
                         double timeout) {
  const std::string where =
      world ? "the world communicator" : "a sub-communicator of " + std::to_string(size) + " ranks";
  std::fprintf(stderr,
               "atoll: rank %d: %s on %s has not completed after %.1f s (--comm-timeout %g): a "
               "peer is stopped, dead, unreachable or still busy (raise --comm-timeout if so; MPI "
               "does not say which peer for a blocking operation); ending the job with exit code "
               "%d\n",
               rank, op, where.c_str(), waited, timeout, kWatchdogExitCode);
  std::fflush(stderr);
  // No MPI call from this thread (MPI runs at MPI_THREAD_SINGLE, and the main thread is inside
  // MPI): the process exits, and mpirun ends the job when a rank exits without MPI_Finalize.
  std::_Exit(kWatchdogExitCode);
}

void watch() {
  for (;;) {
    const double timeout = g_timeout.load();
    const double nap = timeout > 0 ? std::clamp(timeout / 10, 0.01, 1.0) : 1.0;
    std::this_thread::sleep_for(std::chrono::duration<double>(nap));
    const auto since = g_slot.since_ns.load();
    if (timeout <= 0 || since == 0) continue;
    const char* op = g_slot.operation.load();
    const int rank = g_slot.rank.load(), size = g_slot.size.load();
    const bool world = g_slot.world.load();
    const double waited = static_cast<double>(now_ns() - since) / 1e9;
    // Still the same operation (the fields above belong to it) and over time.
    if (waited >= timeout && g_slot.since_ns.load() == since) {
      expire(op, rank, size, world, waited, timeout);
    }
  }
}

}  // namespace

void set_comm_timeout(double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) {
    throw std::invalid_argument("--comm-timeout " + std::to_string(seconds) +
                                " must be a finite number of seconds >= 0 (0: off)");
  }
  if (Communicator::simulated()) return;
  g_timeout.store(seconds);
  if (seconds > 0) std::call_once(g_started, [] { std::thread(watch).detach(); });
}

double comm_timeout() { return g_timeout.load(); }

WatchedCall::WatchedCall(const char* operation, int rank, int size, bool world) {
  if (g_timeout.load(std::memory_order_relaxed) <= 0) return;  // off (always under SMPI)
  counted_ = true;
  if (t_depth++ > 0) return;
  outermost_ = true;
  g_slot.operation.store(operation, std::memory_order_relaxed);
  g_slot.rank.store(rank, std::memory_order_relaxed);
  g_slot.size.store(size, std::memory_order_relaxed);
  g_slot.world.store(world, std::memory_order_relaxed);
  g_slot.since_ns.store(now_ns(), std::memory_order_release);
}

WatchedCall::~WatchedCall() {
  if (!counted_) return;
  --t_depth;
  if (outermost_) g_slot.since_ns.store(0, std::memory_order_release);
}

}  // namespace atl::comm
