// The trainer's parts, one process, no MPI: the row-wise optimizer against LibTorch's AdamW, the
// embedding's gradient and rows, flat parameter buffers, top-k with error feedback, the step timer
// and the metrics log.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "checkpoint.h"
#include "dense_sync.h"
#include "embedding_grad.h"
#include "embedding_rows.h"
#include "finite_values.h"
#include "flat_params.h"
#include "lazy_adamw.h"
#include "local_sgd_shards.h"
#include "model.h"
#include "run_log.h"
#include "step_timer.h"
#include "topk_feedback.h"

namespace {

using namespace atl;
using namespace atl::train;

TEST(LazyAdamW, TouchingEveryRowEqualsTorchAdamW) {
  torch::manual_seed(3);
  auto w_lazy = torch::randn({5, 3});
  auto w_ref = w_lazy.clone().set_requires_grad(true);
  torch::optim::AdamW ref({w_ref}, torch::optim::AdamWOptions(0.01).weight_decay(0.1));
  LazyAdamW lazy(w_lazy);
  for (int t = 1; t <= 4; ++t) {
    auto g = torch::randn({5, 3});
    RowGradient rows;
    for (int r = 0; r < 5; ++r) rows.rows.push_back(r);
    rows.values.assign(g.data_ptr<float>(), g.data_ptr<float>() + 15);
    lazy.step(w_lazy, rows, 0.01, 0.1, t);
    w_ref.mutable_grad() = g;
    ref.step();
  }
  EXPECT_TRUE(torch::allclose(w_lazy, w_ref.detach(), 1e-6, 1e-6));
}

TEST(LazyAdamW, UntouchedRowsDoNotMoveAndStateRoundTrips) {
  auto w = torch::ones({4, 2});
  LazyAdamW opt(w);
  RowGradient g;
  g.rows = {2};
  g.values = {1.0f, -1.0f};
  opt.step(w, g, 0.1, 0.0, 1);
  EXPECT_TRUE(torch::equal(w[0], torch::ones({2})));
  EXPECT_FALSE(torch::equal(w[2], torch::ones({2})));
  torch::serialize::OutputArchive out;
  opt.save(out, "x");
  std::stringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  LazyAdamW copy(w);
  copy.load(in, "x");
  auto w1 = w.clone(), w2 = w.clone();
  opt.step(w1, g, 0.1, 0.0, 2);
  copy.step(w2, g, 0.1, 0.0, 2);
  EXPECT_TRUE(torch::equal(w1, w2));
}

TEST(EmbeddingRows, SparseAndDenseFormsGiveTheSameRows) {
  const std::int64_t E = 2;
  sync::SyncResult<std::uint32_t> sparse_form, dense_form;
  sparse_form.sparse.elements = 8;
  sparse_form.sparse.indices = {0, 1, 5, 6, 7};  // row 0, row 2 (index 5), row 3
  sparse_form.sparse.values = {2, 4, 6, 0, 0};   // row 3 sums to exactly zero: skipped
  dense_form.dense_form = true;
  dense_form.dense = {2, 4, 0, 0, 0, 6, 0, 0};
  for (const auto* r : {&sparse_form, &dense_form}) {
    const auto rows = touched_rows(*r, E, 0.5);
    EXPECT_EQ(rows.rows, (std::vector<std::int64_t>{0, 2}));
    EXPECT_EQ(rows.values, (std::vector<float>{1, 2, 0, 3}));
  }
}

// Random results (partial and whole rows, rows summing to zero, index 0 and M - 1, E not a power
// of two, both index widths): the sparse form's one-pass walk gives the dense form's rows exactly.
template <class Index>
void check_random_rows(std::int64_t E, std::int64_t V, double density, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0, 1);
  sync::SyncResult<Index> sparse_form, dense_form;
  const auto M = static_cast<std::size_t>(E * V);
  sparse_form.sparse.elements = M;
  dense_form.dense_form = true;
  dense_form.dense.assign(M, 0.0f);
  for (std::size_t i = 0; i < M; ++i) {
    if (i != 0 && i != M - 1 && u(rng) >= density) continue;
    const float v = u(rng) < 0.1 ? 0.0f : static_cast<float>(u(rng) - 0.5);
    sparse_form.sparse.indices.push_back(static_cast<Index>(i));
    sparse_form.sparse.values.push_back(v);
    dense_form.dense[i] = v;
  }
  const auto a = touched_rows(sparse_form, E, 1.0 / 3), b = touched_rows(dense_form, E, 1.0 / 3);
  EXPECT_EQ(a.rows, b.rows) << "E " << E << " density " << density;
  EXPECT_EQ(a.values, b.values) << "E " << E << " density " << density;
  if (E == 1) return;
  // The same sum as rows (a Zen result of blocks of E): the same rows.
  sync::SyncResult<Index> row_form;
  row_form.sparse = sparse::group_blocks(sparse_form.sparse, static_cast<std::uint32_t>(E));
  const auto c = touched_rows(row_form, E, 1.0 / 3);
  EXPECT_EQ(c.rows, b.rows) << "rows, E " << E << " density " << density;
  EXPECT_EQ(c.values, b.values) << "rows, E " << E << " density " << density;
}

