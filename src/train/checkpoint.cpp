#include "checkpoint.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "atoll/util/files.h"

namespace atl::train {
namespace {

[[noreturn]] void fail(const std::filesystem::path& file, const std::string& what) {
  throw CheckpointError(fmt::format("checkpoint {}: {}", file.string(), what));
}

}  // namespace

std::filesystem::path checkpoint_dir(const std::filesystem::path& out) {
  return out / "checkpoints";
}

std::filesystem::path checkpoint_path(const std::filesystem::path& out, std::uint64_t step) {
  return checkpoint_dir(out) / fmt::format("step-{:08}.ckpt", step);
}

std::vector<std::filesystem::path> list_checkpoints(const std::filesystem::path& out) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  const auto dir = checkpoint_dir(out);
  if (!std::filesystem::is_directory(dir, ec)) return files;
  static const std::regex pattern(R"(step-\d{8}\.ckpt)");
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (std::regex_match(e.path().filename().string(), pattern)) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::uint64_t write_checkpoint(const std::filesystem::path& file, std::uint64_t step,
                               torch::serialize::OutputArchive& archive) {
  std::ostringstream payload;
  archive.save_to(payload);
  const std::string p = payload.str();
  const auto bytes = encode_checkpoint_container(
      step, {reinterpret_cast<const std::uint8_t*>(p.data()), p.size()});
  util::write_file_atomic(file, bytes);
  return util::load_pod<std::uint64_t>(bytes.data() + bytes.size() - 8);  // the trailer
}

std::uint64_t read_checkpoint(const std::filesystem::path& file,
                              torch::serialize::InputArchive& archive, std::uint64_t* checksum) {
  std::vector<std::uint8_t> b;
  try {
    b = util::read_file(file);
  } catch (const util::FileError& e) {
    throw CheckpointError(fmt::format("checkpoint {}", e.what()));
  }
  const auto c = parse_checkpoint_container(b, file);
  if (checksum) *checksum = util::load_pod<std::uint64_t>(b.data() + b.size() - 8);
  std::istringstream in(
      std::string(reinterpret_cast<const char*>(c.payload.data()), c.payload.size()));
  try {
    archive.load_from(in);
  } catch (const c10::Error& e) {
    fail(file, fmt::format("unreadable archive ({})", e.what_without_backtrace()));
  }
  return c.step;
}

std::filesystem::path rank_checkpoint_path(const std::filesystem::path& main_file, int rank) {
  auto p = main_file;
  p.replace_extension(fmt::format("rank-{:05}.ckpt", rank));
  return p;
}

void prune_checkpoints(const std::filesystem::path& out, int keep) {
  auto files = list_checkpoints(out);
  std::error_code ec;
  for (std::size_t i = 0; i + static_cast<std::size_t>(keep) < files.size(); ++i) {
    std::filesystem::remove(files[i], ec);
    // Its per-rank files (local SGD: step-N.rank-RRRRR.ckpt).
    const auto stem = files[i].stem().string() + ".rank-";
    for (const auto& e : std::filesystem::directory_iterator(files[i].parent_path(), ec)) {
      if (e.path().filename().string().rfind(stem, 0) == 0) std::filesystem::remove(e.path(), ec);
    }
  }
}

namespace {

torch::Tensor shape_tensor(const ModelShape& s) {
  return torch::tensor({static_cast<std::int64_t>(s.vocab), static_cast<std::int64_t>(s.d_embed),
                        static_cast<std::int64_t>(s.d_model), static_cast<std::int64_t>(s.layers),
                        static_cast<std::int64_t>(s.heads), static_cast<std::int64_t>(s.seq_len),
                        static_cast<std::int64_t>(s.head == "adaptive")});
}

std::string describe(const ModelShape& s, bool cutoffs_known) {
  std::string head = s.head + " head";
  if (s.head == "adaptive" && cutoffs_known) {
    head += fmt::format(" (cutoffs {})", fmt::join(s.cutoffs, ", "));
  }
  return fmt::format("vocab {}, d_embed {}, d_model {}, layers {}, heads {}, seq_len {}, {}",
                     s.vocab, s.d_embed, s.d_model, s.layers, s.heads, s.seq_len, head);
}

std::string plural(int n, const char* one) {
  return fmt::format("{} {}{}", n, one, n == 1 ? "" : "s");
}

}  // namespace

RunRecord run_record(const TrainConfig& c, int world, std::uint64_t vocabulary_fnv) {
  RunRecord r;
  r.shape = c.model;
  r.world = world;
  r.topk_residuals = c.topk > 0 ? world : 0;
  r.topk = c.topk;
  r.pseudo_topk_decay = c.pseudo_topk_decay;
  r.lr = c.lr;
  r.embed_lr = c.embed_lr;
  r.weight_decay = c.weight_decay;
  r.batch = c.batch;
  r.warmup_steps = c.warmup_steps;
  r.seed = c.seed;
  r.sync = c.sync;
  r.strategy = c.strategy;
  r.optimizer = c.optimizer;
  r.shard_group_size = c.shard_group_size;
  r.shard = c.shard;
  r.settings_known = true;
  r.vocabulary_fnv = vocabulary_fnv;
  return r;
}

void write_run_record(torch::serialize::OutputArchive& archive, const RunRecord& r) {
  archive.write("shape", shape_tensor(r.shape), true);
  const nlohmann::json j{{"cutoffs", r.shape.cutoffs},
                         {"world", r.world},
                         {"topk", r.topk},
                         {"topk_residual_files", r.topk_residuals},
                         {"pseudo_topk_decay", r.pseudo_topk_decay},
                         {"lr", r.lr},
                         {"embed_lr", r.embed_lr},
                         {"weight_decay", r.weight_decay},
                         {"batch", r.batch},
                         {"warmup_steps", r.warmup_steps},
                         {"seed", r.seed},
                         {"sync", r.sync},
                         {"strategy", r.strategy},
                         {"optimizer", r.optimizer},
                         {"shard_group_size", r.shard_group_size},
                         {"shard", r.shard},
                         {"sites", r.sites},
                         {"vocabulary_fnv", r.vocabulary_fnv}};
  archive.write("run", c10::IValue(j.dump()));
}

RunRecord read_run_record(const std::filesystem::path& file,
                          torch::serialize::InputArchive& archive) {
  RunRecord r;
  try {
    torch::Tensor shape;
    archive.read("shape", shape, true);
    if (shape.dim() != 1 || shape.numel() != 7 || shape.scalar_type() != torch::kLong) {
      fail(file, "its model shape record is malformed");
    }
    auto a = shape.accessor<std::int64_t, 1>();
    r.shape = ModelShape{static_cast<int>(a[0]),     static_cast<int>(a[1]),
                         static_cast<int>(a[2]),     static_cast<int>(a[3]),
                         static_cast<int>(a[4]),     static_cast<int>(a[5]),
                         a[6] ? "adaptive" : "full", {}};
    for (const auto& key : archive.keys()) {
      if (key.rfind("topk_residual_rank", 0) == 0) ++r.topk_residuals;
    }
    c10::IValue run;
    r.cutoffs_known = r.shape.head != "adaptive";
    if (archive.try_read("run", run) && run.isString()) {
      const auto j = nlohmann::json::parse(run.toStringRef());
      j.at("cutoffs").get_to(r.shape.cutoffs);
      r.cutoffs_known = true;
      r.world = j.at("world").get<int>();
      r.topk = j.at("topk").get<double>();
      // Since issue 14 every rank's residual is in its own file beside the main one.
      if (r.topk_residuals == 0) r.topk_residuals = j.value("topk_residual_files", 0);
      r.pseudo_topk_decay = j.value("pseudo_topk_decay", 1.0);
      r.lr = j.at("lr").get<double>();
      r.embed_lr = j.at("embed_lr").get<double>();
      r.weight_decay = j.at("weight_decay").get<double>();
      r.batch = j.at("batch").get<int>();
      r.warmup_steps = j.at("warmup_steps").get<int>();
      r.seed = j.at("seed").get<std::uint64_t>();
      r.sync = j.at("sync").get<std::string>();
      r.strategy = j.value("strategy", std::string("ddp"));
      r.optimizer = j.value("optimizer", std::string("adamw"));
      r.shard_group_size = j.value("shard_group_size", 1);
      r.shard = j.value("shard", true);
      r.sites = j.value("sites", std::string());
      r.vocabulary_fnv = j.at("vocabulary_fnv").get<std::uint64_t>();
      r.settings_known = true;
    } else if (r.topk_residuals > 0) {
      r.world = r.topk_residuals;  // one residual per rank
    }
  } catch (const c10::Error& e) {
    fail(file, fmt::format("unreadable run record ({})", e.what_without_backtrace()));
  } catch (const nlohmann::json::exception& e) {
    fail(file, fmt::format("unreadable run record ({})", e.what()));
  }
  return r;
}

bool elastic(const RunRecord& saved, const RunRecord& now) {
  return (now.strategy == "ddp" || now.strategy == "diloco") && saved.strategy == now.strategy &&
         saved.shard_group_size == 1 && now.shard_group_size == 1 &&
         (now.topk == 0 || saved.topk_residuals > 0);
}

ResumeCheck check_resume(const RunRecord& saved, const RunRecord& now) {
  ResumeCheck out;
  auto& refuse = out.refusals;
  ModelShape compared = now.shape;
  if (!saved.cutoffs_known) compared.cutoffs = saved.shape.cutoffs;  // not recorded: not compared
  const auto& a = saved.shape;
  const auto& b = compared;
  if (a.vocab != b.vocab || a.d_embed != b.d_embed || a.d_model != b.d_model ||
      a.layers != b.layers || a.heads != b.heads || a.seq_len != b.seq_len || a.head != b.head ||
      a.cutoffs != b.cutoffs) {
    refuse.push_back(fmt::format("holds a model of {}, this run asks for {}",
                                 describe(saved.shape, saved.cutoffs_known),
                                 describe(now.shape, true)));
  }
  const bool resized = saved.world > 0 && saved.world != now.world;
  if (resized && !elastic(saved, now)) {
    refuse.push_back(fmt::format(
        "was written by {}; this run has {}: an elastic resume (another world size) is "
        "supported for --strategy ddp and diloco without --shard-group-size (edit's penalty, "
        "aedit's rounds and the mesh's shards are laid out by worker): resume it with mpirun -np "
        "{}",
        plural(saved.world, "rank"), now.world, saved.world));
  } else if (resized) {
    out.notes.push_back(fmt::format(
        "elastic resume: written by {}, continued by {}: the data shards are reassigned, a step "
        "trains {} batches{}{}",
        plural(saved.world, "rank"), now.world, now.world,
        saved.topk_residuals > 0 ? "; the top-k error-feedback residuals are reset" : "",
        now.strategy == "diloco"
            ? "; workers beyond the old ranks start from the synchronized parameters, those "
              "beyond the new ranks lose their steps since the last synchronization"
            : ""));
  } else if (now.topk > 0 && saved.topk_residuals == 0) {
    refuse.push_back(fmt::format(
        "was written without --topk; this run uses --topk {} (its error-feedback residuals are "
        "missing: resume without --topk, or start a new run)",
        now.topk));
  }
  if (saved.strategy != now.strategy) {
    refuse.push_back(fmt::format(
        "was written by --strategy {}; this run uses --strategy {} (their states differ: resume "
        "with --strategy {}, or start a new run)",
        saved.strategy, now.strategy, saved.strategy));
  }
  if (saved.shard_group_size != now.shard_group_size ||
      (saved.shard_group_size > 1 && saved.shard != now.shard)) {
    const auto mesh = [](const RunRecord& r) {
      return fmt::format("--shard-group-size {}{}", r.shard_group_size,
                         r.shard_group_size > 1 && !r.shard ? " --no-shard" : "");
    };
    refuse.push_back(fmt::format(
        "was written with {}; this run uses {} (workers and their local-SGD state are laid out "
        "by the mesh: resume with {})",
        mesh(saved), mesh(now), mesh(saved)));
  }
  if (saved.sites != now.sites) {
    const auto what = [](const std::string& s) {
      return s.empty() ? std::string("without --topology") : "across sites (" + s + ")";
    };
    refuse.push_back(fmt::format(
        "was written {}; this run trains {} (the meetings so far, the sites' model clocks and an "
        "exchange in flight belong to the checkpoint's schedule: resume with the same "
        "--topology, --schedule, --fpga-memory, --egress-gbps, --ingress-gbps, --transport, "
        "--overlap-rounds, --overlap-land and --overlap-mix)",
        what(saved.sites), what(now.sites)));
  }
  if (saved.optimizer != now.optimizer) {
    refuse.push_back(fmt::format(
        "was written with --optimizer {}; this run uses --optimizer {} (the inner optimizer's "
        "state differs)",
        saved.optimizer, now.optimizer));
  }
  if (saved.vocabulary_fnv != 0 && saved.vocabulary_fnv != now.vocabulary_fnv &&
      saved.shape.vocab == now.shape.vocab) {
    refuse.push_back(
        "was trained on another vocabulary (its word list differs from the one this run built "
        "from its corpus), so its embedding rows would stand for other words");
  }
  if (!refuse.empty()) return out;

  if (saved.topk_residuals > 0 && now.topk == 0) {
    out.notes.push_back(
        fmt::format("its top-k error-feedback residuals{} are dropped: this run has no --topk",
                    saved.settings_known ? fmt::format(" (--topk {})", saved.topk) : ""));
  }
  if (!saved.settings_known) return out;
  auto changed = [&](const char* flag, const auto& was, const auto& is) {
    if (was != is) {
      out.notes.push_back(fmt::format("this run continues with {} {} (the checkpoint's run had {})",
                                      flag, is, was));
    }
  };
  if (saved.topk > 0 && now.topk > 0) changed("--topk", saved.topk, now.topk);
  changed("--batch", saved.batch, now.batch);
  changed("--seed", saved.seed, now.seed);
  changed("--lr", saved.lr, now.lr);
  changed("--embed-lr", saved.embed_lr, now.embed_lr);
  changed("--weight-decay", saved.weight_decay, now.weight_decay);
  changed("--warmup-steps", saved.warmup_steps, now.warmup_steps);
  changed("--sync", saved.sync, now.sync);
  changed("--pseudo-topk-decay", saved.pseudo_topk_decay, now.pseudo_topk_decay);
  return out;
}

}  // namespace atl::train
