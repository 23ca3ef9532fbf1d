// The GPT-style decoder (LibTorch). Private to src/train: only torch translation units include it.
#pragma once

#include <torch/torch.h>

#include "atoll/train/trainer.h"

namespace atl::train {

struct BlockImpl : torch::nn::Module {
  explicit BlockImpl(const ModelShape& shape);
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& causal_mask);

  int heads;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, fc_out{nullptr};
};
TORCH_MODULE(Block);

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const ModelShape& shape);
  // Mean next-token negative log-likelihood of `tokens` (batch × (T + 1)): inputs [0, T), targets
  // [1, T]. `sum_out`, if given, receives the summed (not averaged) loss for evaluation.
  torch::Tensor loss(const torch::Tensor& tokens);

  ModelShape shape;
  torch::nn::Embedding tok{nullptr};      // sparse gradient
  torch::nn::Linear embed_proj{nullptr};  // d_embed -> d_model, only when they differ
  torch::nn::Embedding pos{nullptr};
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Linear head_full{nullptr};
  torch::nn::AdaptiveLogSoftmaxWithLoss head_adaptive{nullptr};
  torch::Tensor causal_mask;  // T × T, true above the diagonal (not a parameter)
};
TORCH_MODULE(Gpt);

// Token windows (rows of seq_len + 1 ids, as sample_batch and validation_windows give them) as a
// rows × (seq_len + 1) tensor.
torch::Tensor to_tensor(const std::vector<std::int64_t>& tokens, int seq_len);

}  // namespace atl::train