// --embedding-mean touched: three workers' weights (1/3 each) at the rows their Δ holds, as rows
// and as elements, summed; each summed row divided by its touching weight is the mean over the
// workers that touched it.
TEST(EmbeddingRows, MeanOverTheWorkersThatTouchedARow) {
  const std::int64_t E = 2, V = 4;
  // Worker 0 touched rows 0 and 3 (index 0 and M - 1), worker 1 row 3, worker 2 nothing.
  sparse::SparseGradient<std::uint32_t> w0_rows, w1_elements, w2_empty;
  w0_rows.elements = w1_elements.elements = w2_empty.elements = E * V;
  w0_rows.width = 2;
  w0_rows.indices = {0, 3};
  w0_rows.values = {3, 6, 9, 12};
  w1_elements.indices = {6, 7};  // row 3 as elements
  w1_elements.values = {3, 0};
  std::vector<float> sum(V, 0.0f);
  for (const auto* w : {&w0_rows, &w1_elements, &w2_empty}) {
    std::vector<float> mine(V, 0.0f);
    set_row_weights(*w, E, 1.0f / 3, mine);
    for (std::int64_t r = 0; r < V; ++r) sum[r] += mine[r];
  }
  EXPECT_FLOAT_EQ(sum[0], 1.0f / 3);
  EXPECT_EQ(sum[1], 0.0f);
  EXPECT_FLOAT_EQ(sum[3], 2.0f / 3);
  // Σ w_i Δ_i: row 0 = (3, 6)/3, row 3 = ((9, 12) + (3, 0))/3.
  RowGradient rows;
  rows.rows = {0, 3};
  rows.values = {1, 2, 4, 4};
  divide_by_row_weights(rows, E, sum);
  EXPECT_FLOAT_EQ(rows.values[0], 3);  // worker 0's own Δ: it alone touched row 0
  EXPECT_FLOAT_EQ(rows.values[1], 6);
  EXPECT_FLOAT_EQ(rows.values[2], 6);  // the mean of workers 0 and 1
  EXPECT_FLOAT_EQ(rows.values[3], 6);
  std::vector<float> short_weights(2, 1.0f);
  EXPECT_THROW(divide_by_row_weights(rows, E, short_weights), std::out_of_range);
  EXPECT_THROW(set_row_weights(w0_rows, E, 1.0f, short_weights), std::out_of_range);
}

