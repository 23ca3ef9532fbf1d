// The options of `atoll bench sync` and `atoll analyze` (options.h).
#include <string>

#include "options.h"

namespace atl::cli {
namespace {

void add_generator_flags(CLI::App* cmd, atl::sparse::GeneratorOptions& g, std::string& values) {
  cmd->add_option("--elements", g.elements, "element count M of the gradient");
  cmd->add_option("--density", g.density, "share of non-zero elements per worker, in [0, 1]");
  cmd->add_option("--zipf", g.zipf_exponent, "Zipf exponent of index popularity (0 = uniform)");
  cmd->add_option("--seed", g.seed, "generator seed (each rank derives its own stream)");
  cmd->add_option("--values", values, "value distribution: normal | integer (exact sums)")
      ->check(CLI::IsMember({"normal", "integer"}));
}

}  // namespace

CLI::App* add_bench_sync_command(CLI::App& app, BenchSyncOptions& bench, std::string& schemes,
                                 std::string& values) {
  auto* bench_cmd = app.add_subcommand("bench", "benchmarks");
  bench_cmd->require_subcommand(1);
  auto* sync_cmd = bench_cmd->add_subcommand(
      "sync", "verify and time the synchronization schemes (run under mpirun or scripts/simulate)");
  sync_cmd->add_option("--schemes", schemes,
                       "comma-separated schemes or 'all': allreduce, agsparse, sparcml, "
                       "omnireduce, sparse_ps, zen_coo, zen, zen_ef, auto");
  add_generator_flags(sync_cmd, bench.generator, values);
  sync_cmd->add_option("--index-bits", bench.index_bits, "index width: 32 or 64");
  sync_cmd->add_option("--repeat", bench.repeat, "timed repetitions (median reported)");
  sync_cmd->add_option("--warmup", bench.warmup, "untimed repetitions first");
  sync_cmd->add_option("--trace", bench.trace_dir, "read gradients from this trace directory");
  sync_cmd->add_option("--step", bench.trace_step, "trace step to use (default: the first)");
  sync_cmd->add_option("--dump-trace", bench.dump_trace_dir,
                       "write each rank's gradient to this directory as a trace (step 0)");
  sync_cmd->add_flag("--verify", bench.verify, "check every result against the dense reference");
  sync_cmd->add_flag("--json", bench.json, "one JSON object per scheme per line");
  sync_cmd->add_flag("--breakdown", bench.breakdown,
                     "each phase's time beside the network-only time of its bytes (alpha-beta "
                     "probed on the links) and the total against that bound");
  sync_cmd->add_option("--inject-fault", bench.inject_fault,
                       "experiments: kill:RANK:PHASE:STEP or stop:RANK:PHASE:STEP makes RANK "
                       "raise SIGKILL or SIGSTOP at a scheme's PHASE (push, aggregate, pull, ...) "
                       "of timed repetition STEP");
  sync_cmd->add_option("--cpu-cost", bench.cpu_cost_file,
                       "simulation: charge the schemes' computation from this cpu cost table "
                       "(scripts/calibrate-cpu) instead of measuring it, so runs repeat exactly");
  sync_cmd
      ->add_option("--row-width", bench.row_width,
                   "the gradient as rows of W values (an embedding's rows: Zen sends one "
                   "index per row); M must be a multiple of W")
      ->check(CLI::PositiveNumber);
  sync_cmd->add_flag("--row-views", bench.row_views,
                     "with --row-width: Zen's variants leave the summed rows in the blocks they "
                     "were pulled in (no copy into the result), as the trainer has them");
  sync_cmd->add_flag("--consume", bench.consume,
                     "time each call until a consumer has read every non-zero of its result "
                     "(each (index, value) folded once: sync/entry_fold.h), for every scheme "
                     "alike; Zen's element path then folds its pull blocks where they arrived "
                     "instead of building the sorted result (phase \"consume\")");
  sync_cmd->add_option("--threads", bench.threads,
                       "worker threads per rank for Zen's decode (default: the node's cores "
                       "shared by the ranks on it; 1 under simulation); at most the machine's "
                       "cores, and under simulation each simulated host is taken to have them");
  sync_cmd
      ->add_option("--pull-chunks", bench.zen_pull_chunks,
                   "Zen's pull in at most this many pipelined chunks (default 8): each is one "
                   "collective of n - 1 messages per rank")
      ->check(CLI::Range(1, 64));
  sync_cmd->add_option("--pull-min-block", bench.zen_pull_min_block,
                       "fewer pull chunks where a server's average block would be under this "
                       "many bytes (default 32768; 0: always --pull-chunks)");
  sync_cmd->add_option("--zen-group", bench.zen_group,
                       "Zen's push and pull in two steps, between groups of G consecutive ranks "
                       "(a node's) and within them: (G - 1) + (n/G - 1) messages per rank "
                       "instead of n - 1, the push summed within the group, each pulled block "
                       "taken off the network once per group; G must divide the ranks; 0 "
                       "(default): the ranks per node on several nodes of as many consecutive "
                       "ranks, else flat (so under simulation); 1: flat");
  sync_cmd->add_flag_callback(
      "--zen-group-pull-only", [&bench] { bench.zen_group_push = false; },
      "with --zen-group: the pull alone in two steps, the push flat (one exchange with every "
      "rank)");
  sync_cmd->add_option("--cpu-cost-record", bench.cpu_cost_record,
                       "measure the schemes' computation per operation in the timed calls and "
                       "merge it into this cpu cost table (created if absent), refitted");
  return sync_cmd;
}

CLI::App* add_analyze_command(CLI::App& app, AnalyzeOptions& an, std::string& values) {
  auto* analyze_cmd = app.add_subcommand(
      "analyze", "density, overlap, densification and skew of a trace or a synthetic setup");
  analyze_cmd->add_option("--trace", an.trace_dir, "trace directory (all ranks of one step)");
  analyze_cmd->add_option("--step", an.trace_step, "trace step (default: the first)");
  analyze_cmd->add_option("--ranks", an.ranks, "synthetic: number of workers");
  add_generator_flags(analyze_cmd, an.generator, values);
  analyze_cmd->add_flag("--json", an.json, "print one JSON object");
  return analyze_cmd;
}

}  // namespace atl::cli
