#include "atoll/localsgd/penalty.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace {
using namespace atl::localsgd;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

PenaltyOptions options(double alpha, int warmup) {
  PenaltyOptions o;
  o.ewma_alpha = alpha;
  o.ewma_warmup = warmup;
  return o;
}

// The message of the std::invalid_argument that f throws ("" if none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(PenaltyEwma, MeanAndVarianceByHand) {
  EwmaAnomalyDetector d(0.5, 3.0, 10);
  // x = 2: the first observation initialises μ = 2, σ² = 0.
  EXPECT_FALSE(d.observe(2));
  EXPECT_EQ(d.mean(), 2);
  EXPECT_EQ(d.variance(), 0);
  // x = 4: δ = 2, μ = 2 + 0.5·2 = 3, σ² = 0.5·(0 + 0.5·2·(4 − 3)) = 0.5.
  EXPECT_FALSE(d.observe(4));
  EXPECT_DOUBLE_EQ(d.mean(), 3);
  EXPECT_DOUBLE_EQ(d.variance(), 0.5);
  // x = 1: δ = −2, μ = 3 − 1 = 2, σ² = 0.5·(0.5 + 0.5·(−2)·(1 − 2)) = 0.5·1.5 = 0.75.
  EXPECT_FALSE(d.observe(1));
  EXPECT_DOUBLE_EQ(d.mean(), 2);
  EXPECT_DOUBLE_EQ(d.variance(), 0.75);
  EXPECT_EQ(d.accepted(), 3u);
  // z(5) against the current state: (5 − 2)/√0.75 = 3.4641016.
  EXPECT_NEAR(d.z_score(5), 3.4641016151377544, 1e-12);

  // The default α = 0.02: 10, then 12: δ = 2, μ = 10.04, σ² = 0.98·0.02·2·(12 − 10.04) = 0.076832.
  EwmaAnomalyDetector e(0.02, 3.0, 120);
  e.observe(10);
  e.observe(12);
  EXPECT_DOUBLE_EQ(e.mean(), 10.04);
  EXPECT_NEAR(e.variance(), 0.076832, 1e-15);
}

TEST(PenaltyEwma, NoDetectionDuringWarmup) {
  EwmaAnomalyDetector d(0.5, 3.0, 5);
  // Five accepted observations, a huge spike among them: nothing is an outlier yet.
  for (double x : {1.0, 1.1, 1000.0, 1.0, 1.2}) EXPECT_FALSE(d.observe(x)) << x;
  EXPECT_FALSE(d.warming_up());
  EXPECT_TRUE(d.z_window().empty());  // z-scores are recorded after warm-up only
}

TEST(PenaltyEwma, SpikeAfterWarmupDroppedWithoutUpdatingState) {
  EwmaAnomalyDetector d(0.5, 3.0, 4);
  // 1: μ = 1, σ² = 0.  1.2: δ = .2, μ = 1.1, σ² = .5·(.5·.2·.1) = .005.
  // 1: δ = −.1, μ = 1.05, σ² = .5·(.005 + .5·.1·.05) = .00375.
  // 1.2: δ = .15, μ = 1.125, σ² = .5·(.00375 + .5·.15·.075) = .0046875 (σ = .0684653).
  for (double x : {1.0, 1.2, 1.0, 1.2}) EXPECT_FALSE(d.observe(x));
  EXPECT_NEAR(d.mean(), 1.125, 1e-15);  // 1.2 is not a binary fraction: not exact
  EXPECT_NEAR(d.variance(), 0.0046875, 1e-15);
  const double mean = d.mean();
  const double variance = d.variance();
  // 2: z = .875/.0684653 = 12.78 > 3: an outlier; μ, σ², the window and the count stay put.
  EXPECT_NEAR(d.z_score(2), 12.780193008453876, 1e-9);
  EXPECT_TRUE(d.observe(2));
  EXPECT_EQ(d.mean(), mean);
  EXPECT_EQ(d.variance(), variance);
  EXPECT_EQ(d.accepted(), 4u);
  EXPECT_TRUE(d.z_window().empty());
  // 1.1: z = −.025/.0684653 = −.365 (one-sided: low is fine), recorded in the window.
  EXPECT_FALSE(d.observe(1.1));
  ASSERT_EQ(d.z_window().size(), 1u);
  EXPECT_NEAR(d.z_window().front(), -0.3651483716701095, 1e-12);
  // Far below the mean is never an outlier.
  EXPECT_FALSE(d.observe(0.0));
}

