// The golden test: every scheme against the dense reference, run by mpirun at world sizes 1..8
// and by smpirun at 16 ranks. Each rank regenerates every rank's gradient (deterministic in
// (seed, rank)) and sums them in double: the reference does not depend on any scheme or on MPI.
// A fatal failure (ASSERT_*) returns from the test on one rank only, and its peers would wait in
// the next collective until CTest's timeout: main() (mpi_test_main.h) installs a listener that ends
// the whole job at once (MPI_Abort) after printing the failure. EXPECT is still preferred inside
// collectives.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

#include "atoll/comm/communicator.h"
#include "atoll/comm/parallel.h"
#include "atoll/sparse/generator.h"
#include "atoll/sync/entry_fold.h"
#include "atoll/sync/scheme.h"
#include "atoll/util/memory.h"
#include "mpi_test_main.h"

namespace {

using namespace atl;
using comm::Communicator;
using sparse::SparseGradient;

Communicator* g_comm = nullptr;

// A case: how rank r's gradient is made for M elements.
template <class Index>
using Maker = std::function<SparseGradient<Index>(int rank, int world)>;

// `calls` calls of `scheme` on the case, each checked against the reference; and every rank ran
// the same scheme (`auto`'s pick and whether it was a trial), which it reports in its stats.
template <class Index>
void expect_exact_calls(sync::SyncScheme& scheme, const std::string& scheme_name,
                        const std::string& label, const Maker<Index>& make, bool exact, int calls) {
  Communicator& comm = *g_comm;
  const int n = comm.size();
  std::vector<SparseGradient<Index>> all;
  for (int r = 0; r < n; ++r) all.push_back(make(r, n));
  const std::uint64_t M = all[0].elements;
  std::vector<double> ref(M, 0.0), mag(M, 0.0);
  for (const auto& g : all)
    for (std::size_t k = 0; k < g.value_count(); ++k) {
      const std::uint64_t i = std::uint64_t{g.indices[k / g.width]} * g.width + k % g.width;
      ref[i] += g.values[k];
      mag[i] += std::fabs(g.values[k]);
    }
  sync::SyncResult<Index> out;
  for (int call = 0; call < calls; ++call) {
    scheme.synchronize(comm, all[comm.rank()], out);
    const auto pick = std::hash<std::string>{}(out.stats.chosen + (out.stats.exploring ? "+" : ""));
    const auto picks = comm.allgather<std::uint64_t>(pick);
    for (int r = 1; r < n; ++r) {
      EXPECT_EQ(picks[r], picks[0])
          << scheme_name << "/" << label << ": rank " << r << " ran another scheme than rank 0 ("
          << out.stats.chosen << " here)";
    }
    if (!out.dense_form) {
      SparseGradient<Index> held = out.sparse;  // with views (row_views): their values copied
      if (out.in_views()) {
        ASSERT_EQ(out.views.size(), held.indices.size()) << scheme_name << "/" << label;
        EXPECT_TRUE(held.values.empty()) << scheme_name << "/" << label;
        held.values.clear();
        for (std::size_t k = 0; k < held.indices.size(); ++k)
          held.values.insert(held.values.end(), out.block(k), out.block(k) + held.width);
      }
      EXPECT_FALSE(held.check().has_value())
          << scheme_name << "/" << label
          << ": result violates COO invariants: " << held.check().value_or("");
    }
    const auto got = out.to_dense();
    ASSERT_EQ(got.size(), M);
    std::size_t bad = 0;
    for (std::uint64_t i = 0; i < M; ++i) {
      const double tol = exact ? 0.0 : 4.0 * n * 1.2e-7 * mag[i];
      if (std::fabs(got[i] - ref[i]) > tol) {
        if (bad++ < 3) {
          ADD_FAILURE() << scheme_name << "/" << label << " n=" << n << " rank " << comm.rank()
                        << ": element " << i << " = " << got[i] << ", expected " << ref[i];
        }
      }
    }
    EXPECT_EQ(bad, 0u) << scheme_name << "/" << label;
    const auto sums = comm.allgather<std::uint64_t>(out.checksum());
    for (int r = 1; r < n; ++r) {
      EXPECT_EQ(sums[r], sums[0]) << scheme_name << "/" << label << ": rank " << r
                                  << " holds a different result from rank 0";
    }
  }
}

// SchemeOptions::fold_in_place: the scheme made with it and without it, called twice each on the
// case; the fold of the result made in place equals the fold of the full result on every rank
// (the full result is checked against the reference by the other tests), and Zen's element path
// does fold in place.
template <class Index>
void expect_fold_matches(const std::string& scheme_name, const std::string& label,
                         const Maker<Index>& make, const sync::SchemeOptions& options) {
  Communicator& comm = *g_comm;
  const auto grad = make(comm.rank(), comm.size());
  sync::SchemeOptions plain = options;
  plain.fold_in_place = false;
  auto folding = sync::make_scheme(scheme_name, options);
  auto full = sync::make_scheme(scheme_name, plain);
  sync::SyncResult<Index> in_place, whole;
  for (int call = 0; call < 2; ++call) {
    folding->synchronize(comm, grad, in_place);
    full->synchronize(comm, grad, whole);
    const bool zen_elements = scheme_name.rfind("zen", 0) == 0 && grad.width == 1;
    EXPECT_EQ(in_place.folded.has_value(), zen_elements || scheme_name == "auto")
        << scheme_name << "/" << label;
    const auto a = sync::fold_result(in_place), b = sync::fold_result(whole);
    EXPECT_EQ(a.sum, b.sum) << scheme_name << "/" << label << " rank " << comm.rank();
    EXPECT_EQ(a.count, b.count) << scheme_name << "/" << label << " rank " << comm.rank();
    std::uint64_t non_zero = 0;
    for (const float v : whole.to_dense()) non_zero += v != 0.0f;
    EXPECT_EQ(b.count, non_zero) << scheme_name << "/" << label;
  }
}

template <class Index>
void expect_exact_sum(const std::string& scheme_name, const std::string& label,
                      const Maker<Index>& make, bool exact, const sync::SchemeOptions& options) {
  if (options.fold_in_place) return expect_fold_matches<Index>(scheme_name, label, make, options);
  // Twice: the second call reuses `out` and the scheme's cached state.
  expect_exact_calls<Index>(*sync::make_scheme(scheme_name, options), scheme_name, label, make,
                            exact, 2);
}

template <class Index>
Maker<Index> zipf_case(std::uint64_t M, double density, sparse::ValueKind values,
                       std::uint64_t seed) {
  return [=](int r, int) {
    sparse::GeneratorOptions o{M, density, 1.1, seed, values};
    return sparse::generate_gradient<Index>(o, r);
  };
}

template <class Index>
Maker<Index> fixed_case(std::uint64_t M, std::function<std::vector<Index>(int, int)> indices) {
  return [=](int r, int n) {
    SparseGradient<Index> g;
    g.elements = M;
    g.indices = indices(r, n);
    for (std::size_t k = 0; k < g.indices.size(); ++k) g.values.push_back(float(r + 1 + k % 3));
    return g;
  };
}

// `call` must fail on this rank (as on every rank) with a CollectiveError naming `expected`.
void expect_refused(const std::function<void()>& call, const std::string& expected) {
  try {
    call();
    ADD_FAILURE() << "no error on rank " << g_comm->rank() << " (expected: " << expected << ")";
  } catch (const comm::CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
}

// Rank 0 passes `wide` (64-bit indices) where every other rank passes `narrow` (32-bit): the call
// must fail on every rank with the error that names the index width.
void expect_index_width_refused(sync::SyncScheme& scheme, const Maker<std::uint32_t>& narrow,
                                const Maker<std::uint64_t>& wide) {
  Communicator& comm = *g_comm;
  expect_refused(
      [&] {
        if (comm.rank() == 0) {
          sync::SyncResult<std::uint64_t> out;
          scheme.synchronize(comm, wide(0, comm.size()), out);
        } else {
          sync::SyncResult<std::uint32_t> out;
          scheme.synchronize(comm, narrow(comm.rank(), comm.size()), out);
        }
      },
      "index width differs");
}

// The same maker, each (rank, world size) made once per process and kept under `key`: each rank
// builds every rank's gradient for the reference, and each case of run_all_cases and
// run_row_cases runs under dozens of schemes and options (the Zipf draws' pow and log were most
// of golden_smpi_16's time: 16 simulated ranks in one process, each making all 16 gradients).
template <class Index>
Maker<Index> memoized(const std::string& key, Maker<Index> make) {
  return [key, make = std::move(make)](int r, int n) {
    static std::map<std::tuple<std::string, int, int>, SparseGradient<Index>> made;
    auto [it, fresh] = made.try_emplace(std::tuple{key, r, n});
    if (fresh) it->second = make(r, n);
    return it->second;
  };
}

// expect_exact_sum on a case of run_all_cases or run_row_cases, its gradients memoized.
template <class Index>
void expect_case(const std::string& scheme_name, const std::string& label, Maker<Index> make,
                 bool exact, const sync::SchemeOptions& options) {
  expect_exact_sum<Index>(scheme_name, label, memoized<Index>(label, std::move(make)), exact,
                          options);
}

template <class Index>
void run_all_cases(const std::string& scheme, const sync::SchemeOptions& options = {}) {
  using sparse::ValueKind;
  const std::uint64_t M = 10007;  // prime: never divisible by the world size
  for (double d : {0.0001, 0.001, 0.01, 0.05, 0.3, 1.0}) {
    expect_case<Index>(scheme, "zipf-int d=" + std::to_string(d),
                       zipf_case<Index>(M, d, ValueKind::integer, 11), true, options);
  }
  for (double d : {0.01, 0.3}) {
    expect_case<Index>(scheme, "zipf-float d=" + std::to_string(d),
                       zipf_case<Index>(M, d, ValueKind::normal, 12), false, options);
  }
  expect_case<Index>(
      scheme, "uniform M=65536",
      [](int r, int) {
        sparse::GeneratorOptions o{65536, 0.02, 0.0, 5, ValueKind::integer};
        return sparse::generate_gradient<Index>(o, r);
      },
      true, options);
  // Zen's pull in byte-balanced pipelined chunks (M = 100003: 24 buckets of 64 granules; 300007:
  // 73 buckets, up to 8 chunks); densities where servers pick COO (0.002) and the bitmap (0.05).
  // (The larger case only for the Zen schemes: 16 simulated ranks each building every rank's
  // gradient make it slow.)
  for (std::uint64_t big : {100003, 300007}) {
    if (big > 100003 && scheme.rfind("zen", 0) != 0) continue;
    for (double d : {0.002, 0.05}) {
      expect_case<Index>(scheme, "zipf-int M=" + std::to_string(big) + " d=" + std::to_string(d),
                         zipf_case<Index>(big, d, ValueKind::integer, 13), true, options);
    }
  }
  expect_case<Index>(scheme, "all empty",
                     fixed_case<Index>(M, [](int, int) { return std::vector<Index>{}; }), true,
                     options);
  expect_case<Index>(
      scheme, "odd ranks empty",
      [=](int r, int n) {
        sparse::GeneratorOptions o{M, 0.02, 1.1, 3, ValueKind::integer};
        auto g = sparse::generate_gradient<Index>(o, r);
        if (r % 2) g.indices.clear(), g.values.clear();
        return g;
      },
      true, options);
  expect_case<Index>(
      scheme, "all ranks on index M-1",
      fixed_case<Index>(M, [=](int, int) { return std::vector<Index>{static_cast<Index>(M - 1)}; }),
      true, options);
  expect_case<Index>(scheme, "all ranks on index 0",
                     fixed_case<Index>(M, [](int, int) { return std::vector<Index>{0}; }), true,
                     options);
  expect_case<Index>(
      scheme, "0 and M-1",
      fixed_case<Index>(M,
                        [=](int r, int) {
                          return r % 2 ? std::vector<Index>{0, static_cast<Index>(M - 1)}
                                       : std::vector<Index>{static_cast<Index>(M - 1)};
                        }),
      true, options);
  expect_case<Index>(
      scheme, "M=1",
      fixed_case<Index>(
          1, [](int r, int) { return r % 3 == 1 ? std::vector<Index>{} : std::vector<Index>{0}; }),
      true, options);
  expect_case<Index>(
      scheme, "cancellation",
      [=](int r, int n) {
        // Pairs of ranks cancel on index 5: sums of exactly zero must not leave garbage.
        SparseGradient<Index> g;
        g.elements = M;
        g.indices = {5, 7};
        const float s = (r % 2 == 0 && r + 1 < n) ? 1.0f : (r % 2 == 1 ? -1.0f : 2.0f);
        g.values = {s, 1.0f};
        return g;
      },
      true, options);
}

// Gradients of rows (SparseGradient::width = w): rank r's rows are a Zipf draw over the R rows,
// each row's values integers (exact sums); Zen's variants take them as rows, the other schemes
// as elements. Their results must be the same dense sum.
template <class Index>
Maker<Index> rows_case(std::uint64_t R, std::uint32_t w, double density, std::uint64_t seed) {
  return [=](int r, int) {
    sparse::GeneratorOptions o{R, density, 1.1, seed, sparse::ValueKind::integer};
    const auto rows = sparse::generate_gradient<Index>(o, r);
    SparseGradient<Index> g;
    g.elements = R * w;
    g.width = w;
    g.indices = rows.indices;
    for (std::size_t k = 0; k < rows.nnz(); ++k)
      for (std::uint32_t j = 0; j < w; ++j)
        g.values.push_back(rows.values[k] + static_cast<float>((j + k) % 5) - 2.0f);
    return g;
  };
}

template <class Index>
void run_row_cases(const std::string& scheme, const sync::SchemeOptions& options = {}) {
  for (double d : {0.002, 0.05, 0.4, 1.0})
    expect_case<Index>(scheme, "rows R=2503 w=4 d=" + std::to_string(d),
                       rows_case<Index>(2503, 4, d, 21), true, options);
  expect_case<Index>(scheme, "rows R=127 w=33", rows_case<Index>(127, 33, 0.2, 22), true, options);
  expect_case<Index>(scheme, "rows R=1 w=7", rows_case<Index>(1, 7, 1.0, 23), true, options);
  auto fixed_rows = [](std::uint64_t R, std::uint32_t w,
                       std::function<std::vector<Index>(int, int)> rows) -> Maker<Index> {
    return [=](int r, int n) {
      SparseGradient<Index> g;
      g.elements = R * w;
      g.width = w;
      g.indices = rows(r, n);
      for (std::size_t k = 0; k < g.indices.size() * w; ++k) g.values.push_back(float(r + k % 3));
      return g;
    };
  };
  expect_case<Index>(scheme, "rows all empty",
                     fixed_rows(1000, 3, [](int, int) { return std::vector<Index>{}; }), true,
                     options);
  expect_case<Index>(
      scheme, "rows 0 and R-1",
      fixed_rows(1000, 3,
                 [](int r, int) {
                   return r % 2 ? std::vector<Index>{0, 999} : std::vector<Index>{999};
                 }),
      true, options);
}

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, RowsMatchDenseReference) {
  run_row_cases<std::uint32_t>(GetParam());
  run_row_cases<std::uint64_t>(GetParam());
}

// Zen's row pull with every key format forced: indices (zen_allow_bitmap off), Elias-Fano of the
// rows and of the empty slots.
TEST(GoldenZenRows, EveryPullFormat) {
  sync::SchemeOptions coo, ef, efc;
  coo.zen_allow_bitmap = false;
  ef.zen_force_elias_fano = true;
  efc.zen_force_elias_fano_complement = true;
  run_row_cases<std::uint32_t>("zen", coo);
  run_row_cases<std::uint32_t>("zen", ef);
  run_row_cases<std::uint64_t>("zen", ef);
  run_row_cases<std::uint32_t>("zen", efc);
  run_row_cases<std::uint64_t>("zen", efc);
}

// The rows left in the pulled blocks (SchemeOptions::row_views, the trainer's form): every pull
// format, zen_coo, and auto (whose pick may be zen or another scheme).
TEST(GoldenZenRows, ViewsOfThePulledBlocks) {
  sync::SchemeOptions views, coo, ef, efc;
  for (auto* o : {&views, &coo, &ef, &efc}) o->row_views = true;
  coo.zen_allow_bitmap = false;
  ef.zen_force_elias_fano = true;
  efc.zen_force_elias_fano_complement = true;
  for (const auto* o : {&views, &coo, &ef, &efc}) {
    run_row_cases<std::uint32_t>("zen", *o);
    run_row_cases<std::uint64_t>("zen", *o);
  }
  run_row_cases<std::uint32_t>("zen_coo", views);
  run_row_cases<std::uint32_t>("auto", views);
  // Zen's result is views indeed; without the option it owns its values.
  const auto g = rows_case<std::uint32_t>(2503, 4, 0.1, 21)(g_comm->rank(), g_comm->size());
  sync::SyncResult<std::uint32_t> out;
  sync::make_scheme("zen", views)->synchronize(*g_comm, g, out);
  EXPECT_TRUE(out.in_views());
  EXPECT_TRUE(out.sparse.values.empty());
  sync::make_scheme("zen", {})->synchronize(*g_comm, g, out);
  EXPECT_FALSE(out.in_views());
  EXPECT_EQ(out.sparse.values.size(), out.sparse.indices.size() * 4);
}

// The input check carried in the push (SchemeOptions::zen_check_in_push, the trainer's
// embedding): every call takes the row path, rows and elements (rows of one value) alike, exact
// in every case; with views too.
TEST(GoldenZenRows, CheckInThePush) {
  sync::SchemeOptions push, views;
  push.zen_check_in_push = views.zen_check_in_push = true;
  views.row_views = true;
  for (const auto* o : {&push, &views}) {
    run_row_cases<std::uint32_t>("zen", *o);
    run_row_cases<std::uint64_t>("zen", *o);
    run_row_cases<std::uint32_t>("zen_coo", *o);
  }
  run_all_cases<std::uint32_t>("zen", push);
  run_all_cases<std::uint64_t>("zen", push);
}

// ... and its bad input: an error naming the problem on every rank, as check_input gives.
TEST(GoldenZenRows, CheckInThePushRefusesBadInputOnEveryRank) {
  Communicator& comm = *g_comm;
  sync::SchemeOptions push;
  push.zen_check_in_push = true;
  struct Bad {
    std::string what;  // expected in the message
    std::function<void(SparseGradient<std::uint32_t>&)> spoil;
    bool needs_two;
  };
  const int last = comm.size() - 1;
  const std::vector<Bad> cases = {
      {"out of range",
       [&](auto& g) {
         if (comm.rank() == last) g.indices[1] = 120;
       },
       false},
      {"block width differs",
       [&](auto& g) {
         if (comm.rank() == 0) return;
         g.width = 6;  // 20 blocks of M = 120
         g.indices = {1, 19};
         g.values.assign(2 * 6, 1.0f);
       },
       true},
      {"element count M differs",
       [&](auto& g) {
         if (comm.rank() == last) g.elements = 124;
       },
       true},
      {"M must be positive",
       [&](auto& g) {
         if (comm.rank() != last) return;
         g = {};
         g.width = 4;
       },
       false},
  };
  for (const auto& bad : cases) {
    if (bad.needs_two && comm.size() == 1) continue;
    SparseGradient<std::uint32_t> g;
    g.elements = 120;
    g.width = 4;
    g.indices = {1, 29};
    g.values.assign(2 * 4, 1.0f);
    bad.spoil(g);
    auto scheme = sync::make_scheme("zen", push);
    sync::SyncResult<std::uint32_t> out;
    expect_refused([&] { scheme->synchronize(comm, g, out); }, bad.what);
    // The scheme is usable again after a refused call.
    SparseGradient<std::uint32_t> good;
    good.elements = 120;
    good.width = 4;
    good.indices = {static_cast<std::uint32_t>(comm.rank() % 30)};
    good.values.assign(4, 1.0f);
    scheme->synchronize(comm, good, out);
    EXPECT_EQ(out.to_dense().size(), 120u);
  }
}

TEST_P(GoldenTest, BlockWidthMismatchFailsOnEveryRank) {
  Communicator& comm = *g_comm;
  if (comm.size() == 1) GTEST_SKIP() << "needs two ranks";
  SparseGradient<std::uint32_t> g;
  g.elements = 120;
  g.width = comm.rank() == 0 ? 4 : 6;
  g.indices = {1};
  g.values.assign(g.width, 1.0f);
  auto scheme = sync::make_scheme(GetParam());
  sync::SyncResult<std::uint32_t> out;
  expect_refused([&] { scheme->synchronize(comm, g, out); }, "block width differs");
}

TEST_P(GoldenTest, Index32MatchesDenseReference) { run_all_cases<std::uint32_t>(GetParam()); }
TEST_P(GoldenTest, Index64MatchesDenseReference) { run_all_cases<std::uint64_t>(GetParam()); }

// Zen's Elias-Fano pull blocks on every case, forced (zen_ef uses them only where smallest): of the
// non-zero slots, and of the empty ones.
TEST(GoldenZenEliasFano, ForcedOnEveryBlock) {
  sync::SchemeOptions forced, complement;
  forced.zen_force_elias_fano = true;
  complement.zen_force_elias_fano_complement = true;
  run_all_cases<std::uint32_t>("zen", forced);
  run_all_cases<std::uint64_t>("zen", forced);
  run_all_cases<std::uint32_t>("zen", complement);
  run_all_cases<std::uint64_t>("zen", complement);
}

// Zen's pull folded where it arrived (bench sync --consume) on every case: in each pull format
// (bitmap or COO as chosen, COO only, Elias-Fano forced, of the empty slots too), both index
// widths, pipelined in chunks and in one exchange without counts; and a scheme without an
// in-place form (sparcml) folded after the call, and `auto`, which folds what its pick does not.
TEST(GoldenZenFoldInPlace, EqualsTheFoldOfTheFullResult) {
  sync::SchemeOptions fold;
  fold.fold_in_place = true;
  for (const char* scheme : {"zen", "zen_coo", "zen_ef"})
    run_all_cases<std::uint32_t>(scheme, fold);
  run_all_cases<std::uint64_t>("zen", fold);
  run_all_cases<std::uint32_t>("sparcml", fold);
  run_all_cases<std::uint32_t>("auto", fold);  // folds what its pick does not
  sync::SchemeOptions complement = fold;
  complement.zen_force_elias_fano_complement = true;
  run_all_cases<std::uint32_t>("zen", complement);
  sync::SchemeOptions chunked = fold;
  chunked.zen_pull_min_block = 0;  // eight chunks where buckets allow: pulled in fold order
  run_all_cases<std::uint32_t>("zen", chunked);
  run_all_cases<std::uint64_t>("zen", chunked);
  sync::SchemeOptions one = fold;
  one.zen_pull_min_block = std::uint64_t{1} << 40;  // every pull fits "one chunk": no counts
  run_all_cases<std::uint32_t>("zen", one);
  run_all_cases<std::uint64_t>("zen_coo", one);
}

// Folded in place on rank 0 only: the chunks' order differs with it, so the counted pull refuses
// the call on every rank, naming the option.
TEST(GoldenZenFoldInPlace, OnSomeRanksOnlyIsRefusedOnEveryRank) {
  Communicator& comm = *g_comm;
  if (comm.size() == 1) GTEST_SKIP() << "needs two ranks";
  sync::SchemeOptions options;
  options.zen_pull_min_block = 0;
  options.fold_in_place = comm.rank() == 0;
  auto scheme = sync::make_scheme("zen", options);
  const auto grad = zipf_case<std::uint32_t>(100000, 0.05, sparse::ValueKind::integer, 7)(
      comm.rank(), comm.size());
  sync::SyncResult<std::uint32_t> out;
  expect_refused([&] { scheme->synchronize(comm, grad, out); }, "fold_in_place");
}

// Zen with worker threads (aggregation and decode split into ranges) and with one, whatever the
// default is at this world size; at most this machine's cores.
TEST(GoldenZenThreads, OneAndAllCores) {
  for (const unsigned threads : {1u, atl::comm::machine_cores()}) {
    sync::SchemeOptions options;
    options.threads = threads;
    run_all_cases<std::uint32_t>("zen", options);
    run_all_cases<std::uint64_t>("zen", options);
    run_all_cases<std::uint32_t>("zen_ef", options);
  }
}

// Zen's pull in one chunk, in three and in the most allowed (every case then has fewer buckets
// than chunks somewhere), and with a 64-byte minimum block (several chunks in most cases; the
// default, fewer chunks where blocks would be small, runs in every other golden test); an
// out-of-range count refused when the scheme is made.
TEST(GoldenZenPullChunks, OneThreeAndSixtyFour) {
  for (const std::uint32_t chunks : {1u, 3u, 64u}) {
    sync::SchemeOptions options;
    options.zen_pull_chunks = chunks;
    options.zen_pull_min_block = 0;  // that many chunks where buckets allow, however small
    run_all_cases<std::uint32_t>("zen", options);
    if (chunks == 3) run_all_cases<std::uint64_t>("zen_coo", options);
  }
  sync::SchemeOptions small_blocks;
  small_blocks.zen_pull_min_block = 64;
  run_all_cases<std::uint32_t>("zen", small_blocks);
  for (const std::uint32_t bad : {0u, 65u}) {
    sync::SchemeOptions options;
    options.zen_pull_chunks = bad;
    EXPECT_THROW(sync::make_scheme("zen", options), std::invalid_argument) << bad;
  }
}

// Push and pull in one exchange each, no counts first (zen.cpp, without_counts: where the largest
// possible pull fits one chunk, as on a WAN), in every pull format and both index widths: exact;
// and the pull's rounds it reports against the counted pull's.
TEST(GoldenZenWithoutCounts, EveryFormatExact) {
  sync::SchemeOptions one;
  one.zen_pull_min_block = std::uint64_t{1} << 40;  // every pull fits "one chunk"
  for (const char* scheme : {"zen", "zen_coo", "zen_ef"}) {
    run_all_cases<std::uint32_t>(scheme, one);
    run_all_cases<std::uint64_t>(scheme, one);
  }
  sync::SchemeOptions ef = one;
  ef.zen_force_elias_fano = true;
  run_all_cases<std::uint32_t>("zen", ef);
  ef.zen_force_elias_fano = false;
  ef.zen_force_elias_fano_complement = true;
  run_all_cases<std::uint64_t>("zen", ef);

  Communicator& comm = *g_comm;
  const auto grad = zipf_case<std::uint32_t>(100003, 0.05, sparse::ValueKind::integer, 31)(
      comm.rank(), comm.size());
  sync::SyncResult<std::uint32_t> out;
  sync::make_scheme("zen", one)->synchronize(comm, grad, out);
  EXPECT_EQ(out.stats.pull_rounds, 1u);
  sync::SchemeOptions counted;
  counted.zen_pull_chunks = 3;
  counted.zen_pull_min_block = 0;  // always the most chunks: counts first
  sync::make_scheme("zen", counted)->synchronize(comm, grad, out);
  EXPECT_EQ(out.stats.pull_rounds, 4u);
  // Its receive buffers count in the memory check before a call (about 12 bytes per element).
  const std::uint64_t M = 1000000;
  EXPECT_GE(sync::make_scheme("zen", one)->dense_memory_bytes(M, comm.size(), 0),
            sync::make_scheme("zen", counted)->dense_memory_bytes(M, comm.size(), 0) + 12 * M);
  // A call those buffers would not fit is refused on every rank, naming the scheme, before any
  // allocation (M = 3 x 2^30: about 51 GB per rank without counts, 0.7 GB with them).
  const std::uint64_t huge = std::uint64_t{3} << 30;
  // Only where every rank's node lacks the room (all ranks take the same branch: a collective).
  const auto free_bytes = util::memory_available_bytes();
  const bool lacks = free_bytes && *free_bytes < 16 * huge;
  if (comm.allreduce_value<std::uint64_t>(lacks ? 1 : 0, comm::ReduceOp::min) == 1) {
    SparseGradient<std::uint32_t> tiny;
    tiny.elements = huge;
    tiny.indices = {0, static_cast<std::uint32_t>(huge - 1)};
    tiny.values = {1, 2};
    auto big = sync::make_scheme("zen", one);
    expect_refused([&] { big->synchronize(comm, tiny, out); }, "scheme zen at M = 3221225472");
    big->synchronize(comm, grad, out);  // the next call that fits is exact
    expect_exact_calls<std::uint32_t>(
        *big, "zen", "after a refusal for memory",
        zipf_case<std::uint32_t>(100003, 0.05, sparse::ValueKind::integer, 31), true, 1);
  }
}

// After two calls of one form without counts, Zen's push carries each rank's input verdict
// (zen_push_verdict.h): the first two calls have a check phase, the next ones no exchange but push
// and pull; alternating forms keep the check and one push; an input of another form on every rank
// (M, index width, blocks) is checked again and exact; bad input on one rank, or M or the index
// width on one rank only, fails on every rank, named; the next good call is exact.
TEST(GoldenZenWithoutCounts, CheckRidesInThePushAfterTheFirstCall) {
  Communicator& comm = *g_comm;
  using sparse::ValueKind;
  sync::SchemeOptions one;
  one.zen_pull_min_block = std::uint64_t{1} << 40;
  auto scheme = sync::make_scheme("zen", one);
  const auto a = zipf_case<std::uint32_t>(100003, 0.05, ValueKind::integer, 31);
  sync::SyncResult<std::uint32_t> out;
  auto checked = [&] {
    return std::any_of(out.stats.phases.begin(), out.stats.phases.end(),
                       [](const auto& p) { return p.name == "check"; });
  };
  auto phases = [&] {
    std::string names;
    for (const auto& p : out.stats.phases) names += p.name + " ";
    return names;
  };
  scheme->synchronize(comm, a(comm.rank(), comm.size()), out);
  EXPECT_TRUE(checked()) << "the first call checks its input in a round of its own";
  scheme->synchronize(comm, a(comm.rank(), comm.size()), out);
  EXPECT_TRUE(checked()) << "so does the second (the first of its form in a row)";
  scheme->synchronize(comm, a(comm.rank(), comm.size()), out);
  EXPECT_EQ(phases(), "partition push aggregate encode pull decode ")
      << "the third call's check rides in the push: no other exchange";
  expect_exact_calls<std::uint32_t>(*scheme, "zen", "check in the push", a, true, 2);
  // Forms that alternate keep check_input: no push that finds another form and starts over.
  auto alternating = sync::make_scheme("zen", one);
  for (int call = 0; call < 4; ++call) {
    const auto& make = call % 2 ? a : zipf_case<std::uint32_t>(4099, 0.02, ValueKind::integer, 32);
    alternating->synchronize(comm, make(comm.rank(), comm.size()), out);
    int checks = 0, pushes = 0;
    for (const auto& p : out.stats.phases) {
      checks += p.name == "check";
      pushes += p.name == "push";
    }
    EXPECT_EQ(checks, 1) << phases();
    EXPECT_EQ(pushes, 1) << phases();
  }
  const auto b = zipf_case<std::uint32_t>(4099, 0.02, ValueKind::integer, 32);
  expect_exact_calls<std::uint32_t>(*scheme, "zen", "M changed on every rank", b, true, 2);
  expect_exact_calls<std::uint64_t>(*scheme, "zen", "64-bit indices on every rank",
                                    zipf_case<std::uint64_t>(4099, 0.02, ValueKind::integer, 33),
                                    true, 2);
  expect_exact_calls<std::uint32_t>(*scheme, "zen", "M back", b, true, 2);
  expect_exact_calls<std::uint32_t>(*scheme, "zen", "rows on every rank",
                                    rows_case<std::uint32_t>(2503, 4, 0.1, 21), true, 1);
  expect_exact_calls<std::uint32_t>(*scheme, "zen", "elements again", b, true, 2);
  auto bad = b(comm.rank(), comm.size());
  if (comm.rank() == comm.size() - 1) {
    bad.indices.push_back(5000);  // past M on the last rank only
    bad.values.push_back(1);
  }
  expect_refused([&] { scheme->synchronize(comm, bad, out); }, "out of range");
  expect_exact_calls<std::uint32_t>(*scheme, "zen", "after a refusal", b, true, 2);
  if (comm.size() > 1) {
    auto other_m = b(comm.rank(), comm.size());
    if (comm.rank() == 0) other_m.elements = 4100;
    expect_refused([&] { scheme->synchronize(comm, other_m, out); }, "element count M differs");
    expect_exact_calls<std::uint32_t>(*scheme, "zen", "after M on one rank", b, true, 2);
    expect_index_width_refused(*scheme, b,
                               zipf_case<std::uint64_t>(4099, 0.02, ValueKind::integer, 32));
    expect_exact_calls<std::uint32_t>(*scheme, "zen", "after 64 bits on one rank", b, true, 2);
    // In one call, one rank's input is bad while another's changed form: the problem is named on
    // every rank (it wins over the change), and the next calls are exact.
    auto bad_and_changed = b(comm.rank(), comm.size());
    if (comm.rank() == comm.size() - 1) {
      bad_and_changed.indices.push_back(5000);
      bad_and_changed.values.push_back(1);
    }
    if (comm.rank() == 0) bad_and_changed.elements = 4100;
    expect_refused([&] { scheme->synchronize(comm, bad_and_changed, out); }, "out of range");
    expect_exact_calls<std::uint32_t>(*scheme, "zen", "after a bad and a changed rank", b, true, 2);
  }
}

// Zen's push and pull in groups (zen_groups.h): the smallest group size above 1 that divides the
// world (two exchanges of several ranks each where the world has more than one group; also with the
// pull alone grouped) and the whole world as one group; "node" (0), which is flat here (one node);
// a group that does not divide the world refused on every rank, naming it.
TEST(GoldenZenGroups, SmallestDivisorWholeWorldAndRefused) {
  Communicator& comm = *g_comm;
  const auto n = static_cast<std::uint32_t>(comm.size());
  std::vector<std::uint32_t> groups;
  for (std::uint32_t g = 2; g <= n; ++g)
    if (n % g == 0) {
      groups.push_back(g);
      break;
    }
  if (n > 1 && groups.back() != n) groups.push_back(n);
  for (const std::uint32_t g : groups) {
    sync::SchemeOptions options;
    options.zen_group = g;
    run_all_cases<std::uint32_t>("zen", options);
    if (g == groups.front()) {
      run_all_cases<std::uint64_t>("zen_coo", options);
      options.zen_group_push = false;  // the pull alone in two steps
      run_all_cases<std::uint32_t>("zen", options);
    }
  }
  sync::SchemeOptions node;
  node.zen_group = 0;
  expect_exact_sum<std::uint32_t>(
      "zen", "group: node", zipf_case<std::uint32_t>(10007, 0.05, sparse::ValueKind::integer, 31),
      true, node);
  std::uint32_t bad = n + 1;
  for (std::uint32_t g = 2; g < n; ++g)
    if (n % g != 0) {
      bad = g;
      break;
    }
  sync::SchemeOptions refused;
  refused.zen_group = bad;
  auto scheme = sync::make_scheme("zen", refused);
  sync::SyncResult<std::uint32_t> out;
  try {
    scheme->synchronize(comm,
                        zipf_case<std::uint32_t>(10007, 0.01, sparse::ValueKind::integer, 31)(
                            comm.rank(), comm.size()),
                        out);
    ADD_FAILURE() << "group " << bad << " accepted at " << n << " ranks";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("zen group " + std::to_string(bad)), std::string::npos)
        << e.what();
  }
}

