// The data-parallel trainer: forward/backward with LibTorch on every rank, the embedding's sparse
// gradient summed by a sparse scheme, dense gradients by bucketed allreduce (or top-k + error
// feedback through the sparse scheme), then identical optimizer steps on every rank.
#include "atoll/train/trainer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "atoll/sparse/trace.h"
#include "atoll/sync/scheme.h"
#include "atoll/train/corpus.h"
#include "atoll/util/files.h"
#include "checkpoint.h"
#include "model.h"

namespace atl::train {

using comm::Communicator;
using comm::ReduceOp;

TrainConfig preset_config(const std::string& preset) {
  TrainConfig c;
  c.preset = preset;
  if (preset == "tiny") {
    // Fast on 2 cores: the demo and the tests.
    c.model = ModelShape{16384, 64, 64, 2, 4, 32, "full", {}};
    c.batch = 16;
    c.steps = 300;
  } else if (preset == "small") {
    // Embedding-heavy, the shape of the Zen paper's LSTM language model: a 32k-word vocabulary
    // embedded in 1024 dimensions (33.5 M parameters) projected to a 128-wide transformer; an
    // adaptive softmax keeps the output layer small (so the embedding dominates the parameters).
    c.model = ModelShape{32768, 1024, 128, 2, 4, 32, "adaptive", {2000, 10000}};
    c.batch = 8;
    c.steps = 2000;
  } else {
    throw std::invalid_argument(fmt::format("unknown preset '{}' (valid: tiny, small)", preset));
  }
  return c;
}

// Messages name the flags (config-file keys are the same names).
std::optional<std::string> check_config(const TrainConfig& c) {
  const auto& m = c.model;
  if (m.vocab < 3) return fmt::format("--vocab {} must be at least 3", m.vocab);
  if (m.d_embed < 1) return fmt::format("--d-embed {} must be positive", m.d_embed);
  if (m.d_model < 1) return fmt::format("--d-model {} must be positive", m.d_model);
  if (m.heads < 1 || m.d_model % m.heads != 0) {
    return fmt::format("--d-model {} is not divisible by --heads {}", m.d_model, m.heads);
  }
  if (m.layers < 0) return fmt::format("--layers {} is negative", m.layers);
  if (m.seq_len < 1) return fmt::format("--seq-len {} must be positive", m.seq_len);
  if (!(c.sim_compute_s >= 0) || !std::isfinite(c.sim_compute_s)) {
    return fmt::format("--sim-compute-s {} must be a finite number >= 0", c.sim_compute_s);
  }
  if (c.sim_compute_s > 0 && !Communicator::simulated()) {
    return "--sim-compute-s applies only under simulation (scripts/simulate ... -- train); under "
           "mpirun the compute is real";
  }
  if (m.head != "full" && m.head != "adaptive") {
    return fmt::format("--head '{}' is not full or adaptive", m.head);
  }
  if (m.head == "adaptive") {
    if (m.cutoffs.empty()) return "--head adaptive needs --cutoffs";
    std::int64_t prev = 0;
    for (auto cut : m.cutoffs) {
      if (cut <= prev || cut >= m.vocab) {
        return fmt::format("--cutoffs must ascend within (0, --vocab {}), got {}", m.vocab, cut);
      }
      prev = cut;
    }
  }
  if (c.batch < 1) return fmt::format("--batch {} must be positive", c.batch);
  if (c.steps < 0) return fmt::format("--steps {} is negative", c.steps);
  if (!(c.lr > 0)) return fmt::format("--lr {} must be positive", c.lr);
  if (!(c.embed_lr > 0)) return fmt::format("--embed-lr {} must be positive", c.embed_lr);
  if (!(c.weight_decay >= 0)) return fmt::format("--weight-decay {} is negative", c.weight_decay);
  if (c.warmup_steps < 0) return fmt::format("--warmup-steps {} is negative", c.warmup_steps);
  if (!(c.topk >= 0 && c.topk < 1)) return fmt::format("--topk {} is not in [0, 1)", c.topk);
  if (c.bucket_bytes < 4) {
    return fmt::format("--bucket-bytes {} must hold at least one float (4 bytes)", c.bucket_bytes);
  }
  if (c.eval_every < 0) return fmt::format("--eval-every {} is negative", c.eval_every);
  if (c.eval_windows < 1)
    return fmt::format("--eval-windows {} must be at least 1", c.eval_windows);
  if (c.log_every < 1) return fmt::format("--log-every {} must be positive", c.log_every);
  if (c.checkpoint_every < 0) {
    return fmt::format("--checkpoint-every {} is negative", c.checkpoint_every);
  }
  if (c.keep_checkpoints < 1) {
    return fmt::format("--keep-checkpoints {} must be at least 1", c.keep_checkpoints);
  }
  if (c.dump_grads_steps < 0) {
    return fmt::format("--dump-grads-steps {} is negative", c.dump_grads_steps);
  }
  if ((c.resume || !c.resume_from.empty() || c.checkpoint_every > 0) && c.out.empty()) {
    return "--checkpoint-every, --resume and --resume-from need --out DIR";
  }
  if (c.resume && !c.resume_from.empty()) return "--resume and --resume-from exclude each other";
  const auto& names = sync::scheme_names();
  auto valid = [&] {
    std::string v;
    for (const auto& n : names) v += (v.empty() ? "" : ", ") + n;
    return v;
  };
  auto known = [&](const std::string& n) {
    return std::find(names.begin(), names.end(), n) != names.end();
  };
  if (!known(c.sync))
    return fmt::format("--sync: unknown scheme '{}' (valid: {})", c.sync, valid());
  for (const auto& n : c.compare_schemes) {
    if (!known(n)) {
      return fmt::format("--compare-schemes: unknown scheme '{}' (valid: {})", n, valid());
    }
  }
  return std::nullopt;
}

namespace {

// Runs `f` on this rank; any exception becomes the same CollectiveError on every rank. LibTorch's
// own errors lose their C++ stack trace (c10::Error::what() carries one): the message is for users.
template <class F>
void agreed(Communicator& comm, F&& f) {
  std::optional<std::string> problem;
  try {
    f();
  } catch (const c10::Error& e) {
    problem = e.what_without_backtrace();
  } catch (const std::exception& e) {
    problem = e.what();
  }
  comm.agree(problem);
}

// Every rank must run the same number of steps, evaluations, checkpoints and compared schemes, so
// every rank must have the same settings: ranks started with different ones (an MPMD launch, a
// config file that differs between hosts) stop here with an error naming the first difference,
// instead of running different sequences of collectives (a hang). Paths are left out: a host may
// name its own copy of the corpus or output directory.
void agree_settings(Communicator& comm, const TrainConfig& c) {
  const auto& m = c.model;
  const nlohmann::json mine{{"preset", c.preset},
                            {"vocab", m.vocab},
                            {"d-embed", m.d_embed},
                            {"d-model", m.d_model},
                            {"layers", m.layers},
                            {"heads", m.heads},
                            {"seq-len", m.seq_len},
                            {"head", m.head},
                            {"cutoffs", m.cutoffs},
                            {"batch", c.batch},
                            {"steps", c.steps},
                            {"seed", c.seed},
                            {"lr", c.lr},
                            {"embed-lr", c.embed_lr},
                            {"weight-decay", c.weight_decay},
                            {"warmup-steps", c.warmup_steps},
                            {"sync", c.sync},
                            {"topk", c.topk},
                            {"bucket-bytes", c.bucket_bytes},
                            {"eval-every", c.eval_every},
                            {"eval-windows", c.eval_windows},
                            {"log-every", c.log_every},
                            {"out", !c.out.empty()},
                            {"checkpoint-every", c.checkpoint_every},
                            {"keep-checkpoints", c.keep_checkpoints},
                            {"resume", c.resume || !c.resume_from.empty()},
                            {"dump-grads", !c.dump_grads.empty()},
                            {"dump-grads-steps", c.dump_grads_steps},
                            {"compare-schemes", c.compare_schemes},
                            {"sim-compute-s", c.sim_compute_s}};
  std::string text = mine.dump();
  std::uint64_t length = text.size();
  comm.broadcast(std::span<std::uint64_t>(&length, 1), 0);
  std::string leader(length, '\0');
  if (comm.rank() == 0) leader = text;
  comm.broadcast(std::span<char>(leader.data(), leader.size()), 0);
  std::optional<std::string> problem;
  if (leader != text) {
    const auto theirs = nlohmann::json::parse(leader, nullptr, false);
    for (const auto& [key, value] : mine.items()) {
      if (theirs.is_discarded() || !theirs.contains(key) || theirs[key] != value) {
        problem = fmt::format(
            "this rank's settings differ from rank 0's: --{} {} here, {} on rank 0 (every rank "
            "must be started with the same options)",
            key, value.dump(),
            theirs.is_discarded() ? "?" : theirs.value(key, nlohmann::json()).dump());
        break;
      }
    }
    if (!problem) problem = "this rank's settings differ from rank 0's";
  }
  comm.agree(problem);
}

double learning_rate(const TrainConfig& c, double peak, int step) {
  if (c.warmup_steps > 0 && step <= c.warmup_steps) return peak * step / c.warmup_steps;
  const double span = std::max(1, c.steps - c.warmup_steps);
  const double progress = std::min(1.0, (step - c.warmup_steps) / span);
  return peak * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * progress)));
}