TEST(PenaltyEwma, DynamicThresholdFromZScoreWindow) {
  EwmaAnomalyDetector d(0.5, 3.0, 2);  // window capacity W = 2
  // 0: μ = 0, σ² = 0.  2: δ = 2, μ = 1, σ² = .5·(.5·2·1) = .5.  Warm-up over.
  d.observe(0);
  d.observe(2);
  // 1: z = 0; window [0]; δ = 0: μ = 1, σ² = .25.
  EXPECT_FALSE(d.observe(1));
  EXPECT_EQ(d.threshold_factor(), 1.0);  // fewer than 2 z-scores
  // 0: z = (0 − 1)/.5 = −2; window [0, −2]; δ = −1: μ = .5, σ² = .5·(.25 + .5·1·.5) = .25.
  EXPECT_FALSE(d.observe(0));
  // Sample std of {0, −2}: √((1 + 1)/1) = √2: the threshold becomes 3√2 = 4.2426.
  EXPECT_DOUBLE_EQ(d.threshold_factor(), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(d.mean(), 0.5);
  EXPECT_DOUBLE_EQ(d.variance(), 0.25);
  // 2.6: z = 2.1/.5 = 4.2: above 3, below 3√2: accepted; the window keeps the last 2: [−2, 4.2].
  EwmaAnomalyDetector accepting = d;
  EXPECT_FALSE(accepting.observe(2.6));
  ASSERT_EQ(accepting.z_window().size(), 2u);
  EXPECT_EQ(accepting.z_window()[0], -2);
  EXPECT_NEAR(accepting.z_window()[1], 4.2, 1e-12);
  // 2.7: z = 4.4 > 4.2426: an outlier.
  EXPECT_TRUE(d.observe(2.7));
}

TEST(PenaltyLayer, SpikeOfOneWorkerDropped) {
  LayerPenalty layer(2, options(0.5, 4));
  for (double x : {1.0, 1.2, 1.0, 1.2}) {
    const auto dec = layer.decide(std::vector<double>{x, x});
    EXPECT_TRUE(dec.dropped.empty());
    EXPECT_EQ(dec.weights[0], 0.5);
    EXPECT_EQ(dec.weights[1], 0.5);
  }
  const auto dec = layer.decide(std::vector<double>{1.1, 2.0});
  EXPECT_EQ(dec.dropped, std::vector<std::size_t>{1});
  EXPECT_FALSE(dec.skip);
  EXPECT_EQ(dec.weights, (std::vector<double>{1.0, 0.0}));
}

TEST(PenaltyLayer, NoDropsDuringWarmup) {
  LayerPenalty layer(3, options(0.5, 5));
  for (double spike : {1.0, 50.0, 1.0, 1e6, 1.0}) {
    const auto dec = layer.decide(std::vector<double>{1.0, spike, 1.0});
    EXPECT_TRUE(dec.dropped.empty()) << spike;
    EXPECT_FALSE(dec.skip);
  }
}

TEST(PenaltyLayer, AllWorkersAnomalousSkips) {
  LayerPenalty layer(2, options(0.5, 4));
  for (double x : {1.0, 1.2, 1.0, 1.2}) layer.decide(std::vector<double>{x, x});
  const auto dec = layer.decide(std::vector<double>{5.0, 9.0});
  EXPECT_TRUE(dec.skip);
  EXPECT_EQ(dec.dropped, (std::vector<std::size_t>{0, 1}));
  EXPECT_EQ(dec.weights, (std::vector<double>{0.0, 0.0}));
  // Both NaN (during a fresh warm-up too): skipped.
  LayerPenalty fresh(2, PenaltyOptions{});
  EXPECT_TRUE(fresh.decide(std::vector<double>{kNaN, kInf}).skip);
}

TEST(PenaltyLayer, OneWorker) {
  LayerPenalty layer(1, options(0.5, 2));
  for (double x : {3.0, 3.2, 3.0, 3.1}) {
    const auto dec = layer.decide(std::vector<double>{x});
    EXPECT_EQ(dec.weights, std::vector<double>{1.0});
    EXPECT_FALSE(dec.skip);
  }
  // Anomalous: the only worker is dropped, the layer's outer step skipped.
  const auto dec = layer.decide(std::vector<double>{100.0});
  EXPECT_TRUE(dec.skip);
  EXPECT_EQ(dec.weights, std::vector<double>{0.0});
  EXPECT_TRUE(layer.decide(std::vector<double>{kNaN}).skip);
}

TEST(PenaltyLayer, EqualNormsGiveEqualWeights) {
  LayerPenalty layer(4, PenaltyOptions{});
  const auto dec = layer.decide(std::vector<double>{2.5, 2.5, 2.5, 2.5});
  EXPECT_EQ(dec.weights, (std::vector<double>{0.25, 0.25, 0.25, 0.25}));
  // Huge equal norms: the shifted softmax does not underflow.
  const auto big = layer.decide(std::vector<double>{1e4, 1e4, 1e4, 1e4});
  EXPECT_EQ(big.weights, (std::vector<double>{0.25, 0.25, 0.25, 0.25}));
}

TEST(PenaltyLayer, SoftmaxWeightsByHand) {
  // T = 1, norms 1, 2, 3: e^0, e^−1, e^−2 = 1, .367879, .135335; Σ = 1.503215;
  // w = .665241, .244728, .090031.
  LayerPenalty t1(3, PenaltyOptions{});
  const auto a = t1.decide(std::vector<double>{1, 2, 3});
  EXPECT_NEAR(a.weights[0], 0.6652409557748218, 1e-12);
  EXPECT_NEAR(a.weights[1], 0.24472847105479764, 1e-12);
  EXPECT_NEAR(a.weights[2], 0.09003057317038046, 1e-12);
  // T = 2: e^0, e^−.5, e^−1 = 1, .606531, .367879; Σ = 1.974410; w = .506480, .307196, .186324.
  PenaltyOptions o;
  o.weight_temperature = 2;
  LayerPenalty t2(3, o);
  const auto b = t2.decide(std::vector<double>{3, 1, 2});  // order follows the workers
  EXPECT_NEAR(b.weights[0], 0.1863237232258476, 1e-12);
  EXPECT_NEAR(b.weights[1], 0.506480391055654, 1e-12);
  EXPECT_NEAR(b.weights[2], 0.3071958857184984, 1e-12);
  // Norms 1000 apart: the larger one's weight underflows to 0 but is not a drop.
  LayerPenalty far(2, PenaltyOptions{});
  const auto c = far.decide(std::vector<double>{1, 1001});
  EXPECT_EQ(c.weights, (std::vector<double>{1.0, 0.0}));
  EXPECT_TRUE(c.dropped.empty());
}

TEST(PenaltyLayer, NonFiniteNormDroppedEvenDuringWarmup) {
  LayerPenalty layer(3, PenaltyOptions{});  // warm-up 120: nothing else can be dropped
  const auto dec = layer.decide(std::vector<double>{1.0, kNaN, 1.0});
  EXPECT_EQ(dec.dropped, std::vector<std::size_t>{1});
  EXPECT_EQ(dec.weights, (std::vector<double>{0.5, 0.0, 0.5}));
  EXPECT_EQ(layer.detector(1).accepted(), 0u);  // a NaN does not advance the warm-up
  EXPECT_EQ(layer.detector(0).accepted(), 1u);
  const auto inf = layer.decide(std::vector<double>{kInf, 1.0, 1.0});
  EXPECT_EQ(inf.dropped, std::vector<std::size_t>{0});
}

TEST(PenaltyLayer, BadNormsRefused) {
  LayerPenalty layer(2, PenaltyOptions{});
  EXPECT_NE(error_of([&] { layer.decide(std::vector<double>{1.0}); }).find("1 norms for 2 workers"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              layer.decide(std::vector<double>{1.0, -0.5});
            }).find("negative"),
            std::string::npos);
  EXPECT_EQ(layer.detector(0).accepted(), 0u);  // refused before any detector moved
  EXPECT_THROW(LayerPenalty(0, PenaltyOptions{}), std::invalid_argument);
}