TEST_P(GoldenTest, IndexOutOfRangeOnOneRankFailsOnEveryRank) {
  Communicator& comm = *g_comm;
  SparseGradient<std::uint32_t> g;
  g.elements = 100;
  g.indices = {1, 2};
  g.values = {1, 1};
  if (comm.rank() == comm.size() - 1) g.indices[1] = 100;
  auto scheme = sync::make_scheme(GetParam());
  sync::SyncResult<std::uint32_t> out;
  expect_refused([&] { scheme->synchronize(comm, g, out); }, "out of range");
}

TEST_P(GoldenTest, ElementCountMismatchFailsOnEveryRank) {
  Communicator& comm = *g_comm;
  if (comm.size() == 1) GTEST_SKIP() << "needs two ranks";
  SparseGradient<std::uint32_t> g;
  g.elements = comm.rank() == 0 ? 100 : 101;
  auto scheme = sync::make_scheme(GetParam());
  sync::SyncResult<std::uint32_t> out;
  EXPECT_THROW(scheme->synchronize(comm, g, out), comm::CollectiveError);
}

// 64-bit indices on rank 0, 32-bit elsewhere: refused on every rank, named (the check's reduction,
// auto's, and Zen's counts with the check in the push each carry the index width).
TEST_P(GoldenTest, IndexWidthMismatchFailsOnEveryRank) {
  Communicator& comm = *g_comm;
  if (comm.size() == 1) GTEST_SKIP() << "needs two ranks";
  std::vector<sync::SchemeOptions> variants(1);
  if (std::string(GetParam()) == "zen") variants.emplace_back().zen_check_in_push = true;
  for (const auto& options : variants) {
    auto scheme = sync::make_scheme(GetParam(), options);
    expect_index_width_refused(
        *scheme,
        fixed_case<std::uint32_t>(100, [](int, int) { return std::vector<std::uint32_t>{2}; }),
        fixed_case<std::uint64_t>(100, [](int, int) {
          return std::vector<std::uint64_t>{1, 99};
        }));
  }
}