// Zen's row form read in place (no copy of the summed rows): the rows touched_rows would give,
// bit for bit, to every reader: LazyAdamW, owned_rows, a row of zeros skipped (index 0 and V - 1,
// E not a power of two, a scale that is not 1), for both index widths.
template <class Index>
void check_in_place_rows() {
  const std::int64_t E = 3, V = 6;
  sync::SyncResult<Index> result;
  result.sparse.elements = static_cast<std::uint64_t>(E * V);
  result.sparse.width = static_cast<std::uint32_t>(E);
  result.sparse.indices = {0, 2, 3, 5};                                  // row 3 sums to zero
  result.sparse.values = {1, -2, 3, 0.5f, 0, 7, 0, 0, 0, -4, 1e-3f, 9};  // rows × E
  const double scale = 1.0 / 3;
  const auto copied = touched_rows(result, E, scale);
  const auto in_place = in_place_rows(result, E, scale);
  ASSERT_TRUE(in_place.is_in_place());
  for (std::size_t k = 0; k < 4; ++k)  // not copied
    EXPECT_EQ(in_place.in_place[k], result.sparse.values.data() + k * E);
  const auto owned = owned_rows(in_place, E);
  EXPECT_EQ(owned.rows, copied.rows);
  EXPECT_EQ(owned.values, copied.values);
  EXPECT_EQ(copied.rows, (std::vector<std::int64_t>{0, 2, 5}));
  // The same result as views (SchemeOptions::row_views): each row's values elsewhere, in another
  // order, as the pulled blocks of several servers hold them.
  sync::SyncResult<Index> viewed;
  viewed.sparse.elements = result.sparse.elements;
  viewed.sparse.width = result.sparse.width;
  viewed.sparse.indices = result.sparse.indices;
  const std::vector<std::size_t> place{2, 0, 3, 1};  // row k's values at place[k] · E
  std::vector<float> blocks(result.sparse.values.size());
  for (std::size_t k = 0; k < 4; ++k) {
    std::copy_n(result.sparse.values.data() + k * E, E, blocks.data() + place[k] * E);
    viewed.views.push_back(blocks.data() + place[k] * E);
  }
  EXPECT_EQ(viewed.checksum(), result.checksum());
  EXPECT_EQ(viewed.to_dense(), result.to_dense());
  const auto from_views = in_place_rows(viewed, E, scale);
  ASSERT_TRUE(from_views.is_in_place());
  EXPECT_EQ(from_views.in_place[1], blocks.data());  // not copied
  EXPECT_EQ(owned_rows(from_views, E).values, copied.values);
  EXPECT_EQ(touched_rows(viewed, E, scale).values, copied.values);
  EXPECT_EQ(touched_rows(viewed, E, scale).rows, copied.rows);
  auto w1 = torch::linspace(-1, 1, V * E).reshape({V, E}), w2 = w1.clone(), w3 = w1.clone();
  LazyAdamW a(w1), b(w2), c(w3);
  for (std::int64_t t = 1; t <= 3; ++t) {
    a.step(w1, copied, 0.1, 0.01, t);
    b.step(w2, in_place, 0.1, 0.01, t);
    c.step(w3, from_views, 0.1, 0.01, t);
  }
  EXPECT_TRUE(torch::equal(w1, w2));
  EXPECT_TRUE(torch::equal(w1, w3));
  // Another form (elements) is copied as before.
  sync::SyncResult<Index> elements;
  sparse::expand_blocks(result.sparse, elements.sparse);
  EXPECT_FALSE(in_place_rows(elements, E, scale).is_in_place());
  // No rows at all: in place, nothing to read.
  sync::SyncResult<Index> empty;
  empty.sparse.elements = result.sparse.elements;
  empty.sparse.width = static_cast<std::uint32_t>(E);
  EXPECT_TRUE(owned_rows(in_place_rows(empty, E, scale), E).rows.empty());
}

TEST(EmbeddingRows, InPlaceRowsReadLikeCopiedRows) {
  check_in_place_rows<std::uint32_t>();
  check_in_place_rows<std::uint64_t>();
}

TEST(EmbeddingRows, OnePassWalkMatchesTheDenseForm) {
  for (const std::int64_t E : {1, 3, 7, 64}) {
    for (const double density : {0.0, 0.01, 0.3, 1.0}) {
      check_random_rows<std::uint32_t>(E, 37, density, 11);
      check_random_rows<std::uint64_t>(E, 37, density, 12);
    }
  }
  sync::SyncResult<std::uint32_t> empty;  // no entries, no rows
  EXPECT_TRUE(touched_rows(empty, 4, 1.0).rows.empty());
}

