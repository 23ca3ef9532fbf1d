#include "atoll/comm/parallel.h"

#include <fmt/format.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

#include "atoll/comm/cpu_costs.h"

namespace atl::comm {

unsigned machine_cores() { return std::max(1u, std::thread::hardware_concurrency()); }

unsigned resolve_threads(unsigned requested, int ranks_on_node) {
  const unsigned cores = machine_cores();
  if (requested > cores) {
    throw std::invalid_argument(fmt::format(
        "--threads {}: this machine has {} cores (threads per rank are at most its cores)",
        requested, cores));
  }
  if (requested > 0) return requested;
  return std::max(1u, cores / static_cast<unsigned>(std::max(1, ranks_on_node)));
}

namespace {
double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void run_parallel(Communicator& comm, unsigned threads, std::size_t tasks,
                  const std::function<void(std::size_t)>& task) {
  if (threads <= 1 || tasks <= 1) {
    for (std::size_t t = 0; t < tasks; ++t) task(t);
    return;
  }
  const double wall0 = wall_seconds(), cpu0 = thread_cpu_seconds();
  std::exception_ptr failure;
  std::mutex failure_mutex;
  const auto run = [&](std::size_t t) {
    try {
      task(t);
    } catch (...) {
      const std::lock_guard lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  };
#if defined(__SANITIZE_THREAD__)
  // ThreadSanitizer does not see libgomp's synchronisation (it is not instrumented): plain
  // threads here, so that what it reports are the tasks' own races.
  std::vector<std::thread> helpers;
  for (unsigned h = 1; h < std::min<std::size_t>(threads, tasks); ++h) {
    helpers.emplace_back([&, h] {
      for (std::size_t t = h; t < tasks; t += threads) run(t);
    });
  }
  for (std::size_t t = 0; t < tasks; t += threads) run(t);
  for (auto& h : helpers) h.join();
#else
  const auto count = static_cast<long>(tasks);
#pragma omp parallel for num_threads(threads) schedule(static, 1)
  for (long t = 0; t < count; ++t) run(static_cast<std::size_t>(t));
#endif
  const double wall = wall_seconds() - wall0, cpu = thread_cpu_seconds() - cpu0;
  const CpuCharging* charging = comm.cpu_charging();
  const bool table = charging != nullptr && charging->mode == CpuCharging::Mode::table;
  if (Communicator::simulated() && !table && wall > cpu) comm.delay(wall - cpu);
  if (failure) std::rethrow_exception(failure);
}

}  // namespace atl::comm