// `auto` across calls (src/sync/auto_tuner.h): the favourite's trials, the widened candidates'
// trials, the fastest one's steady calls, and a new profile when the non-zero counts drift (d from
// 1% to 30%); two kinds of call (M) interleaved as a trainer's tensors are, each with its own
// tuner. Every call exact and run by the same scheme on every rank.
TEST(AutoAcrossCalls, EveryCallExactAndTheSamePickOnEveryRank) {
  Communicator& comm = *g_comm;
  using sparse::ValueKind;
  auto scheme = sync::make_scheme("auto");
  for (double d : {0.01, 0.3}) {
    const auto a = zipf_case<std::uint32_t>(10007, d, ValueKind::integer, 21);
    const auto b = zipf_case<std::uint32_t>(65536, d / 4, ValueKind::integer, 22);
    for (int call = 0; call < 18; ++call) {
      expect_exact_calls<std::uint32_t>(*scheme, "auto", "M=10007 d=" + std::to_string(d), a, true,
                                        1);
      expect_exact_calls<std::uint32_t>(*scheme, "auto", "M=65536 d=" + std::to_string(d / 4), b,
                                        true, 1);
    }
    // At most kMaxCandidates x kTrials = 15 trial calls per profile: the last ones are steady.
    sync::SyncResult<std::uint32_t> out;
    scheme->synchronize(comm, a(comm.rank(), comm.size()), out);
    EXPECT_FALSE(out.stats.exploring) << "d=" << d << ": still a trial after 19 calls";
    EXPECT_FALSE(out.stats.chosen.empty());
  }
}