TEST(EmbeddingGrad, RowsBecomeElementIndices) {
  torch::nn::Embedding emb(torch::nn::EmbeddingOptions(6, 3).sparse(true));
  auto loss = emb(torch::tensor({4, 1, 4}, torch::kLong)).sum();
  loss.backward();
  const auto g = embedding_gradient<std::uint32_t>(emb->weight);
  EXPECT_EQ(g.elements, 18u);
  EXPECT_EQ(g.indices, (std::vector<std::uint32_t>{3, 4, 5, 12, 13, 14}));
  EXPECT_EQ(g.values, (std::vector<float>{1, 1, 1, 2, 2, 2}));
  torch::nn::Embedding unused(torch::nn::EmbeddingOptions(6, 3).sparse(true));
  EXPECT_EQ(embedding_gradient<std::uint64_t>(unused->weight).nnz(), 0u);
  // As rows: one index per row, the same values, the same dense vector.
  const auto r = embedding_gradient<std::uint32_t>(emb->weight, {}, 0, true);
  EXPECT_EQ(r.width, 3u);
  EXPECT_EQ(r.indices, (std::vector<std::uint32_t>{1, 4}));
  EXPECT_EQ(r.values, g.values);
  EXPECT_FALSE(r.check().has_value());
  EXPECT_EQ(r.to_dense(), g.to_dense());
}

// A compact table (the sharded embedding: rows 2, 5 and 9 of a 10-row vocabulary) gives the
// element indices of the whole table: compact row k stands for id rows_held[k].
TEST(EmbeddingGrad, CompactRowsMapToIds) {
  torch::nn::Embedding emb(torch::nn::EmbeddingOptions(3, 2).sparse(true));
  const auto held = torch::tensor({2, 5, 9}, torch::kLong);
  auto ids = torch::tensor({9, 2, 9}, torch::kLong);
  auto loss = emb(torch::searchsorted(held, ids)).sum();
  loss.backward();
  const auto g = embedding_gradient<std::uint32_t>(emb->weight, held, 10);
  EXPECT_EQ(g.elements, 20u);
  EXPECT_EQ(g.indices, (std::vector<std::uint32_t>{4, 5, 18, 19}));
  EXPECT_EQ(g.values, (std::vector<float>{1, 1, 2, 2}));
}

TEST(FlatParams, GradientsAndValuesRoundTrip) {
  auto a = torch::arange(6, torch::kFloat).reshape({2, 3}).set_requires_grad(true);
  auto b = torch::full({2}, 7.0f).set_requires_grad(true);
  FlatParams flat({a, b});
  ASSERT_EQ(flat.elements(), 8u);
  std::vector<float> buf(8, -1.0f);
  flat.gather_grads(buf);  // no gradients yet: zeros
  EXPECT_EQ(buf, std::vector<float>(8, 0.0f));
  flat.gather_values(buf);
  EXPECT_EQ(buf, (std::vector<float>{0, 1, 2, 3, 4, 5, 7, 7}));
  std::vector<float> g{1, 2, 3, 4, 5, 6, 7, 8};
  flat.scatter_grads(g, 0.5f);
  EXPECT_TRUE(torch::equal(b.grad(), torch::tensor({3.5f, 4.0f})));
  flat.scatter_values(g);
  EXPECT_TRUE(
      torch::equal(a.detach(), torch::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}).reshape({2, 3})));
  std::vector<float> wrong(3);
  EXPECT_THROW(flat.gather_values(wrong), std::invalid_argument);
}

// Longer than the scaled copy's blocks of 64 (a block and a tail in each parameter): every value
// scaled as one multiplication, the same bits as computed here.
TEST(FlatParams, ScatterGradsScalesEveryValueOfBlocksAndTail) {
  auto a = torch::zeros({150}).set_requires_grad(true);
  auto b = torch::zeros({64}).set_requires_grad(true);
  auto c = torch::zeros({1}).set_requires_grad(true);  // tails alone
  auto d = torch::zeros({63}).set_requires_grad(true);
  FlatParams flat({a, b, c, d});
  std::vector<float> g(278);
  for (std::size_t i = 0; i < g.size(); ++i) g[i] = static_cast<float>(i) * 0.7f - 3.0f;
  const float scale = 1.0f / 3;
  flat.scatter_grads(g, scale);
  std::vector<float> back(278);
  EXPECT_EQ(flat.gather_grads(back), -1);
  for (std::size_t i = 0; i < g.size(); ++i) ASSERT_EQ(back[i], g[i] * scale) << i;
}

