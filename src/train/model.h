// The GPT-style decoder (LibTorch). Private to src/train: only torch translation units include it.
#pragma once

#include <torch/torch.h>

#include <string>

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

// The model's layers as units of synchronization and compute, in the order the forward pass uses
// them: 0 the token embedding, 1 the input (positions and the embedding projection), 2 + i block
// i, layers + 2 the output (final norm and head). The backward pass meets them in reverse.
inline int unit_count(int layers) { return layers + 3; }
// The unit of a dense parameter named as in named_parameters() ("blocks.3.fc.weight",
// "pos.weight").
int unit_of(const std::string& parameter_name, int layers);

// Called by GptImpl::loss around each unit's compute (LibTorch modules have no forward hooks):
// forward_begin(u) before unit u's forward, forward_end(u) after it, backward_end(u) once the
// backward pass has gone through unit u (fired from gradient hooks on the units' outputs; units 1
// and 0 end after loss.backward() returns, so the caller reports those).
class LayerHooks {
 public:
  virtual ~LayerHooks() = default;
  virtual void forward_begin(int unit) = 0;
  virtual void forward_end(int unit) = 0;
  virtual void backward_end(int unit) = 0;
};

struct GptImpl : torch::nn::Module {
  explicit GptImpl(const ModelShape& shape);
  // Mean next-token negative log-likelihood of `tokens` (batch × (T + 1)): inputs [0, T), targets
  // [1, T]. `sum_out`, if given, receives the summed (not averaged) loss for evaluation.
  // `hooks`, if given, sees every unit's forward and backward (see LayerHooks).
  torch::Tensor loss(const torch::Tensor& tokens, LayerHooks* hooks = nullptr);

  ModelShape shape;
  torch::nn::Embedding tok{nullptr};      // sparse gradient
  torch::nn::Linear embed_proj{nullptr};  // d_embed -> d_model, only when they differ
  torch::nn::Embedding pos{nullptr};
  torch::nn::ModuleList blocks;
  torch::nn::LayerNorm ln_f{nullptr};
  torch::nn::Linear head_full{nullptr};
  torch::nn::AdaptiveLogSoftmaxWithLoss head_adaptive{nullptr};
  torch::Tensor causal_mask;  // T × T, true above the diagonal (not a parameter)
  // The token ids whose rows `tok` holds, sorted (the 2-D mesh's sharded embedding keeps only the
  // rows a batch uses: sharded_embedding.h); undefined: the whole table, row = id.
  torch::Tensor tok_rows;
};
TORCH_MODULE(Gpt);

// Token windows (rows of seq_len + 1 ids, as sample_batch and validation_windows give them) as a
// rows × (seq_len + 1) tensor.
torch::Tensor to_tensor(const std::vector<std::int64_t>& tokens, int seq_len);

}  // namespace atl::train
