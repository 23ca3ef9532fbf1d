#include "site_training.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <stdexcept>

#include "atoll/wan/mixing.h"
#include "atoll/wan/planner.h"
#include "atoll/wan/ring_exits.h"
#include "atoll/wan/schedule_file.h"

namespace atl::train {
namespace {

wan::Topology load_sites(const TrainConfig& cfg, comm::Communicator& comm) {
  std::optional<wan::Topology> t;
  std::optional<std::string> problem;
  try {
    wan::TopologyOptions o;
    o.topology_file = cfg.topology;
    if (cfg.fpga_memory > 0) o.fpga_memory_bytes = cfg.fpga_memory;
    if (cfg.egress_gbps > 0) o.egress_bytes_per_s = cfg.egress_gbps * 1e9 / 8;
    if (cfg.ingress_gbps > 0) o.ingress_bytes_per_s = cfg.ingress_gbps * 1e9 / 8;
    t.emplace(wan::load_topology(o));
    const int S = cfg.shard_group_size;
    if (t->size() != static_cast<std::size_t>(comm.size()) && S == 1) {
      problem = fmt::format(
          "--topology {} has {} sites but the job has {} ranks (one rank per site: run with "
          "-np {})",
          cfg.topology, t->size(), comm.size(), t->size());
    } else if (t->size() != static_cast<std::size_t>(comm.size())) {
      problem = fmt::format(
          "--topology {} has {} sites but the job has {} workers of --shard-group-size {} ({} "
          "ranks; one worker per site: run with -np {})",
          cfg.topology, t->size(), comm.size(), S, comm.size() * S, t->size() * S);
    }
  } catch (const std::exception& e) {
    problem = fmt::format("--topology {}: {}", cfg.topology, e.what());
  }
  comm.agree(problem);
  return std::move(*t);
}

// --site-speed CODE:FACTOR,... : every site's factor (1 if not named).
std::vector<double> site_speeds(const std::string& spec, const wan::Topology& t) {
  std::vector<double> speeds(t.size(), 1.0);
  std::size_t at = 0;
  while (at < spec.size()) {
    const auto end = std::min(spec.find(',', at), spec.size());
    const auto item = spec.substr(at, end - at);
    const auto colon = item.find(':');
    if (colon == std::string::npos) {
      throw std::invalid_argument(fmt::format("--site-speed '{}' is not CODE:FACTOR", item));
    }
    const auto index = t.index_of(item.substr(0, colon));  // TopologyError names it
    double f = 0;
    try {
      std::size_t used = 0;
      f = std::stod(item.substr(colon + 1), &used);
      if (used != item.size() - colon - 1) f = 0;
    } catch (const std::exception&) {
      f = 0;
    }
    if (!(f > 0) || !std::isfinite(f)) {
      throw std::invalid_argument(
          fmt::format("--site-speed '{}': the factor must be a positive number", item));
    }
    speeds[index] = f;
    at = end + 1;
  }
  return speeds;
}

}  // namespace

SiteTraining::SiteTraining(const TrainConfig& cfg, comm::Communicator& comm,
                           comm::Communicator* site_group, Engine& engine)
    : engine_(engine),
      topology_(load_sites(cfg, comm)),
      params_(engine.model->parameters()),
      group_(site_group),
      local_sgd_(cfg.strategy != "ddp"),
      warmup_(cfg.sync_warmup_steps),
      every_(cfg.sync_every),
      outer_lr_(cfg.outer_lr),
      outer_momentum_(cfg.outer_momentum),
      overlap_(cfg.overlap_rounds > 0),
      land_at_arrival_(cfg.overlap_land == "arrival"),
      mix_(cfg.overlap_mix),
      site_(static_cast<std::size_t>(comm.rank())),
      step_weight_(cfg.step_weight),
      fault_(parse_faults(cfg.inject_fault).corrupt),
      sites_comm_(comm) {
  const std::size_t n = params_.elements();
  const auto S = static_cast<std::size_t>(group_ ? group_->size() : 1);
  const auto g = static_cast<std::size_t>(group_ ? group_->rank() : 0);
  lo_ = n * g / S;
  hi_ = n * (g + 1) / S;
  compute_s_ = cfg.compute_s;
  payload_bytes_ = static_cast<double>(n * sizeof(float));
  if (cfg.pseudo_topk > 0) {  // the planner is asked with what a site sends: index and value
    sparse_.emplace(hi_ - lo_, cfg.pseudo_topk, cfg.sync, cfg.pseudo_topk_decay);
    const auto k =
        std::max(1.0, std::floor(cfg.pseudo_topk * static_cast<double>(params_.elements())));
    payload_bytes_ = k * 8.0;
  }
  std::optional<std::string> problem;
  std::vector<double> speeds;
  try {
    speeds = site_speeds(cfg.site_speed, topology_);
  } catch (const std::exception& e) {
    problem = e.what();
  }
  comm.agree(problem);
  // Steps per round: H for every site; aedit, as many as fit in --sync-seconds of the site's
  // model clock (a slower site takes fewer), at least one.
  round_steps_.assign(topology_.size(), cfg.sync_every);
  if (cfg.strategy == "aedit") {
    timed_ = true;
    for (std::size_t j = 0; j < speeds.size(); ++j) {
      const double fit = cfg.sync_seconds * speeds[j] / cfg.compute_s;
      round_steps_[j] = std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(fit - 1e-9)));
    }
    every_ = static_cast<int>(round_steps_[site_]);
  }
  clock_.emplace(std::move(speeds), site_, cfg.compute_s);
  if (timed_) clock_->set_round_steps(round_steps_);
  // edit and aedit: EDiT's penalty over each unit's runs of the flat parameters.
  if ((cfg.strategy == "edit" || cfg.strategy == "aedit") && cfg.penalty) {
    std::vector<localsgd::CliquePenalty::Segment> segments;
    std::size_t at = 0;
    for (const auto& p : engine.model->named_parameters()) {
      const auto n = static_cast<std::size_t>(p.value().numel());
      segments.push_back(
          {at, at + n, static_cast<std::size_t>(unit_of(p.key(), cfg.model.layers))});
      at += n;
    }
    penalty_.emplace(std::move(segments), static_cast<std::size_t>(unit_count(cfg.model.layers)),
                     localsgd::PenaltyOptions{true, cfg.anomaly_threshold, cfg.ewma_alpha,
                                              cfg.ewma_warmup, cfg.weight_temperature, cfg.clip});
  }
  build_schedule(cfg, comm);
}

