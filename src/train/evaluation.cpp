#include "evaluation.h"

#include <algorithm>
#include <cmath>

namespace atl::train {

Evaluation evaluate(comm::Communicator& comm, Gpt& model, const std::vector<std::int64_t>& windows,
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
  comm.allreduce(std::span<double>(sums, 2), comm::ReduceOp::sum);
  Evaluation e;
  e.loss = sums[1] > 0 ? sums[0] / sums[1] : 0;
  e.perplexity = std::exp(e.loss);
  return e;
}

double unigram_perplexity(comm::Communicator& comm, const Vocabulary& vocab,
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
  comm.allreduce(std::span<double>(sums, 2), comm::ReduceOp::sum);
  return sums[1] > 0 ? std::exp(sums[0] / sums[1]) : 0;
}

}  // namespace atl::train