torch::Tensor to_tensor(const std::vector<std::int64_t>& tokens, int seq_len) {
  const auto rows = static_cast<std::int64_t>(tokens.size()) / (seq_len + 1);
  return torch::from_blob(const_cast<std::int64_t*>(tokens.data()), {rows, seq_len + 1},
                          torch::kLong)
      .clone();
}

// The embedding's aggregated gradient as touched rows and their values (rows × d_embed).
struct RowGradient {
  std::vector<std::int64_t> rows;
  std::vector<float> values;
};

// Embedding gradient (LibTorch sparse COO over rows) -> element-level COO over M = vocab × E.
template <class Index>
sparse::SparseGradient<Index> embedding_gradient(const torch::Tensor& weight) {
  const auto V = weight.size(0), E = weight.size(1);
  sparse::SparseGradient<Index> g;
  g.elements = static_cast<std::uint64_t>(V * E);
  const auto& grad = weight.grad();
  if (!grad.defined()) return g;
  auto coalesced = grad.coalesce();
  auto rows = coalesced._indices()[0].contiguous();
  auto values = coalesced._values().contiguous();
  const auto n = rows.size(0);
  const auto* r = rows.data_ptr<std::int64_t>();
  const auto* v = values.data_ptr<float>();
  g.indices.resize(static_cast<std::size_t>(n * E));
  g.values.assign(v, v + n * E);
  for (std::int64_t i = 0; i < n; ++i) {
    const Index base = static_cast<Index>(r[i] * E);
    for (std::int64_t j = 0; j < E; ++j) g.indices[i * E + j] = base + static_cast<Index>(j);
  }
  return g;
}