TEST(FlatParams, ScatterRangeCopiesWholeParametersOnly) {
  auto a = torch::zeros({2, 3});
  auto b = torch::zeros({2});
  auto c = torch::zeros({1});
  FlatParams flat({a, b, c});
  std::vector<float> v{1, 2, 3, 4, 5, 6, 7, 8, 9};
  flat.scatter_range(v, 6, 8);  // b only
  EXPECT_TRUE(torch::equal(b, torch::tensor({7.f, 8.f})));
  EXPECT_TRUE(torch::equal(a, torch::zeros({2, 3})));
  EXPECT_TRUE(torch::equal(c, torch::zeros({1})));
  flat.scatter_range(v, 0, 9);  // everything
  EXPECT_TRUE(torch::equal(c, torch::tensor({9.f})));
  EXPECT_THROW(flat.scatter_range(v, 3, 8), std::invalid_argument);  // cuts a
  EXPECT_THROW(flat.scatter_range(v, 6, 7), std::invalid_argument);  // cuts b
}

// Parameters a (2 × 3), b (2) and c (1) whose gradients are g = 1..9 in the flat view.
struct ThreeGradients {
  torch::Tensor a = torch::zeros({2, 3}).set_requires_grad(true);
  torch::Tensor b = torch::zeros({2}).set_requires_grad(true);
  torch::Tensor c = torch::zeros({1}).set_requires_grad(true);
  FlatParams flat{{a, b, c}};
  std::vector<float> g{1, 2, 3, 4, 5, 6, 7, 8, 9};
  ThreeGradients() { flat.scatter_grads(g, 1.0f); }
};

// One unit's gradients (DDP's overlapped sums): whole parameters only, the rest left alone.
TEST(FlatParams, GatherGradsRangeTakesWholeParametersOnly) {
  ThreeGradients t;
  auto& [a, b, c, flat, g] = t;
  c.mutable_grad() = torch::Tensor();  // c has no gradient on this rank: zeros
  std::vector<float> buf(9, -1.0f);
  flat.gather_grads_range(buf, 6, 9);  // b and c
  EXPECT_EQ(buf, (std::vector<float>{-1, -1, -1, -1, -1, -1, 7, 8, 0}));
  flat.gather_grads_range(buf, 0, 6);
  EXPECT_EQ(buf, (std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 0}));
  EXPECT_THROW(flat.gather_grads_range(buf, 3, 9), std::invalid_argument);  // cuts a
}

// The checks run in blocks of 64 values and a scalar tail: a bad value is found at every place
// of both, at every length around the block size; the copy is bit for bit.
TEST(FiniteValues, EveryPositionOfBlocksAndTail) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::size_t n : {0u, 1u, 63u, 64u, 65u, 128u, 130u, 200u}) {
    std::vector<float> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<float>(i) - 50.5f;
    if (n > 0) v[n / 2] = std::numeric_limits<float>::denorm_min();  // finite
    std::vector<float> out(n + 1, 7.0f);
    EXPECT_TRUE(all_finite(v)) << n;
    EXPECT_TRUE(copy_all_finite(v, out.data())) << n;
    EXPECT_EQ(std::memcmp(out.data(), v.data(), n * sizeof(float)), 0);
    EXPECT_EQ(out[n], 7.0f) << "wrote past the end at " << n;
    for (const float bad : {nan, inf, -inf})
      for (std::size_t at = 0; at < n; ++at) {
        auto w = v;
        w[at] = bad;
        EXPECT_FALSE(all_finite(w)) << n << " " << at;
        EXPECT_FALSE(copy_all_finite(w, out.data())) << n << " " << at;
        EXPECT_EQ(std::memcmp(out.data(), w.data(), n * sizeof(float)), 0);
      }
  }
}