TEST(PenaltyLayer, ClipScale) {
  EXPECT_EQ(LayerPenalty::clip_scale(123.0, 0.0), 1.0);  // off
  EXPECT_EQ(LayerPenalty::clip_scale(0.5, 1.0), 1.0);    // below τ: untouched
  EXPECT_EQ(LayerPenalty::clip_scale(0.0, 1.0), 1.0);
  EXPECT_DOUBLE_EQ(LayerPenalty::clip_scale(4.0, 1.0), 1.0 / 4.000001);      // 0.24999994
  EXPECT_DOUBLE_EQ(LayerPenalty::clip_scale(20.0, 10.0), 10.0 / 20.000001);  // 0.49999998
  EXPECT_NEAR(LayerPenalty::clip_scale(20.0, 10.0), 0.5, 1e-7);
}

TEST(PenaltyLayer, DisabledIsPlainMean) {
  PenaltyOptions o = options(0.5, 0);
  o.enabled = false;
  LayerPenalty layer(3, o);
  for (int round = 0; round < 5; ++round) {
    const auto dec = layer.decide(std::vector<double>{1.0, 100.0 * round, kNaN});
    EXPECT_EQ(dec.weights, (std::vector<double>{1.0 / 3, 1.0 / 3, 1.0 / 3}));
    EXPECT_TRUE(dec.dropped.empty());
    EXPECT_FALSE(dec.skip);
  }
  EXPECT_EQ(layer.detector(0).accepted(), 0u);
}

