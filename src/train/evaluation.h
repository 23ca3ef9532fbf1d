// Validation: mean next-token loss and perplexity of a model on the validation windows, and the
// unigram baseline. Private to src/train.
#pragma once

#include <cstdint>
#include <vector>

#include "atoll/comm/communicator.h"
#include "atoll/train/corpus.h"
#include "model.h"

namespace atl::train {

struct Evaluation {
  double loss = 0;
  double perplexity = 0;
};

// Each rank evaluates its share of the windows (batch × (seq_len + 1) tokens, as
// validation_windows gives them); summed over ranks. Collective.
Evaluation evaluate(comm::Communicator& comm, Gpt& model, const std::vector<std::int64_t>& windows,
                    int seq_len);

// The unigram baseline: perplexity of the validation windows' predicted tokens under the training
// split's word frequencies (add-one smoothed over the vocabulary). Collective.
double unigram_perplexity(comm::Communicator& comm, const Vocabulary& vocab,
                          const std::vector<std::int64_t>& windows, int seq_len);

}  // namespace atl::train