// The copy into the flat buffer checks the gradients in the same pass: it names the first
// parameter (list index) holding a NaN or an infinity, in any position, and still copies all.
TEST(FlatParams, GatherGradsNamesTheFirstNonFiniteParameter) {
  ThreeGradients t;
  auto& [a, b, c, flat, g] = t;
  std::vector<float> buf(9, -1.0f);
  EXPECT_EQ(flat.gather_grads(buf), -1);
  EXPECT_EQ(buf, g);
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const float bad : {nan, inf, -inf}) {
    for (std::size_t at : {0u, 5u, 6u, 8u}) {  // first and last value of a, b and c
      auto h = g;
      h[at] = bad;
      flat.scatter_grads(h, 1.0f);
      const int want = at < 6 ? 0 : at < 8 ? 1 : 2;
      EXPECT_EQ(flat.gather_grads(buf), want) << "value " << bad << " at " << at;
      EXPECT_EQ(std::memcmp(buf.data(), h.data(), h.size() * sizeof(float)), 0);
      EXPECT_EQ(flat.gather_grads_range(buf, 6, 9), at < 6 ? -1 : want);  // b and c only
    }
  }
  auto h = g;  // two bad parameters: the first is named
  h[7] = nan;
  h[8] = inf;
  flat.scatter_grads(h, 1.0f);
  EXPECT_EQ(flat.gather_grads(buf), 1);
  h[7] = std::numeric_limits<float>::max();  // large and denormal values are finite
  h[8] = std::numeric_limits<float>::denorm_min();
  flat.scatter_grads(h, 1.0f);
  EXPECT_EQ(flat.gather_grads(buf), -1);
}

// DenseSync's units must each be one consecutive run of parameters (one flat range per unit).
TEST(DenseSync, UnitsMustBeConsecutive) {
  std::vector<torch::Tensor> p{torch::zeros({2}), torch::zeros({3}), torch::zeros({1})};
  DenseSync ok(p, 1 << 20, 0.0);
  EXPECT_FALSE(ok.overlaps());
  ok.set_units({1, 1, 3});
  EXPECT_TRUE(ok.overlaps());
  DenseSync split(p, 1 << 20, 0.0);
  EXPECT_THROW(split.set_units({1, 2, 1}), std::invalid_argument);
  EXPECT_THROW(split.set_units({1, 2}), std::invalid_argument);
  DenseSync topk(p, 1 << 20, 0.5);
  topk.set_units({0, 0, 0});
  EXPECT_FALSE(topk.overlaps());  // top-k sums after the backward pass
}

// Parts of the flat view that cut parameters (the 2-D mesh's shards).
TEST(FlatParams, PartsMayCutParameters) {
  auto a = torch::zeros({2, 3});
  auto b = torch::zeros({2});
  auto c = torch::zeros({1});
  FlatParams flat({a, b, c});
  std::vector<float> v{1, 2, 3, 4};
  flat.scatter_part(v, 4);  // a's last two, b, c's none
  EXPECT_TRUE(torch::equal(a, torch::tensor({0.f, 0.f, 0.f, 0.f, 1.f, 2.f}).view({2, 3})));
  EXPECT_TRUE(torch::equal(b, torch::tensor({3.f, 4.f})));
  std::vector<float> got(3);
  flat.gather_part(got, 5);  // a[1][2], b
  EXPECT_EQ(got, (std::vector<float>{2, 3, 4}));
  std::vector<float> none;
  flat.gather_part(none, 9);                                      // empty part at the end
  EXPECT_THROW(flat.gather_part(got, 7), std::invalid_argument);  // beyond the buffer
}

// The mesh's shards: pieces of each unit, consecutive, the first n % S one larger.
TEST(StateShards, SplitCoversEveryElementOnce) {
  EXPECT_EQ(StateShards::split(7, 3), (std::vector<std::size_t>{3, 2, 2}));
  EXPECT_EQ(StateShards::split(2, 4), (std::vector<std::size_t>{1, 1, 0, 0}));
  EXPECT_EQ(StateShards::split(0, 2), (std::vector<std::size_t>{0, 0}));
  StateShards whole({{0, 0}, {0, 10}, {10, 13}}, 5, 4, nullptr);  // unsharded: the whole
  EXPECT_FALSE(whole.sharded());
  EXPECT_EQ(whole.local_elements(), 13u);
  EXPECT_EQ(whole.piece_begin(2), 10u);
  EXPECT_EQ(whole.local(2).size(), 3u);
  EXPECT_EQ(whole.rows(), 5);
  EXPECT_EQ(whole.sum_over_group({1.5, 2.0}), (std::vector<double>{1.5, 2.0}));
}

