#include "lazy_adamw.h"

#include <cmath>

namespace atl::train {

LazyAdamW::LazyAdamW(const torch::Tensor& weight)
    : m_(torch::zeros_like(weight)), v_(torch::zeros_like(weight)) {}

void LazyAdamW::step(torch::Tensor& weight, const RowGradient& g, double lr, double weight_decay,
                     std::int64_t t) {
  // One fused pass over the touched rows (index_select/index_copy would copy every row six
  // times); the arithmetic is LibTorch AdamW's, in float.
  const auto E = static_cast<std::size_t>(weight.size(1));
  float* w = weight.data_ptr<float>();
  float* mp = m_.data_ptr<float>();
  float* vp = v_.data_ptr<float>();
  const double bc1 = 1 - std::pow(beta1, static_cast<double>(t));
  const double bc2 = 1 - std::pow(beta2, static_cast<double>(t));
  const auto b1 = static_cast<float>(beta1), b2 = static_cast<float>(beta2);
  const auto decay = static_cast<float>(1 - lr * weight_decay);
  const auto step_size = static_cast<float>(lr / bc1);
  const auto inv_sqrt_bc2 = static_cast<float>(1 / std::sqrt(bc2));
  const auto e = static_cast<float>(eps);
  // Rows read in place are scaled here, the product touched_rows would have stored; owned rows
  // are scaled already (scale 1: the product is exact).
  const float scale = g.scale;
  for (std::size_t k = 0; k < g.rows.size(); ++k) {
    if (g.row_skipped(k, E)) continue;
    const std::size_t off = static_cast<std::size_t>(g.rows[k]) * E;
    const float* gr = g.row_values(k, E);
    for (std::size_t j = 0; j < E; ++j) {
      const float gj = gr[j] * scale;
      const float mj = b1 * mp[off + j] + (1 - b1) * gj;
      const float vj = b2 * vp[off + j] + (1 - b2) * gj * gj;
      mp[off + j] = mj;
      vp[off + j] = vj;
      w[off + j] = w[off + j] * decay - step_size * mj / (std::sqrt(vj) * inv_sqrt_bc2 + e);
    }
  }
}

void LazyAdamW::save(torch::serialize::OutputArchive& archive, const std::string& prefix) const {
  archive.write(prefix + "_m", m_, true);
  archive.write(prefix + "_v", v_, true);
}

void LazyAdamW::load(torch::serialize::InputArchive& archive, const std::string& prefix) {
  torch::Tensor m, v;
  archive.read(prefix + "_m", m, true);
  archive.read(prefix + "_v", v, true);
  if (!m.sizes().equals(m_.sizes()) || !v.sizes().equals(v_.sizes())) {
    throw std::runtime_error("checkpoint: the embedding optimizer's moments have the wrong shape");
  }
  m_.copy_(m);
  v_.copy_(v);
}

}  // namespace atl::train