// Rows with any non-zero entry in the summed gradient, divided by the world size. Both result
// forms give the same rows (a row whose sum is exactly zero everywhere is skipped by both).
template <class Index>
RowGradient touched_rows(const sync::SyncResult<Index>& result, std::int64_t E, double scale) {
  RowGradient out;
  const auto fs = static_cast<float>(scale);
  auto add_row = [&](std::int64_t row, auto&& fill) {
    const std::size_t at = out.values.size();
    out.values.resize(at + static_cast<std::size_t>(E), 0.0f);
    fill(out.values.data() + at);
    bool any = false;
    for (std::int64_t j = 0; j < E; ++j) any |= out.values[at + j] != 0.0f;
    if (!any) {
      out.values.resize(at);
      return;
    }
    for (std::int64_t j = 0; j < E; ++j) out.values[at + j] *= fs;
    out.rows.push_back(row);
  };
  if (result.dense_form) {
    const auto V = static_cast<std::int64_t>(result.dense.size()) / E;
    for (std::int64_t row = 0; row < V; ++row) {
      const float* src = result.dense.data() + row * E;
      bool any = false;
      for (std::int64_t j = 0; j < E && !any; ++j) any = src[j] != 0.0f;
      if (any) add_row(row, [&](float* dst) { std::copy(src, src + E, dst); });
    }
  } else {
    const auto& idx = result.sparse.indices;
    const auto& val = result.sparse.values;
    std::size_t k = 0;
    while (k < idx.size()) {
      const auto row = static_cast<std::int64_t>(idx[k] / static_cast<Index>(E));
      std::size_t end = k;
      while (end < idx.size() && static_cast<std::int64_t>(idx[end] / static_cast<Index>(E)) == row)
        ++end;
      add_row(row, [&](float* dst) {
        for (std::size_t q = k; q < end; ++q) dst[idx[q] - static_cast<Index>(row * E)] = val[q];
      });
      k = end;
    }
  }
  return out;
}

// Row-wise ("lazy") AdamW for the embedding: only rows in the aggregated gradient are updated;
// their moments decay only when they are touched; bias correction uses the global step, and
// decoupled weight decay applies to the touched rows (as TensorFlow's LazyAdam).
struct LazyAdamW {
  torch::Tensor m, v;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;

  void step(torch::Tensor& weight, const RowGradient& g, double lr, double weight_decay,
            std::int64_t t) {
    // One fused pass over the touched rows (index_select/index_copy would copy every row six
    // times); the arithmetic is LibTorch AdamW's, in float.
    const auto E = static_cast<std::size_t>(weight.size(1));
    float* w = weight.data_ptr<float>();
    float* mp = m.data_ptr<float>();
    float* vp = v.data_ptr<float>();
    const double bc1 = 1 - std::pow(beta1, static_cast<double>(t));
    const double bc2 = 1 - std::pow(beta2, static_cast<double>(t));
    const auto b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
    const auto decay = static_cast<float>(1 - lr * weight_decay);
    const auto step_size = static_cast<float>(lr / bc1);
    const auto inv_sqrt_bc2 = static_cast<float>(1 / std::sqrt(bc2));
    const auto e = static_cast<float>(eps);
    for (std::size_t k = 0; k < g.rows.size(); ++k) {
      const std::size_t off = static_cast<std::size_t>(g.rows[k]) * E;
      const float* gr = g.values.data() + k * E;
      for (std::size_t j = 0; j < E; ++j) {
        const float gj = gr[j];
        const float mj = b1 * mp[off + j] + (1 - b1) * gj;
        const float vj = b2 * vp[off + j] + (1 - b2) * gj * gj;
        mp[off + j] = mj;
        vp[off + j] = vj;
        w[off + j] = w[off + j] * decay - step_size * mj / (std::sqrt(vj) * inv_sqrt_bc2 + e);
      }
    }
  }
};

// Dense gradients: flattened into one buffer, summed in buckets, averaged, copied back. With top-k,
// the k largest entries of (residual + gradient) travel through the sparse scheme and the rest is
// kept as residual for the next step (error feedback).
class DenseSync {
 public:
  DenseSync(std::vector<torch::Tensor> params, std::uint64_t bucket_bytes, double topk)
      : params_(std::move(params)),
        bucket_(std::max<std::uint64_t>(1, bucket_bytes / 4)),
        topk_(topk) {
    for (const auto& p : params_) total_ += static_cast<std::size_t>(p.numel());
    flat_.resize(total_);
    if (topk_ > 0) residual_.assign(total_, 0.0f);
  }
  std::size_t elements() const { return total_; }
  // Top-k error-feedback residual (per rank: checkpoints keep every rank's).
  torch::Tensor residual() const {
    return torch::from_blob(const_cast<float*>(residual_.data()),
                            {static_cast<std::int64_t>(residual_.size())})
        .clone();
  }
  void set_residual(const torch::Tensor& r) {
    if (r.numel() != static_cast<std::int64_t>(residual_.size())) {
      throw std::runtime_error("checkpoint: top-k residual has the wrong size");
    }
    auto c = r.contiguous();
    std::copy(c.data_ptr<float>(), c.data_ptr<float>() + c.numel(), residual_.begin());
  }

  void run(Communicator& comm, sync::SyncScheme& scheme, sync::SyncResult<std::uint32_t>& result) {
    std::size_t off = 0;
    for (auto& p : params_) {
      const auto n = static_cast<std::size_t>(p.numel());
      if (p.grad().defined()) {
        auto g = p.grad().contiguous();
        std::copy(g.data_ptr<float>(), g.data_ptr<float>() + n, flat_.data() + off);
      } else {
        std::fill(flat_.data() + off, flat_.data() + off + n, 0.0f);  // unused on this rank
      }
      off += n;
    }
    const float inv = 1.0f / static_cast<float>(comm.size());
    if (topk_ > 0) {
      compressed(comm, scheme, result);
    } else {
      for (std::size_t b = 0; b < total_; b += bucket_) {
        comm.allreduce(std::span<float>(flat_.data() + b, std::min(bucket_, total_ - b)),
                       ReduceOp::sum);
      }
    }
    off = 0;
    for (auto& p : params_) {
      const auto n = p.numel();
      auto src = torch::from_blob(flat_.data() + off, p.sizes(), torch::kFloat);
      if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
      p.mutable_grad().copy_(src).mul_(inv);
      off += static_cast<std::size_t>(n);
    }
  }