// The model's synchronization units: forward order, every parameter in one, dense ones contiguous.
TEST(ModelUnits, NamesMapToUnitsInForwardOrder) {
  ModelShape shape{50, 8, 16, 3, 2, 4, "full", {}};
  Gpt model(shape);
  EXPECT_EQ(unit_count(3), 6);
  EXPECT_EQ(unit_of("tok.weight", 3), 0);
  EXPECT_EQ(unit_of("embed_proj.weight", 3), 1);
  EXPECT_EQ(unit_of("pos.weight", 3), 1);
  EXPECT_EQ(unit_of("blocks.0.qkv.weight", 3), 2);
  EXPECT_EQ(unit_of("blocks.2.fc_out.bias", 3), 4);
  EXPECT_EQ(unit_of("ln_f.weight", 3), 5);
  EXPECT_EQ(unit_of("head.weight", 3), 5);
  int last = 0;
  for (const auto& p : model->named_parameters()) {  // registration order never goes back
    const int u = unit_of(p.key(), 3);
    EXPECT_GE(u, last) << p.key();
    last = u;
  }
  EXPECT_EQ(last, 5);
}

// The hooks see every unit's forward in order, and the backward's gradient hooks fire for the
// units after the input in reverse order (units 1 and 0 end with backward() itself).
TEST(ModelUnits, HooksSeeEveryUnit) {
  struct Recorder : LayerHooks {
    std::vector<std::string> seen;
    void forward_begin(int u) override { seen.push_back("f" + std::to_string(u)); }
    void forward_end(int u) override { seen.push_back("e" + std::to_string(u)); }
    void backward_end(int u) override { seen.push_back("b" + std::to_string(u)); }
  } rec;
  torch::manual_seed(1);
  ModelShape shape{50, 8, 16, 2, 2, 4, "full", {}};
  Gpt model(shape);
  auto tokens = torch::randint(0, 50, {2, 5}, torch::kLong);
  auto loss = model->loss(tokens, &rec);
  const auto without = model->loss(tokens);
  EXPECT_TRUE(torch::equal(loss, without));  // hooks change nothing
  loss.backward();
  EXPECT_EQ(rec.seen, (std::vector<std::string>{"f0", "e0", "f1", "e1", "f2", "e2", "f3", "e3",
                                                "f4", "e4", "b4", "b3", "b2", "b1"}));
}

TEST(TopkFeedback, SendsTheLargestAndKeepsTheRest) {
  TopkFeedback topk(5, 0.4);  // k = 2
  const auto first = topk.compress(std::vector<float>{1, -5, 2, 4, 0.5f});
  EXPECT_EQ(first.indices, (std::vector<std::uint32_t>{1, 3}));
  EXPECT_EQ(first.values, (std::vector<float>{-5, 4}));
  // The residual (1, 0, 2, 0, 0.5) is added to the next gradient: mass is never lost.
  const auto second = topk.compress(std::vector<float>{0, 0, 1, 0, 0});
  EXPECT_EQ(second.indices, (std::vector<std::uint32_t>{0, 2}));
  EXPECT_EQ(second.values, (std::vector<float>{1, 3}));
  auto r = topk.residual();
  EXPECT_TRUE(torch::equal(r, torch::tensor({0.f, 0.f, 0.f, 0.f, 0.5f})));
  TopkFeedback other(5, 0.4);
  other.set_residual(r);
  EXPECT_TRUE(torch::equal(other.residual(), r));
  EXPECT_THROW(other.set_residual(torch::zeros({4})), std::runtime_error);
}