// A settled `auto` checks each call's input in its own reduction and its pick skips its check
// (SyncScheme::skip_next_input_check): bad input on one rank still fails on every rank, named.
TEST(AutoAcrossCalls, SettledPickStillRefusesBadInputOnEveryRank) {
  Communicator& comm = *g_comm;
  if (comm.size() == 1) GTEST_SKIP() << "needs two ranks";
  auto scheme = sync::make_scheme("auto");
  const auto good = zipf_case<std::uint32_t>(4099, 0.02, sparse::ValueKind::integer, 23);
  sync::SyncResult<std::uint32_t> out;
  for (int call = 0; call < 20; ++call)
    scheme->synchronize(comm, good(comm.rank(), comm.size()), out);
  ASSERT_FALSE(out.stats.exploring) << "still a trial after 20 calls";
  auto bad = good(comm.rank(), comm.size());
  bad.indices.push_back(5000);  // past M on the last rank only
  bad.values.push_back(1);
  expect_refused(
      [&] {
        scheme->synchronize(
            comm, comm.rank() == comm.size() - 1 ? bad : good(comm.rank(), comm.size()), out);
      },
      "out of range");
  auto other_m = good(comm.rank(), comm.size());
  if (comm.rank() == 0) other_m.elements = 4100;
  EXPECT_THROW(scheme->synchronize(comm, other_m, out), comm::CollectiveError);
  // And the next good call is exact again.
  expect_exact_calls<std::uint32_t>(*scheme, "auto", "after refusals", good, true, 1);
}

