// build/atoll: the command-line front end. The same file builds build/atoll-smpi for smpirun.
// The subcommands' options are added by options_*.cpp (options.h); here: parsing, MPI and
// dispatch.
#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <iostream>

#include "atoll/cli/commands.h"
#include "atoll/comm/communicator.h"
#include "atoll/comm/watchdog.h"
#ifdef ATOLL_SMPI
#include "atoll/comm/smpi_testbed_models.h"
#endif
#include "atoll/train/trainer.h"
#include "atoll/util/allocator.h"
#include "options.h"  // CLI11, kept out of the SMPI build's exit() macro

namespace {

// --nonfinite fail: a gradient held a NaN or an infinity (distinct from usage errors' 2 and the
// watchdog's 86).
constexpr int kNonFiniteExit = 3;

// Unsigned options: CLI11 reads "-5" as 2^64 - 5. Refuse a sign instead, on every such option.
void refuse_negative_unsigned(CLI::App* app) {
  const CLI::Validator no_sign(
      [](std::string& v) -> std::string {
        const auto first = v.find_first_not_of(" \t");
        return first != std::string::npos && (v[first] == '-' || v[first] == '+')
                   ? "must be a whole number >= 0 (got '" + v + "')"
                   : "";
      },
      "");
  for (auto* opt : app->get_options()) {
    if (opt->get_type_name().rfind("UINT", 0) == 0) opt->check(no_sign);
  }
  for (auto* sub : app->get_subcommands({})) refuse_negative_unsigned(sub);
}
}  // namespace

int main(int argc, char** argv) {
  atl::util::keep_freed_memory();  // see allocator.h
  CLI::App app{"atoll: communication-efficient distributed training"};
  app.require_subcommand(1);

  atl::cli::BenchSyncOptions bench;
  std::string schemes = "all", bench_values = "normal";
  auto* sync_cmd = atl::cli::add_bench_sync_command(app, bench, schemes, bench_values);
  atl::cli::AnalyzeOptions an;
  std::string analyze_values = "normal";
  auto* analyze_cmd = atl::cli::add_analyze_command(app, an, analyze_values);
  atl::cli::PlanCommandOptions plan_options;
  auto* plan_cmd = atl::cli::add_plan_command(app, plan_options);
  atl::cli::WanSimOptions wan_sim_options;
  auto* wan_sim_cmd = atl::cli::add_wan_sim_command(app, wan_sim_options);
  atl::cli::WanPlatformOptions wan_platform_options;
  auto* wan_platform_cmd = atl::cli::add_wan_platform_command(app, wan_platform_options);
  // atoll train: every option starts from the tiny preset; --preset small replaces the model
  // shape, batch and steps unless they are given explicitly (by flag or config file).
  atl::train::TrainConfig tc = atl::train::preset_config("tiny");
  const auto train = atl::cli::add_train_command(app, tc);
  auto* train_cmd = train.cmd;

  // The collective watchdog (atoll/comm/watchdog.h) of bench sync and train.
  double comm_timeout = atl::comm::kDefaultCommTimeout;
  for (auto* cmd : {sync_cmd, train_cmd}) {
    cmd->add_option("--comm-timeout", comm_timeout,
                    "abort the job when one communicator operation takes longer than this many "
                    "seconds: a peer stopped, dead or unreachable (0: off; off under SMPI)");
  }

  refuse_negative_unsigned(&app);
  try {
    app.parse(argc, argv);
    if (!(comm_timeout >= 0) || !std::isfinite(comm_timeout)) {
      throw CLI::ValidationError(
          fmt::format("--comm-timeout {} must be a number of seconds >= 0 (0: off)", comm_timeout));
    }
    atl::cli::finish_train_options(train, tc);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return (app.exit)(e);  // --help
    // Before MPI starts: name the launcher's rank so a user sees that every rank refused.
    const char* r = std::getenv("OMPI_COMM_WORLD_RANK");
    std::cerr << fmt::format("atoll: error: rank {}: {}\n", r ? r : "0", e.what());
    return 2;  // a usage error, as the checks after MPI starts return (not CLI11's own codes)
  } catch (const std::exception& e) {  // e.g. an unknown preset
    std::cerr << fmt::format("atoll: error: {}\n", e.what());
    return 2;
  }

  atl::comm::MpiRuntime runtime(&argc, &argv);
  auto comm = atl::comm::Communicator::world();
  try {
#ifdef ATOLL_SMPI
    try {  // every rank checks the same platform, so every rank refuses alike
      atl::comm::install_testbed_models(comm.rank(), comm.size());
    } catch (const std::invalid_argument& e) {
      throw atl::cli::UsageError(e.what());
    }
    comm.barrier();  // rank 0 installs the models before any rank computes
#endif
    if (sync_cmd->parsed() || train_cmd->parsed()) atl::comm::set_comm_timeout(comm_timeout);
    if (sync_cmd->parsed()) {
      bench.schemes.clear();
      std::string item;
      for (char ch : schemes + ",") {
        if (ch == ',') {
          if (!item.empty()) bench.schemes.push_back(item);
          item.clear();
        } else if (ch != ' ') {
          item += ch;
        }
      }
      bench.generator.values = bench_values == "integer" ? atl::sparse::ValueKind::integer
                                                         : atl::sparse::ValueKind::normal;
      return atl::cli::bench_sync(comm, bench);
    }
    if (plan_cmd->parsed()) return atl::cli::plan(comm, plan_options);
    if (train_cmd->parsed()) return atl::train::train(comm, tc);
    if (wan_sim_cmd->parsed()) return atl::cli::wan_sim(comm, wan_sim_options);
    if (wan_platform_cmd->parsed()) return atl::cli::wan_platform(comm, wan_platform_options);
    if (analyze_cmd->parsed()) {
      an.generator.values = analyze_values == "integer" ? atl::sparse::ValueKind::integer
                                                        : atl::sparse::ValueKind::normal;
      return atl::cli::analyze(comm, an);
    }
  } catch (const atl::cli::UsageError& e) {
    std::cerr << fmt::format("atoll: error: rank {}: {}\n", comm.rank(), e.what());
    return 2;
  } catch (const atl::train::NonFiniteGradientError& e) {  // --nonfinite fail
    std::cerr << fmt::format("atoll: error: rank {}: {}\n", comm.rank(), e.what());
    if (!e.agreed()) atl::comm::MpiRuntime::abort_job(kNonFiniteExit);
    return kNonFiniteExit;
  } catch (const atl::comm::CollectiveError& e) {
    std::cerr << fmt::format("atoll: error (rank {} reporting): {}\n", comm.rank(), e.what());
    return 2;
  } catch (const std::exception& e) {
    // Not agreed across ranks: this rank cannot know whether its peers will reach the next
    // collective, so end the whole job rather than leave them waiting.
    std::cerr << fmt::format("atoll: fatal: rank {}: {}\n", comm.rank(), e.what());
    atl::comm::MpiRuntime::abort_job(1);
  }
  return 0;
}
