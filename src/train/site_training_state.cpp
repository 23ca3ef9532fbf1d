// SiteTraining's state in its checkpoint file (site_training.h): the model clocks, the meetings
// so far, the anchor and outer momentum, an exchange in flight, the --pseudo-topk residual and
// edit's detectors.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "site_training.h"

namespace atl::train {
namespace {

torch::Tensor floats_tensor(const std::vector<float>& v) {
  return torch::from_blob(const_cast<float*>(v.data()), {static_cast<std::int64_t>(v.size())},
                          torch::kFloat32)
      .clone();
}
torch::Tensor doubles_tensor(const std::vector<double>& v) {
  return torch::from_blob(const_cast<double*>(v.data()), {static_cast<std::int64_t>(v.size())},
                          torch::kFloat64)
      .clone();
}
template <class T>
std::vector<T> values_of(torch::serialize::InputArchive& ar, const char* key) {
  torch::Tensor t;
  ar.read(key, t);
  t = t.contiguous();
  return std::vector<T>(t.data_ptr<T>(), t.data_ptr<T>() + t.numel());
}
bool has_key(torch::serialize::InputArchive& ar, const std::string& key) {
  const auto keys = ar.keys();
  return std::find(keys.begin(), keys.end(), key) != keys.end();
}

}  // namespace

void SiteTraining::save(torch::serialize::OutputArchive& ar) const {
  ar.write("site_clocks", doubles_tensor(clock_->state()));
  ar.write("site_meetings", torch::tensor(static_cast<std::int64_t>(meetings_)));
  if (state_) {
    ar.write("site_anchor", floats_tensor(state_->anchor()));
    ar.write("site_momentum", floats_tensor(state_->momentum()));
  }
  if (sparse_) ar.write("site_topk_residual", sparse_->residual());
  if (penalty_) ar.write("site_penalty", doubles_tensor(penalty_->save()));
  if (pending_) {
    ar.write("site_pending_correction", floats_tensor(pending_->result));
    ar.write("site_pending_anchor", floats_tensor(pending_->anchor));
  }
}

void SiteTraining::load(torch::serialize::InputArchive& ar) {
  clock_->restore(values_of<double>(ar, "site_clocks"));
  torch::Tensor meetings;
  ar.read("site_meetings", meetings);
  meetings_ = static_cast<std::size_t>(meetings.item<std::int64_t>());
  // This rank's slice of the parameters (the whole with one rank per site), or all of them.
  const auto expect = [&](std::vector<float> v, bool slice = true) {
    const std::size_t n = slice ? hi_ - lo_ : params_.elements();
    if (v.size() != n) {
      throw std::runtime_error("the checkpoint's site state has " + std::to_string(v.size()) +
                               " parameters, this rank's " + (slice ? "slice of the " : "") +
                               "model " + std::to_string(n));
    }
    return v;
  };
  state_.reset();
  if (has_key(ar, "site_anchor")) {
    state_.emplace(expect(values_of<float>(ar, "site_anchor")));
    state_->momentum() = expect(values_of<float>(ar, "site_momentum"));
  }
  if (penalty_) {
    if (!has_key(ar, "site_penalty")) throw std::runtime_error("the checkpoint holds no penalty");
    penalty_->load(values_of<double>(ar, "site_penalty"));
  }
  if (sparse_) {
    if (!has_key(ar, "site_topk_residual")) {
      throw std::runtime_error("the checkpoint holds no --pseudo-topk residual");
    }
    torch::Tensor r;
    ar.read("site_topk_residual", r);
    sparse_->set_residual(r);
  }
  pending_.reset();
  if (has_key(ar, "site_pending_correction")) {
    pending_ = Pending{expect(values_of<float>(ar, "site_pending_correction"), false),
                       expect(values_of<float>(ar, "site_pending_anchor"))};
  }
}

std::uint64_t SiteTraining::state_bytes() const {
  std::size_t floats = 0;
  if (state_) floats += (overlap_ ? 4 : 2) * state_->anchor().size();  // overlap: + 2 copies
  return floats * sizeof(float) + (sparse_ ? sparse_->state_bytes() : 0);
}

}  // namespace atl::train