// Norms of 3 layers × 4 workers over many rounds: noisy, with spikes and a NaN now and then.
std::vector<std::vector<std::vector<double>>> norm_rounds(int rounds) {
  std::mt19937_64 rng(14);
  std::vector<std::vector<std::vector<double>>> out(rounds);
  for (int r = 0; r < rounds; ++r) {
    out[r].resize(3);
    for (int l = 0; l < 3; ++l) {
      for (int w = 0; w < 4; ++w) {
        double x = 1.0 + l + static_cast<double>(rng() % 1000) / 5000.0;  // ±0.1 noise
        const auto dice = rng() % 100;
        if (dice < 4) x *= 5;  // spike
        if (dice == 99) x = kNaN;
        out[r][l].push_back(x);
      }
    }
  }
  return out;
}

void expect_same(const PenaltyDecision& a, const PenaltyDecision& b) {
  EXPECT_EQ(a.weights, b.weights);  // bit for bit
  EXPECT_EQ(a.dropped, b.dropped);
  EXPECT_EQ(a.skip, b.skip);
}

TEST(PenaltyState, SaveLoadContinuesIdentically) {
  const PenaltyOptions o = options(0.1, 10);
  const auto rounds = norm_rounds(200);
  PseudoGradientPenalty straight(3, 4, o);
  PseudoGradientPenalty first(3, 4, o);
  std::size_t drops = 0;
  for (int r = 0; r < 80; ++r) {
    for (std::size_t l = 0; l < 3; ++l)
      expect_same(straight.decide(l, rounds[r][l]), first.decide(l, rounds[r][l]));
  }
  const std::vector<double> state = first.save();
  PseudoGradientPenalty resumed(3, 4, o);
  resumed.load(state);
  EXPECT_EQ(resumed.save(), state);
  for (int r = 80; r < 200; ++r) {
    for (std::size_t l = 0; l < 3; ++l) {
      const auto a = straight.decide(l, rounds[r][l]);
      expect_same(a, resumed.decide(l, rounds[r][l]));
      drops += a.dropped.size();
    }
  }
  EXPECT_GT(drops, 10u);  // the comparison covered real decisions, not only warm-up
  EXPECT_EQ(straight.save(), resumed.save());
}

TEST(PenaltyState, WrongShapeOrCorruptStateRefused) {
  const PenaltyOptions o = options(0.1, 10);
  PseudoGradientPenalty source(3, 4, o);
  for (const auto& round : norm_rounds(30)) {
    for (std::size_t l = 0; l < 3; ++l) source.decide(l, round[l]);
  }
  const std::vector<double> state = source.save();

  PseudoGradientPenalty other_layers(2, 4, o);
  const std::string layers_error = error_of([&] { other_layers.load(state); });
  EXPECT_NE(layers_error.find("saved for 3 layers × 4 workers"), std::string::npos) << layers_error;
  EXPECT_NE(layers_error.find("this run has 2 layers × 4 workers"), std::string::npos);
  PseudoGradientPenalty other_workers(3, 5, o);
  EXPECT_NE(error_of([&] { other_workers.load(state); }).find("3 layers × 5 workers"),
            std::string::npos);
  PseudoGradientPenalty other_window(3, 4, options(0.1, 12));
  EXPECT_NE(error_of([&] { other_window.load(state); }).find("--ewma-warmup"), std::string::npos);

  PseudoGradientPenalty target(3, 4, o);
  const std::vector<double> fresh = target.save();
  std::vector<double> truncated(state.begin(), state.end() - 1);
  EXPECT_NE(error_of([&] { target.load(truncated); }).find("truncated"), std::string::npos);
  std::vector<double> longer = state;
  longer.push_back(0);
  EXPECT_NE(error_of([&] { target.load(longer); }).find("left over"), std::string::npos);
  std::vector<double> bad_format = state;
  bad_format[0] = 7;
  EXPECT_NE(error_of([&] { target.load(bad_format); }).find("format"), std::string::npos);
  EXPECT_NE(error_of([&] { target.load(std::vector<double>{}); }).find("format"),
            std::string::npos);
  std::vector<double> bad_variance = state;
  bad_variance[4 + 2] = -1;  // first detector's variance
  EXPECT_NE(error_of([&] { target.load(bad_variance); }).find("variance"), std::string::npos);
  std::vector<double> long_window = state;
  long_window[4 + 3] = 11;  // first detector's window length > capacity 10
  EXPECT_NE(error_of([&] { target.load(long_window); }).find("window"), std::string::npos);
  EXPECT_EQ(target.save(), fresh);  // every refused load left the state alone
}