TEST(TopkFeedback, DecayedResidual) {
  TopkFeedback topk(4, 0.25, 0, 0.5);  // k = 1; e <- 0.5 e + g
  auto s = topk.compress(std::vector<float>{4, 1, -2, 0});
  EXPECT_EQ(s.indices, (std::vector<std::uint32_t>{0}));
  EXPECT_EQ(s.values, (std::vector<float>{4}));
  // Residual (0, 1, -2, 0), halved, plus the new gradient: (0, 0.5, -1, 3).
  s = topk.compress(std::vector<float>{0, 0, 0, 3});
  EXPECT_EQ(s.indices, (std::vector<std::uint32_t>{3}));
  EXPECT_EQ(s.values, (std::vector<float>{3}));
  s = topk.compress(std::vector<float>{0, 0, 0, 0});  // (0, 0.25, -0.5, 0)
  EXPECT_EQ(s.indices, (std::vector<std::uint32_t>{2}));
  EXPECT_EQ(s.values, (std::vector<float>{-0.5f}));
  EXPECT_TRUE(torch::equal(topk.residual(), torch::tensor({0.f, 0.25f, 0.f, 0.f})));
  EXPECT_THROW(TopkFeedback(4, 0.25, 0, 0), std::invalid_argument);
  EXPECT_THROW(TopkFeedback(4, 0.25, 0, 1.5), std::invalid_argument);
}

// The residual's decay is recorded in a checkpoint; resuming with another is said, not silent.
TEST(RunRecord, PseudoTopkDecayRecordedAndNoted) {
  TrainConfig c;
  c.pseudo_topk = 0.01;
  c.pseudo_topk_decay = 0.95;
  const auto path = std::filesystem::temp_directory_path() / "atoll-run-record-decay.pt";
  {
    torch::serialize::OutputArchive out;
    write_run_record(out, run_record(c, 4, 1));
    out.save_to(path.string());
  }
  torch::serialize::InputArchive in;
  in.load_from(path.string());
  const auto saved = read_run_record(path, in);
  std::filesystem::remove(path);
  EXPECT_EQ(saved.pseudo_topk_decay, 0.95);
  EXPECT_TRUE(check_resume(saved, run_record(c, 4, 1)).notes.empty());
  c.pseudo_topk_decay = 1;
  const auto check = check_resume(saved, run_record(c, 4, 1));
  ASSERT_EQ(check.notes.size(), 1u);
  EXPECT_NE(check.notes[0].find("--pseudo-topk-decay 1 (the checkpoint's run had 0.95)"),
            std::string::npos)
      << check.notes[0];
  EXPECT_TRUE(check.refusals.empty());
}

TEST(StepTimer, NamedPhasesAddUp) {
  double now = 0;
  StepTimer t([&] { return now; });
  t.start("model");
  now = 2;
  t.start("sync");
  now = 3;
  t.start("model");  // again: adds to the first
  now = 3.5;
  t.stop();
  EXPECT_DOUBLE_EQ(t.seconds("model"), 2.5);
  EXPECT_DOUBLE_EQ(t.seconds("sync"), 1);
  EXPECT_DOUBLE_EQ(t.seconds("absent"), 0);
  EXPECT_DOUBLE_EQ(t.total(), 3.5);
  ASSERT_EQ(t.phases().size(), 2u);
  EXPECT_EQ(t.phases()[0].first, "model");
  t.reset();
  EXPECT_DOUBLE_EQ(t.total(), 0);
}

TEST(MetricsLog, ResumeDropsTheLinesAfterTheCheckpoint) {
  const auto dir = std::filesystem::temp_directory_path() / "atoll-metrics-log-test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  {
    MetricsLog log;
    log.open(dir, 0);
    for (int s = 1; s <= 4; ++s) log.record({{"step", s}});
  }
  {
    MetricsLog log;
    log.open(dir, 2);
    log.record({{"step", 3}, {"again", true}});
  }
  std::ifstream in(dir / "metrics.jsonl");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all, "{\"step\":1}\n{\"step\":2}\n{\"again\":true,\"step\":3}\n");
  std::filesystem::remove_all(dir);
}

}  // namespace