void SiteTraining::charge_compute(int step, double measured_s) {
  // A site's step under the 2-D mesh lasts as long as its slowest rank's (measured time only: a
  // --compute-s clock is known everywhere).
  if (group_ && !(compute_s_ > 0))
    measured_s = group_->allreduce_value(measured_s, comm::ReduceOp::max);
  clock_->local_step(measured_s, is_local(step));
  landed_ = land_at_arrival_ && pending_ && clock_->arrived();
  if (!landed_) return;
  clock_->land_arrived();  // no wait: every exchange that has ended by now
  merge_pending();
}

std::int64_t SiteTraining::steps_of(std::size_t site) const {
  return warmup_ + static_cast<std::int64_t>(meetings_) * round_steps_[site];
}

std::int64_t SiteTraining::batches() const {
  std::int64_t b = 0;
  for (std::size_t j = 0; j < round_steps_.size(); ++j) b += steps_of(j);
  return b * (group_ ? group_->size() : 1);  // a site's step: a batch on each of its ranks
}

// Under simulation the sites leave the set-up (the initial model's broadcast across the WAN) up to
// hundreds of ms apart, while the model clock starts them together; and a ring never brings its
// members back together (each leaves when its own chain ends), so that skew would stay in every
// meeting (found on 2026-12-05: the ring at 1 Gbit/s took 1.29x the model clock, and the
// entry-skew model, fed the simulated entries, gave every site's exit within 3 ms). So every site
// starts training at one agreed simulated instant: the latest arrival of any rank plus a margin
// that covers the agreeing allreduces themselves (2n of the topology's largest one-way latencies).
void SiteTraining::align_start() {
  double largest = 0;
  for (std::size_t a = 0; a < topology_.size(); ++a)
    for (std::size_t b = 0; b < topology_.size(); ++b)
      largest = std::max(largest, topology_.latency_s(a, b));
  const double margin = 2.0 * static_cast<double>(topology_.size()) * largest + 0.1;
  double latest = sites_comm_.allreduce_value(sites_comm_.wtime(), comm::ReduceOp::max);
  // The 2-D mesh: sites_comm_ holds one rank per site; the site's own ranks agree on the latest.
  if (group_) latest = group_->allreduce_value(latest, comm::ReduceOp::max);
  const double start = latest + margin;
  const double wait = start - sites_comm_.wtime();
  if (wait < 0) {
    fmt::print(stderr, "atoll train: rank {} starts {:.3f} s after the sites' agreed start\n",
               sites_comm_.rank(), -wait);
  }
  sites_comm_.fixed_compute_begin();
  sites_comm_.fixed_compute_end(std::max(0.0, wait));
}

