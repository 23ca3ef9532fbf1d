#include "model.h"

#include <cmath>

namespace atl::train {

BlockImpl::BlockImpl(const ModelShape& s) : heads(s.heads) {
  const std::int64_t d = s.d_model;
  ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  qkv = register_module("qkv", torch::nn::Linear(d, 3 * d));
  proj = register_module("proj", torch::nn::Linear(d, d));
  ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({d})));
  fc = register_module("fc", torch::nn::Linear(d, 4 * d));
  fc_out = register_module("fc_out", torch::nn::Linear(4 * d, d));
  // GPT-2 style initialisation: N(0, 0.02), residual projections scaled down by depth.
  torch::NoGradGuard no_grad;
  for (auto* l : {&qkv, &proj, &fc, &fc_out}) {
    (*l)->weight.normal_(0, 0.02);
    (*l)->bias.zero_();
  }
  proj->weight.mul_(1.0 / std::sqrt(2.0 * s.layers));
  fc_out->weight.mul_(1.0 / std::sqrt(2.0 * s.layers));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x, const torch::Tensor& causal_mask) {
  const auto B = x.size(0), T = x.size(1), D = x.size(2);
  const auto hd = D / heads;
  auto h = qkv(ln1(x)).view({B, T, 3, heads, hd}).permute({2, 0, 3, 1, 4});  // 3,B,H,T,hd
  auto q = h[0], k = h[1], v = h[2];
  auto att = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(hd)));
  att = att.masked_fill(causal_mask.slice(0, 0, T).slice(1, 0, T),
                        -std::numeric_limits<float>::infinity());
  att = torch::softmax(att, -1);
  auto y = torch::matmul(att, v).transpose(1, 2).reshape({B, T, D});
  auto x1 = x + proj(y);
  return x1 + fc_out(torch::gelu(fc(ln2(x1))));
}

GptImpl::GptImpl(const ModelShape& s) : shape(s) {
  tok = register_module(
      "tok", torch::nn::Embedding(torch::nn::EmbeddingOptions(s.vocab, s.d_embed).sparse(true)));
  if (s.d_embed != s.d_model) {
    embed_proj = register_module("embed_proj", torch::nn::Linear(s.d_embed, s.d_model));
  }
  pos = register_module("pos", torch::nn::Embedding(s.seq_len, s.d_model));
  blocks = register_module("blocks", torch::nn::ModuleList());
  for (int i = 0; i < s.layers; ++i) blocks->push_back(Block(s));
  ln_f = register_module("ln_f", torch::nn::LayerNorm(torch::nn::LayerNormOptions({s.d_model})));
  if (s.head == "adaptive") {
    head_adaptive = register_module(
        "head", torch::nn::AdaptiveLogSoftmaxWithLoss(
                    torch::nn::AdaptiveLogSoftmaxWithLossOptions(s.d_model, s.vocab, s.cutoffs)
                        .div_value(4.0)));
  } else {
    head_full = register_module("head", torch::nn::Linear(s.d_model, s.vocab));
  }
  torch::NoGradGuard no_grad;
  tok->weight.normal_(0, 0.02);
  pos->weight.normal_(0, 0.02);
  if (head_full) {
    head_full->weight.normal_(0, 0.02);
    head_full->bias.zero_();
  }
  causal_mask = torch::ones({s.seq_len, s.seq_len}, torch::kBool).triu(1);
}

torch::Tensor GptImpl::loss(const torch::Tensor& tokens, LayerHooks* hooks) {
  const auto B = tokens.size(0), T = tokens.size(1) - 1;
  auto inputs = tokens.slice(1, 0, T);
  auto targets = tokens.slice(1, 1, T + 1).reshape({B * T});
  const int output_unit = unit_count(shape.layers) - 1;
  // Runs unit u's forward; its output's gradient hook marks the end of unit u + 1's backward.
  auto unit = [&](int u, auto&& compute) {
    if (hooks) hooks->forward_begin(u);
    torch::Tensor out = compute();
    if (hooks) {
      hooks->forward_end(u);
      if (u < output_unit && out.requires_grad()) {
        out.register_hook([hooks, u](const torch::Tensor& g) {
          hooks->backward_end(u + 1);
          return g;
        });
      }
    }
    return out;
  };
  auto x = unit(0, [&] {
    return tok(tok_rows.defined() ? torch::searchsorted(tok_rows, inputs.contiguous()) : inputs);
  });
  x = unit(1, [&] {
    auto y = embed_proj ? embed_proj(x) : x;
    return y + pos(torch::arange(T, torch::kLong)).unsqueeze(0);
  });
  for (std::size_t i = 0; i < blocks->size(); ++i) {
    x = unit(2 + static_cast<int>(i),
             [&] { return blocks[i]->as<Block>()->forward(x, causal_mask); });
  }
  return unit(output_unit, [&] {
    auto h = ln_f(x).reshape({B * T, shape.d_model});
    if (head_adaptive) return -head_adaptive(h, targets).output.mean();
    return torch::nn::functional::cross_entropy(head_full(h), targets);
  });
}

int unit_of(const std::string& name, int layers) {
  if (name.rfind("blocks.", 0) == 0) return 2 + std::stoi(name.substr(7));
  if (name.rfind("pos.", 0) == 0 || name.rfind("embed_proj.", 0) == 0) return 1;
  if (name.rfind("tok.", 0) == 0) return 0;
  return unit_count(layers) - 1;
}

torch::Tensor to_tensor(const std::vector<std::int64_t>& tokens, int seq_len) {
  const auto rows = static_cast<std::int64_t>(tokens.size()) / (seq_len + 1);
  return torch::from_blob(const_cast<std::int64_t*>(tokens.data()), {rows, seq_len + 1},
                          torch::kLong)
      .clone();
}

}  // namespace atl::train
