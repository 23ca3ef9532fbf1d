#include "atoll/train/corpus.h"

#include <gtest/gtest.h>

#include <fstream>
#include <set>

namespace atl::train {
namespace {

TEST(Corpus, TokenizerStripsTagsAndLowercases) {
  EXPECT_EQ(tokenize_line("\tThe/at Fulton/np-tl said/vbd ./."),
            (std::vector<std::string>{"the", "fulton", "said", "."}));
  // Only the last '/' separates the tag; a token without a tag is kept whole.
  EXPECT_EQ(tokenize_line("1/2/cd and/or/cc word"),
            (std::vector<std::string>{"1/2", "and/or", "word"}));
  EXPECT_TRUE(tokenize_line("   \t ").empty());
}

RawDocument doc(std::string name, std::vector<std::vector<std::string>> sentences) {
  return RawDocument{std::move(name), std::move(sentences)};
}

TEST(Corpus, VocabularyIsFrequencySortedWithSpecialsFirst) {
  const std::vector<RawDocument> docs = {doc("ca01", {{"b", "a", "b"}, {"c", "b", "a"}})};
  const auto v = Vocabulary::build(docs, 4);  // <eos>, <unk>, b (3), a (2); c (1) dropped
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v.word(kEos), "<eos>");
  EXPECT_EQ(v.word(kUnk), "<unk>");
  EXPECT_EQ(v.id("b"), 2u);
  EXPECT_EQ(v.id("a"), 3u);
  EXPECT_EQ(v.id("c"), kUnk);
  EXPECT_EQ(v.counts()[kEos], 2u);  // two sentences
  EXPECT_EQ(v.counts()[kUnk], 1u);  // the dropped "c"
  EXPECT_EQ(encode(v, docs), (std::vector<std::uint32_t>{2, 3, 2, kEos, kUnk, 2, 3, kEos}));
  // Ties are alphabetical, so the vocabulary does not depend on hash-map order.
  const auto tie = Vocabulary::build({doc("x", {{"y", "x"}})}, 4);
  EXPECT_EQ(tie.id("x"), 2u);
  EXPECT_EQ(tie.id("y"), 3u);
}

TEST(Corpus, VocabularyLargerThanTheWordsIsRefused) {
  const std::vector<RawDocument> docs = {doc("ca01", {{"a", "b"}})};
  EXPECT_NO_THROW(Vocabulary::build(docs, 4));
  try {
    Vocabulary::build(docs, 5);
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("only 2 distinct words"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Vocabulary::build(docs, 2), DataError);
}

class CorpusDir : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        std::filesystem::temp_directory_path() /
        ("atoll-corpus-test-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
         "-" + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
    // 20 documents ca01..ca20: document i holds the words w<i> x3 and "common".
    for (int i = 1; i <= 20; ++i) {
      std::ofstream(dir_ / ("ca" + std::string(i < 10 ? "0" : "") + std::to_string(i)))
          << "\n\tW" << i << "/nn w" << i << "/nn common/jj ./.\n\tw" << i << "/nn ./.\n";
    }
    std::ofstream(dir_ / "README") << "not a document\n";
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::filesystem::path dir_;
};

TEST_F(CorpusDir, SplitAndShardsAreDeterministicAndDisjoint) {
  CorpusOptions o{dir_, 10, 10};
  std::multiset<std::uint32_t> seen;
  std::size_t shard_docs = 0;
  for (int r = 0; r < 3; ++r) {
    const auto d = load_rank_data(o, r, 3);
    EXPECT_EQ(d.train_documents, 18u);  // ca10 and ca20 are validation
    shard_docs += d.shard_documents;
    // Each document is 8 tokens: "wi wi common ." <eos> "wi ." <eos>.
    EXPECT_EQ(d.train.size(), d.shard_documents * 8);
    EXPECT_EQ(d.validation.size(), 16u);
    EXPECT_EQ(d.vocab.word(2), ".");  // 36 times in training, then "common" 18 times
    EXPECT_EQ(d.vocab.word(3), "common");
  }
  EXPECT_EQ(shard_docs, 18u);
  // Validation words never enter the vocabulary (counted on training documents only).
  const auto d = load_rank_data(o, 0, 1);
  EXPECT_EQ(d.vocab.id("w10"), kUnk);
  EXPECT_EQ(d.vocab.id("w20"), kUnk);
}

TEST_F(CorpusDir, ErrorsNameTheProblem) {
  try {
    load_rank_data({dir_, 10, 10}, 0, 19);
    FAIL() << "expected DataError";
  } catch (const DataError& e) {
    EXPECT_NE(std::string(e.what()).find("world size 19 exceeds the 18 training documents"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(load_rank_data({dir_ / "missing", 10, 10}, 0, 1), DataError);
  std::filesystem::create_directories(dir_ / "empty");
  EXPECT_THROW(load_rank_data({dir_ / "empty", 10, 10}, 0, 1), DataError);
}

TEST(Corpus, BatchesDependOnlyOnSeedStepAndRank) {
  std::vector<std::uint32_t> stream(1000);
  for (std::size_t i = 0; i < stream.size(); ++i) stream[i] = static_cast<std::uint32_t>(i);
  const auto a = sample_batch(stream, 4, 16, 7, 3, 1);
  ASSERT_EQ(a.size(), 4u * 17);
  EXPECT_EQ(a, sample_batch(stream, 4, 16, 7, 3, 1));
  EXPECT_NE(a, sample_batch(stream, 4, 16, 7, 4, 1));
  EXPECT_NE(a, sample_batch(stream, 4, 16, 7, 3, 2));
  EXPECT_NE(a, sample_batch(stream, 4, 16, 8, 3, 1));
  for (std::size_t b = 0; b < 4; ++b) {  // contiguous windows of the stream
    for (std::size_t t = 1; t < 17; ++t) EXPECT_EQ(a[b * 17 + t], a[b * 17 + t - 1] + 1);
  }
  // A stream of exactly one window: the only offset is 0; shorter is refused.
  std::vector<std::uint32_t> one(17, 5);
  EXPECT_EQ(sample_batch(one, 2, 16, 1, 1, 0), std::vector<std::int64_t>(34, 5));
  EXPECT_THROW(sample_batch(std::vector<std::uint32_t>(16), 1, 16, 1, 1, 0), DataError);
}

TEST(Corpus, ValidationWindowsAreSharedOutByRank) {
  std::vector<std::uint32_t> stream(100);
  for (std::size_t i = 0; i < stream.size(); ++i) stream[i] = static_cast<std::uint32_t>(i);
  // 100 / 10 = 10 windows, capped at 4, spread: windows 0, 2, 5, 7 (start tokens 0, 20, 50, 70).
  std::vector<std::int64_t> starts;
  for (int r = 0; r < 3; ++r) {
    const auto w = validation_windows(stream, 9, 4, r, 3);
    for (std::size_t i = 0; i < w.size(); i += 10) starts.push_back(w[i]);
  }
  std::sort(starts.begin(), starts.end());
  EXPECT_EQ(starts, (std::vector<std::int64_t>{0, 20, 50, 70}));
}

}  // namespace
}  // namespace atl::train
