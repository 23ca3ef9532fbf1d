#include "layer_events.h"

#include <numeric>

namespace atl::train {

std::vector<double> unit_compute_weights(const Engine& engine, int layers) {
  std::vector<double> w(static_cast<std::size_t>(unit_count(layers)), 0.0);
  for (std::size_t k = 0; k < engine.dense.size(); ++k)
    w[unit_of(engine.dense_names[k], layers)] += static_cast<double>(engine.dense[k].numel());
  const double total = std::accumulate(w.begin(), w.end(), 0.0);
  if (total > 0)
    for (auto& x : w) x /= total;
  return w;
}

LayerEvents::LayerEvents(comm::Communicator& comm, std::vector<double> unit_weights,
                         double sim_compute_s, Timeline* timeline)
    : comm_(comm),
      weights_(std::move(unit_weights)),
      sim_compute_s_(sim_compute_s),
      timeline_(timeline),
      forward_begin_(weights_.size(), 0.0),
      backward_host_end_(weights_.size(), -1.0) {}

namespace {
double host_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

void LayerEvents::leave(double charge) {
  if (sim_compute_s_ > 0) comm_.fixed_compute_end(charge);
}

void LayerEvents::enter() {
  if (sim_compute_s_ > 0) comm_.fixed_compute_begin();
}

double LayerEvents::now() const { return timeline_ ? comm_.wtime() : 0.0; }

void LayerEvents::begin_step(int step, StepSync sync, StepTimer* timer) {
  step_ = step;
  sync_ = std::move(sync);
  timer_ = timer;
  std::fill(backward_host_end_.begin(), backward_host_end_.end(), -1.0);
  enter();
}

void LayerEvents::forward_begin(int unit) {
  leave(0);
  if (sync_.before_unit) {
    if (timer_) timer_->start("outer_sync");
    sync_.before_unit(unit);
    if (timer_) timer_->start("model");
  }
  if (sync_.gather_unit) {
    if (timer_) timer_->start("param_gather");
    sync_.gather_unit(unit);
    if (timer_) timer_->start("model");
  }
  forward_begin_[unit] = now();
  enter();
}

void LayerEvents::forward_end(int unit) {
  leave(sim_compute_s_ * weights_[unit] / 3);
  if (timeline_) {
    timeline_->record(step_, Timeline::Kind::forward, unit, forward_begin_[unit],
                      forward_begin_[unit], now());
  }
  if (sync_.progress) sync_.progress();
  enter();
}

void LayerEvents::begin_backward() {
  leave(0);
  backward_begin_ = now();
  backward_host_begin_ = host_seconds();
  comm_.fixed_compute_begin();  // SMPI: the backward is charged unit by unit in end_step
}

// Inside autograd: no MPI, no simulated time (see the header).
void LayerEvents::backward_end(int unit) {
  if (backward_host_end_[unit] < 0) backward_host_end_[unit] = host_seconds();
}

void LayerEvents::end_step() {
  const double host_end = host_seconds();
  double t = backward_begin_, host = backward_host_begin_;
  for (int u = static_cast<int>(weights_.size()) - 1; u >= 0; --u) {
    const double host_u = backward_host_end_[u] < 0 ? host_end : backward_host_end_[u];
    const double charge =
        sim_compute_s_ > 0 ? sim_compute_s_ * weights_[u] * 2 / 3 : std::max(0.0, host_u - host);
    comm_.fixed_compute_end(charge);
    const double end = t + charge;
    if (timeline_) timeline_->record(step_, Timeline::Kind::backward, u, t, t, end);
    if (sync_.after_backward) {
      if (timer_) timer_->start("dense_sync");
      sync_.after_backward(u);
      if (timer_) timer_->start("model");
    }
    // SMPI: the posts' own time moves the next units (the engine clock follows the charges).
    t = sync_.after_backward && comm::Communicator::simulated() ? now() : end;
    host = std::max(host, host_u);
    comm_.fixed_compute_begin();
  }
  comm_.fixed_compute_end(0);
}

}  // namespace atl::train