 private:
  void compressed(Communicator& comm, sync::SyncScheme& scheme,
                  sync::SyncResult<std::uint32_t>& result) {
    for (std::size_t i = 0; i < total_; ++i) residual_[i] += flat_[i];
    const auto k = std::max<std::int64_t>(1, static_cast<std::int64_t>(topk_ * total_));
    auto acc = torch::from_blob(residual_.data(), {static_cast<std::int64_t>(total_)});
    auto chosen = std::get<1>(acc.abs().topk(k, 0, true, false));
    chosen = std::get<0>(chosen.sort());
    sparse::SparseGradient<std::uint32_t> local;
    local.elements = total_;
    local.indices.resize(static_cast<std::size_t>(k));
    local.values.resize(static_cast<std::size_t>(k));
    const auto* c = chosen.data_ptr<std::int64_t>();
    for (std::int64_t i = 0; i < k; ++i) {
      local.indices[i] = static_cast<std::uint32_t>(c[i]);
      local.values[i] = residual_[c[i]];
      residual_[c[i]] = 0.0f;
    }
    scheme.synchronize(comm, local, result);
    if (result.dense_form) {
      std::copy(result.dense.begin(), result.dense.end(), flat_.begin());
    } else {
      std::fill(flat_.begin(), flat_.end(), 0.0f);
      for (std::size_t i = 0; i < result.sparse.nnz(); ++i) {
        flat_[result.sparse.indices[i]] = result.sparse.values[i];
      }
    }
  }

  std::vector<torch::Tensor> params_;
  std::size_t bucket_;
  double topk_;
  std::size_t total_ = 0;
  std::vector<float> flat_, residual_;
};

struct Evaluation {
  double loss = 0;
  double perplexity = 0;
};

Evaluation evaluate(Communicator& comm, Gpt& model, const std::vector<std::int64_t>& windows,
                    int seq_len) {
  double sums[2] = {0, 0};  // summed NLL, predicted tokens
  {
    torch::NoGradGuard no_grad;  // released before the allreduce (see run())
    const auto rows = static_cast<std::int64_t>(windows.size()) / (seq_len + 1);
    constexpr std::int64_t kChunk = 32;
    auto all = to_tensor(windows, seq_len);
    for (std::int64_t r = 0; r < rows; r += kChunk) {
      auto chunk = all.slice(0, r, std::min(rows, r + kChunk));
      const double tokens = static_cast<double>(chunk.size(0)) * seq_len;
      sums[0] += model->loss(chunk).item<double>() * tokens;
      sums[1] += tokens;
    }
  }
  comm.allreduce(std::span<double>(sums, 2), ReduceOp::sum);
  Evaluation e;
  e.loss = sums[1] > 0 ? sums[0] / sums[1] : 0;
  e.perplexity = std::exp(e.loss);
  return e;
}

// The unigram baseline: perplexity of the validation windows' predicted tokens under the training
// split's word frequencies (add-one smoothed over the vocabulary). Collective.
double unigram_perplexity(Communicator& comm, const Vocabulary& vocab,
                          const std::vector<std::int64_t>& windows, int seq_len) {
  const auto& counts = vocab.counts();
  double total = 0;
  for (auto c : counts) total += static_cast<double>(c);
  double sums[2] = {0, 0};
  const std::size_t w = static_cast<std::size_t>(seq_len) + 1;
  for (std::size_t i = 0; i < windows.size(); ++i) {
    if (i % w == 0) continue;  // the first token of a window is context, never predicted
    const auto id = static_cast<std::size_t>(windows[i]);
    sums[0] -= std::log((static_cast<double>(counts[id]) + 1) / (total + counts.size()));
    sums[1] += 1;
  }
  comm.allreduce(std::span<double>(sums, 2), ReduceOp::sum);
  return sums[1] > 0 ? std::exp(sums[0] / sums[1]) : 0;
}

std::string format_duration(double s) {
  const auto t = static_cast<long>(std::max(0.0, s));
  return fmt::format("{}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
}

std::string format_bytes(double b) {
  if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
  if (b >= 1e6) return fmt::format("{:.2f} MB", b / 1e6);
  return fmt::format("{:.1f} kB", b / 1e3);
}

// loss.png from metrics.jsonl with gnuplot; returns the path, or "" with a warning on stderr.
std::string plot_loss(const std::filesystem::path& out) {
  std::ifstream in(out / "metrics.jsonl");
  std::ostringstream train, val;
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded()) continue;
    if (j.contains("loss")) train << j["step"] << ' ' << j["loss"] << '\n';
    if (j.contains("val_loss")) val << j["step"] << ' ' << j["val_loss"] << '\n';
  }
  util::write_file_atomic(out / "loss-train.dat", train.str());
  util::write_file_atomic(out / "loss-val.dat", val.str());
  const auto png = out / "loss.png";
  const std::string script = fmt::format(
      "set terminal pngcairo size 900,540 noenhanced\n"
      "set output '{0}'\nset xlabel 'step'\nset ylabel 'loss (nats/token)'\nset grid\n"
      "set title 'atoll train: training and validation loss'\n"
      "plot '{1}' using 1:2 with lines title 'training (mean over ranks)', "
      "'{2}' using 1:2 with linespoints title 'validation'\n",
      png.string(), (out / "loss-train.dat").string(), (out / "loss-val.dat").string());
  util::write_file_atomic(out / "loss.gnuplot", script);
  const std::string cmd = fmt::format(
      "gnuplot '{}' 2>/dev/null || gnuplot -e \"set terminal png\" '{}' >/dev/null "
      "2>&1",
      (out / "loss.gnuplot").string(), (out / "loss.gnuplot").string());
  if (std::system(cmd.c_str()) != 0 || !std::filesystem::exists(png)) {
    std::fprintf(stderr, "atoll: warning: gnuplot could not draw %s\n", png.c_str());
    return "";
  }
  return png.string();
}