void SiteTraining::charge_ddp_step(comm::Communicator& comm, std::uint64_t embedding_bytes) {
  const auto n = topology_.size();
  std::uint64_t most = embedding_bytes;  // the largest over the ranks, in one latency on a WAN
  comm.allreduce_direct(std::span<std::uint64_t>(&most, 1), comm::ReduceOp::max);
  wan::Clique all(n);
  std::iota(all.begin(), all.end(), std::size_t{0});
  auto dense = round_options_;
  dense.payload_bytes =
      payload_bytes_ - static_cast<double>(engine_.vocab * engine_.embedding.size(1)) * 4.0;
  double t = wan::ring_allreduce_time(topology_, all, dense);
  if (most > 0) {
    auto sparse = round_options_;
    sparse.payload_bytes = static_cast<double>(most) / static_cast<double>(n - 1);
    t += wan::clique_cost(topology_, all, wan::Transport::unicast, sparse).time_s;
  }
  clock_->all_meet(comm, t);
}

void SiteTraining::begin_step(int step) {
  if (!started_) {
    if (comm::Communicator::simulated()) align_start();
    wall0_ = sites_comm_.wtime();  // training time starts with the first step
  }
  started_ = true;
  if (!is_local(step) || state_) return;
  std::vector<float> theta(params_.elements());
  params_.gather_values(theta);
  state_.emplace(own_slice(theta));
}

std::vector<float> SiteTraining::own_slice(const std::vector<float>& whole) const {
  return {whole.begin() + static_cast<std::ptrdiff_t>(lo_),
          whole.begin() + static_cast<std::ptrdiff_t>(hi_)};
}

std::vector<float> SiteTraining::site_whole(std::vector<float> slice) {
  if (!group_) return slice;
  return group_->allgatherv<float>(slice, nullptr);  // the group's ranks hold the slices in order
}

std::optional<SiteTraining::Meeting> SiteTraining::end_local_step(int step) {
  if (!is_local(step) || (step - warmup_) % every_ != 0) return std::nullopt;
  apply_pending();
  Meeting m;
  m.round = meetings_ % rounds_.size();
  m.clique = clique_index_[m.round];
  ++meetings_;
  const auto& round = rounds_[m.round];
  auto& clique = cliques_[m.round];
  const double arrived = clock_->now();
  const auto sent0 = clique.traffic().bytes_sent;
  if (sparse_) {  // the exchange first: the round model is charged the bytes it sent
    exchange(step, m);
    m.bytes_sent = clique.traffic().bytes_sent - sent0;
    // What the site sent: its ranks' slices together (each rank of a site computes the same).
    const auto site_sent =
        group_ ? group_->allreduce_value<std::uint64_t>(m.bytes_sent, comm::ReduceOp::sum)
               : m.bytes_sent;
    const auto most = clique.allreduce_value<std::uint64_t>(site_sent, comm::ReduceOp::max);
    auto sent = round_options_;
    sent.payload_bytes = static_cast<double>(most) / static_cast<double>(clique.size() - 1);
    const double t =
        wan::clique_cost(topology_, round[0].sites, wan::Transport::unicast, sent).time_s;
    m.wan_s = clock_->meet(round, SiteClock::together({t}), m.clique, clique, overlap_) - arrived;
    return m;
  }
  m.wan_s = clock_->meet(round, member_exits(round), m.clique, clique, overlap_) - arrived;
  if (m.clique < 0) return m;
  exchange(step, m);
  m.bytes_sent = clique.traffic().bytes_sent - sent0;
  return m;
}

