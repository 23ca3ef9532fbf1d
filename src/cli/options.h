// The subcommands' options of build/atoll (src/cli/main.cpp): each function adds one subcommand to
// the app, its options writing into the caller's structures (which outlive the parse).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

// smpi_helpers.h (force-included in the SMPI build) defines exit() as a macro, which clashes with
// CLI11's App::exit; keep it out of CLI11's way.
#pragma push_macro("exit")
#undef exit
#include <CLI/CLI.hpp>
#pragma pop_macro("exit")

#include "atoll/cli/commands.h"
#include "atoll/train/trainer.h"

namespace atl::cli {

// `atoll bench sync`; --schemes and --values land in the strings (parsed after the parse).
CLI::App* add_bench_sync_command(CLI::App& app, BenchSyncOptions& bench, std::string& schemes,
                                 std::string& values);
// `atoll analyze`.
CLI::App* add_analyze_command(CLI::App& app, AnalyzeOptions& an, std::string& values);
// `atoll plan`, `atoll wan-sim` and `atoll wan-platform` (options_wan.cpp).
CLI::App* add_plan_command(CLI::App& app, PlanCommandOptions& plan);
CLI::App* add_wan_sim_command(CLI::App& app, WanSimOptions& w);
CLI::App* add_wan_platform_command(CLI::App& app, WanPlatformOptions& w);

// `atoll train` (options_train.cpp), with the app's --config file (config_file.h).
struct TrainCommand {
  CLI::App* cmd = nullptr;
  CLI::Option* sync_every = nullptr;
  // The options a --preset other than tiny sets unless they are given, and how each is copied.
  std::vector<std::pair<CLI::Option*, std::function<void(const train::TrainConfig&)>>>
      preset_fields;
};
TrainCommand add_train_command(CLI::App& app, train::TrainConfig& tc);
// After the parse, when `train` was given: the preset's values for the options not given, then
// the checks between options (CLI::ValidationError).
void finish_train_options(const TrainCommand& train, train::TrainConfig& tc);

}  // namespace atl::cli