// FNV-1a of the vocabulary's words, one per line: tells checkpoints of another vocabulary apart.
std::uint64_t vocabulary_fingerprint(const Vocabulary& vocab) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  for (std::size_t id = 0; id < vocab.size(); ++id) {
    const std::string line = vocab.word(static_cast<std::uint32_t>(id)) + "\n";
    h = util::fnv1a({reinterpret_cast<const std::uint8_t*>(line.data()), line.size()}, h);
  }
  return h;
}

template <class Index>
int run(Communicator& comm, const TrainConfig& cfg);

}  // namespace

int train(Communicator& comm, const TrainConfig& cfg) {
  comm.agree(check_config(cfg));
  agree_settings(comm, cfg);
  const std::uint64_t M = static_cast<std::uint64_t>(cfg.model.vocab) * cfg.model.d_embed;
  return M < (std::uint64_t{1} << 32) ? run<std::uint32_t>(comm, cfg)
                                      : run<std::uint64_t>(comm, cfg);
}

namespace {

template <class Index>
int run(Communicator& comm, const TrainConfig& cfg) {
  const int rank = comm.rank(), world = comm.size();
  const bool leader = rank == 0;
  torch::set_num_threads(1);

  // Data: every rank reads the corpus' training documents for the vocabulary and keeps its shard.
  RankData data;
  agreed(comm, [&] {
    CorpusOptions co;
    co.dir = cfg.corpus.empty() ? default_corpus_dir() : std::filesystem::path(cfg.corpus);
    co.vocab_size = static_cast<std::size_t>(cfg.model.vocab);
    data = load_rank_data(co, rank, world);
    if (data.train.size() < static_cast<std::size_t>(cfg.model.seq_len) + 1) {
      throw DataError(fmt::format("rank {}: shard of {} tokens is shorter than one sequence", rank,
                                  data.train.size()));
    }
  });
  // Word ids must mean the same on every rank: a host whose corpus differs would train other words
  // silently (--corpus is a path, so agree_settings does not compare it).
  const std::uint64_t vocabulary_fnv = vocabulary_fingerprint(data.vocab);
  if (comm.allreduce_value(vocabulary_fnv, ReduceOp::min) !=
      comm.allreduce_value(vocabulary_fnv, ReduceOp::max)) {
    comm.agree(
        "the ranks built different vocabularies: the corpus must hold the same files on every "
        "host (scripts/fetch-corpus checks its SHA-256)");
  }
  const auto val_windows =
      validation_windows(data.validation, cfg.model.seq_len, cfg.eval_windows, rank, world);

  // Model: the same initialisation on every rank (seeded), then rank 0's parameters broadcast so
  // that ranks on different machines or library builds start identical too.
  torch::manual_seed(cfg.seed);
  Gpt model(cfg.model);
  {
    // No torch guard may span a communicator call: under SMPI all ranks share one OS thread, and
    // torch's grad mode is thread-local (a guard held across a yield leaks into other ranks).
    for (auto& p : model->parameters()) {
      comm.broadcast(std::span<float>(p.data_ptr<float>(), static_cast<std::size_t>(p.numel())), 0);
    }
  }
  torch::Tensor embedding = model->tok->weight;
  std::vector<torch::Tensor> dense, decay, no_decay;
  for (auto& np : model->named_parameters()) {
    if (np.value().is_same(embedding)) continue;
    dense.push_back(np.value());
    (np.value().dim() >= 2 ? decay : no_decay).push_back(np.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay,
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(cfg.lr).weight_decay(cfg.weight_decay)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(cfg.lr).weight_decay(0)));
  torch::optim::AdamW dense_opt(groups, torch::optim::AdamWOptions(cfg.lr));
  LazyAdamW embed_opt;
  embed_opt.m = torch::zeros_like(embedding);
  embed_opt.v = torch::zeros_like(embedding);

  auto scheme = sync::make_scheme(cfg.sync);
  auto dense_scheme = sync::make_scheme(cfg.sync);  // top-k path: its own buffers
  DenseSync dense_sync(dense, cfg.bucket_bytes, cfg.topk);

  // Resume.
  int start = 0;
  const std::filesystem::path out = cfg.out;
  const RunRecord this_run = run_record(cfg, world, vocabulary_fnv);
  if (cfg.resume || !cfg.resume_from.empty()) {
    agreed(comm, [&] {
      std::filesystem::path file = cfg.resume_from;
      std::string previous;  // named in the error when the newest checkpoint is refused
      if (file.empty()) {
        auto all = list_checkpoints(out);
        if (all.empty()) {
          throw CheckpointError(
              fmt::format("--resume: no checkpoint in {}", checkpoint_dir(out).string()));
        }
        file = all.back();
        previous = all.size() > 1 ? all[all.size() - 2].string() : "";
      }
      torch::serialize::InputArchive ar;
      std::uint64_t step = 0;
      try {
        step = read_checkpoint(file, ar);
      } catch (const CheckpointError& e) {
        if (previous.empty()) throw;
        throw CheckpointError(
            fmt::format("{} (refused); the previous one, {}, can be used with --resume-from {}",
                        e.what(), previous, previous));
      }
      // Refuse what this run cannot continue before any tensor is loaded.
      const auto check = check_resume(read_run_record(file, ar), this_run);
      if (!check.refusals.empty()) {
        throw CheckpointError(
            fmt::format("checkpoint {} {}", file.string(), fmt::join(check.refusals, "; and it ")));
      }
      if (leader) {  // also under --quiet: a resumed run that differs should say so
        for (const auto& note : check.notes) {
          fmt::print(stderr, "atoll train: note: checkpoint {}: {}\n", file.string(), note);
        }
      }
      try {
        torch::NoGradGuard no_grad;
        model->load(ar);
        torch::serialize::InputArchive opt_ar;
        ar.read("dense_optimizer", opt_ar);
        dense_opt.load(opt_ar);
        ar.read("embed_adam_m", embed_opt.m, true);
        ar.read("embed_adam_v", embed_opt.v, true);
        if (cfg.topk > 0) {
          torch::Tensor residual;
          ar.read("topk_residual_rank" + std::to_string(rank), residual, true);
          dense_sync.set_residual(residual);
        }
      } catch (const c10::Error& e) {
        throw CheckpointError(fmt::format("checkpoint {}: cannot load its state ({})",
                                          file.string(), e.what_without_backtrace()));
      }
      start = static_cast<int>(step);
      if (start > cfg.steps) {
        throw CheckpointError(fmt::format("checkpoint {} is at step {}, beyond --steps {}",
                                          file.string(), start, cfg.steps));
      }
    });
    // Each rank read the checkpoint itself: on hosts that see different files (an --out that is
    // not shared) they could resume from different steps and then run different numbers of steps.
    const int lo = comm.allreduce_value<std::int32_t>(start, ReduceOp::min);
    const int hi = comm.allreduce_value<std::int32_t>(start, ReduceOp::max);
    if (lo != hi) {
      comm.agree(
          fmt::format("ranks resumed from different steps ({} to {}): every rank must see the same "
                      "checkpoint, so --out must be one directory shared by all hosts",
                      lo, hi));
    }
    if (leader && !cfg.quiet) fmt::print("atoll train: resumed after step {}\n", start);
  }

  // Metrics: rank 0 keeps metrics.jsonl; on resume, lines after the checkpoint are dropped.
  std::ofstream metrics;
  agreed(comm, [&] {
    if (!leader || out.empty()) return;
    std::string kept;
    if (start > 0) {
      std::ifstream old(out / "metrics.jsonl");
      std::string line;
      while (std::getline(old, line)) {
        auto j = nlohmann::json::parse(line, nullptr, false);
        if (!j.is_discarded() && j.value("step", -1) <= start) kept += line + "\n";
      }
    }
    util::write_file_atomic(out / "metrics.jsonl", kept);
    metrics.open(out / "metrics.jsonl", std::ios::app);
    if (!metrics) throw util::FileError((out / "metrics.jsonl").string() + ": cannot append");
  });

  const std::int64_t E = cfg.model.d_embed;
  const std::uint64_t M = static_cast<std::uint64_t>(cfg.model.vocab) * E;
  const double dense_equivalent =
      world > 1 ? 2.0 * (world - 1) / world * static_cast<double>(M) * 4.0 : 0.0;
  if (leader && !cfg.quiet) {
    std::int64_t params = 0;
    for (auto& p : model->parameters()) params += p.numel();
    fmt::print(
        "atoll train: preset {}, {} ranks, {} parameters ({} in the embedding, {:.0f}%), vocab {}, "
        "{} training documents ({} on rank 0), sync {}{}\n",
        cfg.preset, world, params, M, 100.0 * M / params, data.vocab.size(), data.train_documents,
        data.shard_documents, cfg.sync,
        cfg.topk > 0 ? fmt::format(", dense top-k {}", cfg.topk) : "");
  }

  const double unigram = unigram_perplexity(comm, data.vocab, val_windows, cfg.model.seq_len);
  Evaluation first{}, last{};
  bool have_first = false;
  if (start == 0 && cfg.eval_every > 0) {
    first = evaluate(comm, model, val_windows, cfg.model.seq_len);
    have_first = true;
    if (leader) {
      if (!cfg.quiet) {
        fmt::print("step 0: validation loss {:.4f}, perplexity {:.1f}\n", first.loss,
                   first.perplexity);
      }
      if (metrics.is_open()) {
        metrics << nlohmann::json{{"step", 0},
                                  {"val_loss", first.loss},
                                  {"val_ppl", first.perplexity},
                                  {"unigram_val_ppl", unigram}}
                       .dump()
                << "\n"
                << std::flush;
      }
    }
  }

  struct Compared {
    std::string name;
    std::unique_ptr<sync::SyncScheme> scheme;
    std::vector<double> sync_rows_s;
    bool verified = true;
  };
  std::vector<Compared> compare;
  for (const auto& name : cfg.compare_schemes)
    compare.push_back({name, sync::make_scheme(name), {}, true});
  sync::SyncResult<Index> compare_result;
  std::vector<double> base_s, primary_sync_rows_s;  // per step: step minus primary sync+rows
  sync::SyncResult<Index> emb_result;
  sync::SyncResult<std::uint32_t> dense_result;
  double sum_step_s = 0, sum_comm_s = 0, emb_bytes_total = 0;
  int timed_steps = 0;
  const double tokens_per_step = static_cast<double>(world) * cfg.batch * cfg.model.seq_len;
  for (int step = start + 1; step <= cfg.steps; ++step) {
    const double t0 = comm.wtime();
    const auto bytes0 = comm.traffic().bytes_sent;
    // Model work (forward, backward, optimizer): measured, or charged as --sim-compute-s.
    const bool fixed_compute = cfg.sim_compute_s > 0;
    if (fixed_compute) comm.fixed_compute_begin();
    auto tokens =
        to_tensor(sample_batch(data.train, cfg.batch, cfg.model.seq_len, cfg.seed, step, rank),
                  cfg.model.seq_len);
    model->zero_grad(true);
    auto loss = model->loss(tokens);
    loss.backward();
    if (fixed_compute) comm.fixed_compute_end(cfg.sim_compute_s);
    const double model_s = fixed_compute ? cfg.sim_compute_s : comm.wtime() - t0;
    auto local = embedding_gradient<Index>(embedding);
    if (!cfg.dump_grads.empty() &&
        (cfg.dump_grads_steps == 0 || step - start <= cfg.dump_grads_steps)) {
      agreed(comm, [&] {
        sparse::write_trace(sparse::trace_path(cfg.dump_grads, step, rank), local, rank, world,
                            step);
      });
    }

    // Ranks reach the synchronization at different times (their compute differs); the barrier
    // makes that wait visible (wait_s) instead of hiding it in the first collective of a scheme.
    const double tw0 = comm.wtime();
    comm.barrier();
    // Benchmark mode: the same gradient also goes through every compared scheme, timed and checked
    // against the training scheme's rows. The order rotates every step so that no scheme always
    // meets warm (or cold) caches; the time spent on compared schemes is left out of the step.
    double compare_total_s = 0;
    std::vector<RowGradient> compared_rows(compare.size());
    const std::size_t before = compare.empty() ? 0 : step % (compare.size() + 1);
    auto run_compared = [&](std::size_t c) {
      const double tb = comm.wtime();
      comm.barrier();
      const double ts0 = comm.wtime();
      compare[c].scheme->synchronize(comm, local, compare_result);
      compared_rows[c] = touched_rows(compare_result, E, 1.0 / world);
      const double ts1 = comm.wtime();
      compare[c].sync_rows_s.push_back(ts1 - ts0);
      compare_total_s += ts1 - tb;
    };
    for (std::size_t c = 0; c < before; ++c) run_compared(c);
    const double tcb = comm.wtime();
    if (before > 0) comm.barrier();
    const double tc0 = comm.wtime();
    compare_total_s += tc0 - tcb;
    scheme->synchronize(comm, local, emb_result);
    const double tc1 = comm.wtime();
    auto rows = touched_rows(emb_result, E, 1.0 / world);
    const double tc2_primary = comm.wtime();
    for (std::size_t c = before; c < compare.size(); ++c) run_compared(c);
    for (std::size_t c = 0; c < compare.size(); ++c) {
      const auto& crows = compared_rows[c];
      // Equal rows; values equal up to summation order: within 1e-5 of the row's largest
      // magnitude (an element-relative test fails on sums that cancel to nearly zero).
      bool same = crows.rows == rows.rows && crows.values.size() == rows.values.size();
      for (std::size_t r = 0; same && r < rows.rows.size(); ++r) {
        const float* a = crows.values.data() + r * E;
        const float* b = rows.values.data() + r * E;
        float scale = 0;
        for (std::int64_t j = 0; j < E; ++j) scale = std::max(scale, std::fabs(b[j]));
        for (std::int64_t j = 0; same && j < E; ++j) same = std::fabs(a[j] - b[j]) <= 1e-5f * scale;
      }
      compare[c].verified = compare[c].verified && same;
    }
    const double tc2 = comm.wtime();
    dense_sync.run(comm, *dense_scheme, dense_result);
    double loss_sum = comm.allreduce_value(loss.item<double>(), ReduceOp::sum);
    const double tc3 = comm.wtime();
    const double mean_loss = loss_sum / world;

    const double to0 = comm.wtime();
    if (fixed_compute) comm.fixed_compute_begin();
    const double lr = learning_rate(cfg, cfg.lr, step);
    for (auto& g : dense_opt.param_groups()) g.options().set_lr(lr);
    dense_opt.step();
    embed_opt.step(embedding, rows, learning_rate(cfg, cfg.embed_lr, step), cfg.weight_decay, step);
    if (fixed_compute) comm.fixed_compute_end(0);  // charged with the forward/backward above
    const double t1 = comm.wtime();
    const double step_model_s = fixed_compute ? model_s : model_s + (t1 - to0);

    const double step_s = t1 - t0 - compare_total_s, wait_s = tc0 - tw0;
    if (!compare.empty()) {
      primary_sync_rows_s.push_back(tc2_primary - tc0);
      base_s.push_back(step_s - (tc2_primary - tc0));
    }
    const double comm_s = wait_s + (tc1 - tc0) + (tc3 - tc2);
    const double emb_bytes = static_cast<double>(emb_result.stats.bytes_sent());
    emb_bytes_total += emb_bytes;
    sum_step_s += step_s;
    sum_comm_s += comm_s;
    ++timed_steps;

    nlohmann::json j{{"step", step},
                     {"loss", mean_loss},
                     {"lr", lr},
                     {"tokens_per_s", tokens_per_step / step_s},
                     {"step_s", step_s},
                     {"comm_s", comm_s},
                     {"wait_s", wait_s},
                     {"embedding_sync_s", tc1 - tc0},
                     {"model_s", step_model_s},
                     {"bytes_sent", comm.traffic().bytes_sent - bytes0},
                     {"embedding_bytes_sent", emb_bytes},
                     {"embedding_rows", rows.rows.size()}};
    const bool eval_now = cfg.eval_every > 0 && (step % cfg.eval_every == 0 || step == cfg.steps);
    for (const auto& ph : emb_result.stats.phases) j["embedding_phases_s"][ph.name] = ph.time_s;
    if (eval_now) {
      last = evaluate(comm, model, val_windows, cfg.model.seq_len);
      j["val_loss"] = last.loss;
      j["val_ppl"] = last.perplexity;
    }
    if (leader) {
      if (metrics.is_open()) metrics << j.dump() << "\n" << std::flush;
      if (!cfg.quiet && (step % cfg.log_every == 0 || step == cfg.steps || eval_now)) {
        const double mean_step = sum_step_s / timed_steps;
        fmt::print("step {}/{}  loss {:.4f}  {:.0f} tok/s  comm {:.0f}%  ETA {}{}\n", step,
                   cfg.steps, mean_loss, tokens_per_step / mean_step,
                   100.0 * sum_comm_s / sum_step_s, format_duration(mean_step * (cfg.steps - step)),
                   eval_now ? fmt::format("  | validation loss {:.4f}, perplexity {:.1f}",
                                          last.loss, last.perplexity)
                            : "");
        std::fflush(stdout);
      }
    }
    const bool checkpoint_now =
        !out.empty() &&
        ((cfg.checkpoint_every > 0 && step % cfg.checkpoint_every == 0) || step == cfg.steps);
    if (checkpoint_now) {
      std::vector<float> residuals;  // top-k: every rank's residual, in rank order, on rank 0
      if (cfg.topk > 0) {
        auto mine = dense_sync.residual();
        residuals = comm.allgatherv<float>(
            std::span<const float>(mine.data_ptr<float>(), static_cast<std::size_t>(mine.numel())),
            nullptr);
      }
      agreed(comm, [&] {
        if (!leader) return;
        torch::serialize::OutputArchive ar;
        if (cfg.topk > 0) {
          const auto n = static_cast<std::int64_t>(dense_sync.elements());
          for (int r = 0; r < world; ++r) {
            ar.write("topk_residual_rank" + std::to_string(r),
                     torch::from_blob(residuals.data() + r * n, {n}).clone(), true);
          }
        }
        model->save(ar);
        torch::serialize::OutputArchive opt_ar;
        dense_opt.save(opt_ar);
        ar.write("dense_optimizer", opt_ar);
        ar.write("embed_adam_m", embed_opt.m, true);
        ar.write("embed_adam_v", embed_opt.v, true);
        write_run_record(ar, this_run);
        write_checkpoint(checkpoint_path(out, step), step, ar);
        prune_checkpoints(out, cfg.keep_checkpoints);
      });
    }
  }

  if (leader && !cfg.quiet && timed_steps > 0) {
    fmt::print("\natoll train: report ({} ranks, sync {})\n", world, cfg.sync);
    if (have_first && cfg.eval_every > 0) {
      fmt::print(
          "  validation perplexity: {:.1f} before training, {:.1f} after {} steps ({:.2f}x "
          "lower)\n",
          first.perplexity, last.perplexity, cfg.steps, first.perplexity / last.perplexity);
    } else if (cfg.eval_every > 0) {
      fmt::print("  validation perplexity after {} steps: {:.1f}\n", cfg.steps, last.perplexity);
    }
    fmt::print("  unigram baseline (training word frequencies): validation perplexity {:.1f}\n",
               unigram);
    if (world > 1)
      fmt::print(
          "  embedding gradient synchronized by {}: {} sent by rank 0 over {} steps; dense "
          "allreduce would send {} ({:.1f}x more)\n",
          cfg.sync, format_bytes(emb_bytes_total / 1), timed_steps,
          format_bytes(dense_equivalent * timed_steps),
          emb_bytes_total > 0 ? dense_equivalent * timed_steps / emb_bytes_total : 0.0);
    fmt::print("  throughput {:.0f} tokens/s, {:.0f}% of step time in communication\n",
               tokens_per_step * timed_steps / sum_step_s, 100.0 * sum_comm_s / sum_step_s);
  }
  if (!compare.empty() && timed_steps > 2) {
    // Per scheme: step time = (this step without the primary's sync + rows) + that scheme's sync +
    // rows, both measured in the same step; median over steps after the first two (warm-up).
    auto median = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      const auto n = v.size();
      return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
    };
    auto after_warmup = [](const std::vector<double>& v) {
      return std::vector<double>(v.begin() + 2, v.end());
    };
    std::vector<std::pair<std::string, std::vector<double>>> all;
    all.emplace_back(cfg.sync + " (training)", primary_sync_rows_s);
    for (auto& c : compare) {
      // Verified only if every rank saw equal results at every step.
      c.verified = comm.allreduce_value<std::int32_t>(c.verified ? 1 : 0, ReduceOp::min) == 1;
      all.emplace_back(c.name, c.sync_rows_s);
    }
    if (leader) {
      std::string lines;
      fmt::print(
          "\n  same-step comparison ({} steps after 2 warm-up; step = rest of the step + the "
          "scheme's embedding sync + row extraction):\n",
          timed_steps - 2);
      fmt::print("  {:<20} {:>12} {:>12} {:>12} {:>9}\n", "scheme", "sync+rows ms", "step ms",
                 "tokens/s", "verified");
      std::vector<double> step_est;
      for (std::size_t k = 0; k < all.size(); ++k) {
        const auto& [name, times] = all[k];
        std::vector<double> est;
        const auto t = after_warmup(times), b = after_warmup(base_s);
        for (std::size_t i = 0; i < t.size(); ++i) est.push_back(b[i] + t[i]);
        const double st = median(est), sr = median(t);
        const bool verified = k == 0 || compare[k - 1].verified;
        fmt::print("  {:<20} {:>12.2f} {:>12.2f} {:>12.0f} {:>9}\n", name, sr * 1e3, st * 1e3,
                   tokens_per_step / st, k == 0 ? "-" : (verified ? "yes" : "NO"));
        lines += nlohmann::json{{"scheme", k == 0 ? cfg.sync : name},
                                {"training_scheme", k == 0},
                                {"ranks", world},
                                {"steps", t.size()},
                                {"sync_rows_s", sr},
                                {"step_s", st},
                                {"tokens_per_s", tokens_per_step / st},
                                {"verified", k == 0 ? true : verified}}
                     .dump() +
                 "\n";
      }
      try {
        if (!out.empty()) util::write_file_atomic(out / "compare.jsonl", lines);
      } catch (const util::FileError& e) {
        std::fprintf(stderr, "atoll: warning: %s\n", e.what());
      }
    }
  }
  if (leader && !out.empty()) {
    metrics.close();
    if (cfg.plot) {
      try {
        const auto png = plot_loss(out);
        if (!png.empty() && !cfg.quiet) fmt::print("  loss curve: {}\n", png);
      } catch (const util::FileError& e) {
        std::fprintf(stderr, "atoll: warning: no loss plot: %s\n", e.what());
      }
    }
    if (!cfg.quiet) fmt::print("  metrics: {}\n", (out / "metrics.jsonl").string());
  }
  return 0;
}

}  // namespace
}  // namespace atl::train