SiteClock::MemberExits SiteTraining::member_exits(const wan::ResolvedRound& round) const {
  std::vector<double> exchange_s;
  for (const auto& entry : round)
    exchange_s.push_back(wan::exchange_time(topology_, entry, round_options_));
  auto together = SiteClock::together(exchange_s);
  // A ring's members leave one by one, later when they entered apart (wan/ring_exits.h).
  return [this, &round, together](std::size_t c, const std::vector<double>& arrivals) {
    if (round[c].kind != wan::ExchangeKind::ring_allreduce) return together(c, arrivals);
    return wan::ring_allreduce_exits(topology_, round[c].sites, round_options_, arrivals);
  };
}

void SiteTraining::exchange(int step, Meeting& m) {
  std::vector<float> whole(params_.elements());
  params_.gather_values(whole);
  std::vector<float> theta = own_slice(whole);
  // A site with a NaN or an infinity anywhere is dropped as a whole: every rank of a 2-D mesh
  // site holds all parameters, and makes its slice say so.
  if (group_ && !theta.empty() &&
      !std::all_of(whole.begin(), whole.end(), [](float x) { return std::isfinite(x); })) {
    theta[0] = std::numeric_limits<float>::quiet_NaN();
  }
  whole.clear();
  if (fault_ && step >= fault_->step) {  // experiments: this site's Δ scaled (nan: made NaN)
    if (site_ == static_cast<std::size_t>(fault_->rank)) {
      const auto f = static_cast<float>(fault_->scale);
      const auto& anchor = state_->anchor();
      for (std::size_t i = 0; i < theta.size(); ++i)
        theta[i] = anchor[i] - f * (anchor[i] - theta[i]);
      m.fault_fired = true;
    }
    fault_.reset();
  }
  std::optional<Pending> pending;
  // The correction's base (the slice sent; a merge needs only the new anchor) and the old anchor.
  if (overlap_) pending = Pending{mix_ < 0 ? theta : std::vector<float>{}, state_->anchor()};
  const auto& entry = rounds_[m.round][static_cast<std::size_t>(m.clique)];
  auto& clique = cliques_[m.round];
  localsgd::CliqueMeeting met;
  if (sparse_) {  // Σ of the members' top-k Δ (error feedback), then the outer step
    std::vector<float> mean_delta;
    met = sparse_->exchange(clique, state_->anchor(), theta, mean_delta);
    if (met.skipped) {
      std::copy(state_->anchor().begin(), state_->anchor().end(), theta.begin());
    } else {
      state_->step(theta, mean_delta, outer_lr_, outer_momentum_);
    }
  } else {
    // The pattern the round model charges: unicast, every member's payload to every other; a
    // ring, the pipelined ring in the clique's order; the FPGAs' aggregation, the library's
    // allreduce.
    const auto kind = entry.kind == wan::ExchangeKind::unicast ? localsgd::CliqueExchange::full_mesh
                      : entry.kind == wan::ExchangeKind::ring_allreduce
                          ? localsgd::CliqueExchange::ring
                          : localsgd::CliqueExchange::allreduce;
    if (penalty_) {
      std::vector<std::uint64_t> steps;  // aedit --step-weight: the members' steps per round
      for (auto site : entry.sites) steps.push_back(round_steps_[site]);
      penalize(step, m,
               penalty_->meet(clique, *state_, theta, outer_lr_, outer_momentum_, kind, steps,
                              step_weight_));
    } else {
      met = state_->sync(clique, theta, outer_lr_, outer_momentum_, kind);
    }
  }
  for (int member : met.dropped) m.dropped.push_back(entry.sites[static_cast<std::size_t>(member)]);
  m.skipped = met.skipped;
  // Said once per clique: by its first site's first rank (the 2-D mesh: every rank knows it).
  if (!m.dropped.empty() && clique.rank() == 0 && (!group_ || group_->rank() == 0)) {
    std::vector<std::string> names;
    for (auto s : m.dropped) names.push_back(topology_.site(s).code);
    fmt::print(stderr,
               "atoll train: step {}: round {}: site(s) {} of clique {} had non-finite parameters: "
               "{}\n",
               step, m.round, fmt::join(names, ", "), m.clique,
               m.skipped ? "no member was finite, the meeting is skipped"
                         : "dropped from the clique's mean");
  }
  if (!pending) return params_.scatter_values(site_whole(std::move(theta)));
  if (mix_ < 0) {  // the correction θ̄' − θ_sent
    for (std::size_t i = 0; i < theta.size(); ++i)
      pending->result[i] = theta[i] - pending->result[i];
  } else {
    pending->result = std::move(theta);  // θ̄' itself, merged on landing
  }
  pending->result = site_whole(std::move(pending->result));
  pending_ = std::move(pending);
}