TEST(PenaltyOptions, ChecksNameTheFlag) {
  EXPECT_EQ(PenaltyOptions{}.check(), std::nullopt);
  auto problem = [](auto change) {
    PenaltyOptions o;
    change(o);
    return o.check().value_or("");
  };
  EXPECT_NE(problem([](PenaltyOptions& o) { o.anomaly_threshold = 0; }).find("--anomaly-threshold"),
            std::string::npos);
  EXPECT_NE(
      problem([](PenaltyOptions& o) { o.anomaly_threshold = kNaN; }).find("--anomaly-threshold"),
      std::string::npos);
  EXPECT_NE(problem([](PenaltyOptions& o) { o.ewma_alpha = 0; }).find("--ewma-alpha"),
            std::string::npos);
  EXPECT_NE(problem([](PenaltyOptions& o) { o.ewma_alpha = 1; }).find("(0, 1)"), std::string::npos);
  EXPECT_NE(problem([](PenaltyOptions& o) { o.ewma_warmup = -1; }).find("--ewma-warmup"),
            std::string::npos);
  EXPECT_NE(
      problem([](PenaltyOptions& o) { o.weight_temperature = 0; }).find("--weight-temperature"),
      std::string::npos);
  EXPECT_NE(problem([](PenaltyOptions& o) { o.clip = -1; }).find("--clip"), std::string::npos);
  EXPECT_NE(problem([](PenaltyOptions& o) { o.clip = kInf; }).find("--clip"), std::string::npos);
  PenaltyOptions zero_warmup;
  zero_warmup.ewma_warmup = 0;
  EXPECT_EQ(zero_warmup.check(), std::nullopt);
  PenaltyOptions bad;
  bad.ewma_alpha = 2;
  EXPECT_THROW(PseudoGradientPenalty(1, 1, bad), std::invalid_argument);
  EXPECT_THROW(PseudoGradientPenalty(0, 1, PenaltyOptions{}), std::invalid_argument);
}

TEST(PenaltyStepWeighting, MixesStepShares) {
  PenaltyDecision d;
  d.weights = {0.5, 0.3, 0.2};
  // Step shares 10, 30, 60 of 100 = .1, .3, .6; r = .5: (.5·.5 + .5·.1, .15 + .15, .1 + .3).
  const std::vector<std::uint64_t> steps = {10, 30, 60};
  const auto w = apply_step_weighting(d, steps, 0.5);
  EXPECT_NEAR(w[0], 0.3, 1e-15);
  EXPECT_NEAR(w[1], 0.3, 1e-15);
  EXPECT_NEAR(w[2], 0.4, 1e-15);
  EXPECT_EQ(apply_step_weighting(d, steps, 0.0), d.weights);
  // A dropped worker keeps weight 0; shares are over the others: steps 1 and 3 of 4, r = 1.
  PenaltyDecision dropped;
  dropped.weights = {0.75, 0.0, 0.25};
  dropped.dropped = {1};
  EXPECT_EQ(apply_step_weighting(dropped, std::vector<std::uint64_t>{1, 5, 3}, 1.0),
            (std::vector<double>{0.25, 0.0, 0.75}));
  // No steps at all: the penalty's weights unchanged.
  EXPECT_EQ(apply_step_weighting(d, std::vector<std::uint64_t>{0, 0, 0}, 0.5), d.weights);
  // A skipped layer stays skipped.
  PenaltyDecision skipped;
  skipped.weights = {0.0, 0.0};
  skipped.dropped = {0, 1};
  skipped.skip = true;
  EXPECT_EQ(apply_step_weighting(skipped, std::vector<std::uint64_t>{3, 4}, 0.5),
            (std::vector<double>{0.0, 0.0}));
  EXPECT_THROW(apply_step_weighting(d, steps, 1.5), std::invalid_argument);
  EXPECT_THROW(apply_step_weighting(d, steps, -0.1), std::invalid_argument);
  EXPECT_THROW(apply_step_weighting(d, std::vector<std::uint64_t>{1, 2}, 0.5),
               std::invalid_argument);
}

}  // namespace
