// `atoll analyze`: the characteristics of a gradient trace (all ranks of one step) or of a
// synthetic configuration. Runs on rank 0; other ranks of an mpirun job wait.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>
#include <nlohmann/json.hpp>

#include "atoll/cli/commands.h"
#include "atoll/sparse/characteristics.h"
#include "atoll/sparse/trace.h"

namespace atl::cli {

int analyze(comm::Communicator& comm, const AnalyzeOptions& o) {
  std::optional<std::string> problem;
  sparse::Characteristics c;
  std::string source;
  std::uint64_t step = 0;
  if (comm.rank() == 0) {
    try {
      std::vector<sparse::SparseGradient<std::uint64_t>> workers;
      if (!o.trace_dir.empty()) {
        const auto steps = sparse::trace_steps(o.trace_dir, 0);
        if (steps.empty()) throw UsageError("no trace files of rank 0 in " + o.trace_dir);
        step = o.trace_step >= 0 ? static_cast<std::uint64_t>(o.trace_step) : steps.front();
        if (std::find(steps.begin(), steps.end(), step) == steps.end()) {
          throw UsageError(fmt::format("no trace of step {} in {} (steps present: {})", step,
                                       o.trace_dir, sparse::describe_steps(steps)));
        }
        sparse::TraceHeader h;
        workers.push_back(
            sparse::read_trace<std::uint64_t>(sparse::trace_path(o.trace_dir, step, 0), &h));
        for (std::uint32_t r = 1; r < h.world; ++r) {
          workers.push_back(sparse::read_trace<std::uint64_t>(
              sparse::trace_path(o.trace_dir, step, static_cast<int>(r))));
        }
        source = o.trace_dir;
      } else {
        if (o.ranks < 1) throw UsageError(fmt::format("--ranks must be >= 1 (got {})", o.ranks));
        sparse::validate(o.generator);
        for (int r = 0; r < o.ranks; ++r) {
          workers.push_back(sparse::generate_gradient<std::uint64_t>(o.generator, r));
        }
        source = "synthetic";
      }
      c = sparse::characterize<std::uint64_t>(workers);
    } catch (const std::exception& e) {
      problem = e.what();
    }
  }
  comm.agree(problem);
  if (comm.rank() != 0) return 0;
  if (o.json) {
    nlohmann::json j{{"source", source},
                     {"workers", c.workers},
                     {"elements", c.elements},
                     {"density", c.density},
                     {"overlap", c.overlap},
                     {"densification", c.densification},
                     {"gamma_pow2", c.gamma_pow2},
                     {"skew", c.skew},
                     {"first_range_share", c.first_range_share}};
    if (!o.trace_dir.empty()) j["step"] = step;
    std::cout << j.dump() << std::endl;
  } else {
    std::cout << fmt::format("source          {}{}\n", source,
                             o.trace_dir.empty() ? "" : fmt::format(" (step {})", step));
    std::cout << fmt::format("workers         {}\nelements (M)    {}\n", c.workers, c.elements);
    std::cout << fmt::format("density         {:.4f}%\n", 100 * c.density);
    std::cout << fmt::format("overlap         {:.4f}  (mean over pairs of |I_a ∩ I_b| / min)\n",
                             c.overlap);
    std::cout << fmt::format("densification   {:.3f}  (γ_n, n = {})\n", c.densification, c.workers);
    std::string g;
    for (std::size_t i = 0; i < c.gamma_pow2.size(); ++i) {
      g += fmt::format("{}γ_{}={:.3f}", i ? " " : "", 1u << i, c.gamma_pow2[i]);
    }
    std::cout << fmt::format("γ by group      {}\n", g);
    std::cout << fmt::format(
        "skew            {:.3f}  (max of {} equal ranges / mean; first range "
        "holds {:.1f}% of non-zeros)\n",
        c.skew, c.workers, 100 * c.first_range_share);
  }
  return 0;
}

}  // namespace atl::cli