void SiteTraining::penalize(int step, Meeting& m, const localsgd::CliquePenalty::Outcome& out) {
  const auto& sites = rounds_[m.round][static_cast<std::size_t>(m.clique)].sites;
  std::map<std::size_t, int> layers_of;  // site -> layers it was dropped in
  for (const auto& [layer, member] : out.dropped) {
    const auto site = sites[static_cast<std::size_t>(member)];
    m.edit_dropped.emplace_back(layer, site);
    ++layers_of[site];
  }
  m.edit_skipped = out.skipped;
  m.edit_weight_max = out.max_weight;
  if (cliques_[m.round].rank() != 0) return;
  for (const auto& [site, count] : layers_of) {
    fmt::print(stderr,
               "atoll train: step {}: EDiT dropped site {} in {} of {} layers (clique {})\n", step,
               topology_.site(site).code, count, penalty_->layers(), m.clique);
  }
}

void SiteTraining::apply_pending() {
  clock_->land();
  merge_pending();
}

void SiteTraining::merge_pending() {
  if (!pending_) return;
  std::vector<float> theta(params_.elements());
  params_.gather_values(theta);
  const auto& r = pending_->result;
  if (mix_ < 0) {  // θ += θ̄' − θ_sent: the local steps since the meeting kept whole
    for (std::size_t i = 0; i < theta.size(); ++i) theta[i] += r[i];
  } else {  // Streaming DiLoCo: θ = α θ + (1 − α) θ̄'
    const auto a = static_cast<float>(mix_);
    for (std::size_t i = 0; i < theta.size(); ++i) theta[i] = a * theta[i] + (1.0f - a) * r[i];
  }
  params_.scatter_values(theta);
  pending_.reset();
}

void SiteTraining::finish() {
  apply_pending();
  ended_ = sites_comm_.wtime() - excluded_;
}

std::uint64_t SiteTraining::bytes_sent() const {
  std::uint64_t b = 0;
  for (const auto& c : cliques_) b += c.traffic().bytes_sent;
  return b;
}

double SiteTraining::wall() const { return sites_comm_.wtime() - wall0_ - excluded_; }

double SiteTraining::training_span(comm::Communicator& comm) const {
  // From the latest site's first step (the model clock starts every site together; an earlier
  // start only waits at its first meeting) to the latest end.
  const double end =
      comm.allreduce_value(ended_ ? *ended_ : sites_comm_.wtime() - excluded_, comm::ReduceOp::max);
  return end - comm.allreduce_value(wall0_, comm::ReduceOp::max);
}

void SiteTraining::with_mean_anchor(comm::Communicator& comm, const std::function<void()>& f) {
  const double begin = comm.wtime();  // validation is not training time: wall() leaves it out
  evaluate_mean_anchor(comm, f);
  if (started_) excluded_ += comm.wtime() - begin;
}

void SiteTraining::evaluate_mean_anchor(comm::Communicator& comm, const std::function<void()>& f) {
  if (!state_) {
    spread_ = 0;
    return f();
  }
  std::vector<float> mine(params_.elements());
  params_.gather_values(mine);
  // An anchor whose exchange is still in flight is not known yet: the one before it. Averaged
  // over the sites by slice (2-D mesh), then made whole on every rank of the site.
  std::vector<float> mean = pending_ ? pending_->anchor : state_->anchor();
  localsgd::average(sites_comm_, mean);
  mean = site_whole(std::move(mean));
  const std::vector<float> own = site_whole(pending_ ? pending_->anchor : state_->anchor());
  double off = 0, norm = 0;
  for (std::size_t i = 0; i < mean.size(); ++i) {
    const double d = double(own[i]) - mean[i];
    off += d * d;
    norm += double(mean[i]) * mean[i];
  }
  spread_ = comm.allreduce_value(norm > 0 ? std::sqrt(off / norm) : 0.0, comm::ReduceOp::max);
  params_.scatter_values(mean);
  f();
  params_.scatter_values(mine);
}

}  // namespace atl::train