// `auto` settled on Zen without counts (which checks each call's input in its push) skips its own
// reduction on 7 calls of 8 ("fast calls"): every call exact; bad input on one rank, or M on one
// rank only, fails on every rank in a fast call too; another kind of call between them is exact;
// names outside the schemes refused.
TEST(AutoAcrossCalls, SettledOnZenWithoutCountsReducesEveryEighthCall) {
  Communicator& comm = *g_comm;
  sync::SchemeOptions zen_only;
  zen_only.auto_schemes = {"zen"};
  auto scheme = sync::make_scheme("auto", zen_only);
  const auto good = zipf_case<std::uint32_t>(4099, 0.02, sparse::ValueKind::integer, 24);
  sync::SyncResult<std::uint32_t> out;
  auto watched = [&] {
    return std::any_of(out.stats.phases.begin(), out.stats.phases.end(),
                       [](const auto& p) { return p.name == "profile"; });
  };
  for (int call = 0; call < 8; ++call)
    scheme->synchronize(comm, good(comm.rank(), comm.size()), out);
  ASSERT_FALSE(out.stats.exploring) << "still a trial after 8 calls";
  EXPECT_EQ(out.stats.chosen, "zen");
  int reductions = 0;
  for (int call = 0; call < 16; ++call) {
    scheme->synchronize(comm, good(comm.rank(), comm.size()), out);
    reductions += watched() ? 1 : 0;
  }
  // (One rank: the largest pull of M = 4099, up to 8 B per element, is over one 32 KiB block, so
  // Zen keeps its counts and auto reduces on every call.)
  EXPECT_EQ(reductions, comm.size() > 1 ? 2 : 16) << "of 16 settled calls";
  for (const auto& p : out.stats.phases)
    EXPECT_NE(p.name, "check") << "a fast call checks in Zen's push";
  expect_exact_calls<std::uint32_t>(*scheme, "auto", "fast calls", good, true, 9);
  auto until_fast = [&] {  // the call after a reduction is a fast one
    do scheme->synchronize(comm, good(comm.rank(), comm.size()), out);
    while (!watched());
  };
  until_fast();
  auto bad = good(comm.rank(), comm.size());
  if (comm.rank() == comm.size() - 1) {
    bad.indices.push_back(5000);  // past M on the last rank only
    bad.values.push_back(1);
  }
  expect_refused([&] { scheme->synchronize(comm, bad, out); }, "out of range");
  expect_exact_calls<std::uint32_t>(*scheme, "auto", "after a refusal", good, true, 3);
  if (comm.size() > 1) {
    until_fast();
    auto other_m = good(comm.rank(), comm.size());
    if (comm.rank() == 0) other_m.elements = 4100;
    EXPECT_THROW(scheme->synchronize(comm, other_m, out), comm::CollectiveError);
    until_fast();
    expect_index_width_refused(
        *scheme, good, zipf_case<std::uint64_t>(4099, 0.02, sparse::ValueKind::integer, 24));
  }
  until_fast();
  const auto other = zipf_case<std::uint32_t>(65536, 0.01, sparse::ValueKind::integer, 25);
  scheme->synchronize(comm, other(comm.rank(), comm.size()), out);
  if (comm.size() > 1) {
    EXPECT_TRUE(watched()) << "another kind in a fast call: declined by Zen's push, then run by "
                              "the reduction, for its own tuner";
  }
  expect_exact_calls<std::uint32_t>(*scheme, "auto", "another kind", other, true, 1);
  expect_exact_calls<std::uint32_t>(*scheme, "auto", "the first kind again", good, true, 9);
  sync::SchemeOptions unknown;
  unknown.auto_schemes = {"zen", "zenn"};
  EXPECT_THROW(sync::make_scheme("auto", unknown), std::invalid_argument);
}

// Run only by tests/mpi/fatal_failure_test.sh (disabled otherwise): an ASSERT that fails on the
// last rank before a collective must end the job at once on every rank, not hang its peers.
TEST(GoldenSelfTest, DISABLED_FatalFailureOnOneRankEndsTheJob) {
  Communicator& comm = *g_comm;
  ASSERT_NE(comm.rank(), comm.size() - 1) << "deliberate failure on the last rank";
  comm.allgather<std::int32_t>(comm.rank());
}

INSTANTIATE_TEST_SUITE_P(AllSchemes, GoldenTest, ::testing::ValuesIn(sync::scheme_names()),
                         [](const auto& info) { return info.param; });

}  // namespace

int main(int argc, char** argv) { return atl::testing::run_mpi_tests(argc, argv, g_comm); }
