#include "atoll/comm/cpu_costs.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>
#include <string>

namespace {
using atl::comm::cpu_op_id;
using atl::comm::cpu_ops;
using atl::comm::CpuCost;
using atl::comm::CpuCostSamples;
using atl::comm::CpuCostTable;
using atl::comm::fit_cpu_cost;

TEST(CpuCosts, FitRecoversAnExactLinearCost) {
  CpuCostSamples s;
  const CpuCost truth{500, 2.0, 0.25};
  for (int i = 0; i < 50; ++i) {
    const double items = 1000.0 * (i % 7 + 1), bytes = 4096.0 * (i % 5) * (i % 3 + 1);
    s.add(items, bytes, truth.seconds(items, bytes));
  }
  const auto c = fit_cpu_cost(s);
  EXPECT_NEAR(c.ns_per_call, 500, 1e-3);
  EXPECT_NEAR(c.ns_per_item, 2.0, 1e-6);
  EXPECT_NEAR(c.ns_per_byte, 0.25, 1e-6);
}

TEST(CpuCosts, FitKeepsEveryCoefficientNonNegative) {
  // y = 3 ns per item minus a little per call (a timer that reads early): the unconstrained fit
  // has a negative call cost; the fit drops that regressor instead.
  CpuCostSamples s;
  std::mt19937 rng(3);
  std::uniform_real_distribution<double> noise(-1e-9, 1e-9);
  for (int i = 1; i <= 40; ++i) {
    const double items = 1000.0 * i;
    s.add(items, 0, 1e-9 * (3 * items - 50) + noise(rng));
  }
  const auto c = fit_cpu_cost(s);
  EXPECT_GE(c.ns_per_call, 0);
  EXPECT_GE(c.ns_per_item, 0);
  EXPECT_EQ(c.ns_per_byte, 0);  // bytes never varied (all 0): no byte cost
  EXPECT_NEAR(c.ns_per_item, 3.0, 0.05);
}

TEST(CpuCosts, NoSamplesCostNothing) {
  const auto c = fit_cpu_cost(CpuCostSamples{});
  EXPECT_EQ(c.seconds(1e6, 1e9), 0.0);
}

TEST(CpuCosts, SamplesMergeAsIfAddedTogether) {
  CpuCostSamples a, b, all;
  for (int i = 0; i < 10; ++i) {
    (i % 2 ? a : b).add(i, 2.0 * i, 1e-6 * i);
    all.add(i, 2.0 * i, 1e-6 * i);
  }
  a.merge(b);
  for (std::size_t k = 0; k < CpuCostSamples::kFields; ++k) EXPECT_DOUBLE_EQ(a.s[k], all.s[k]);
}

TEST(CpuCosts, EverySchemeStepHasAnOperation) {
  for (const char* zen : {"zen", "zen_coo", "zen_ef"})
    for (const char* step : {"partition", "aggregate", "plan", "encode", "decode"})
      EXPECT_NO_THROW(cpu_op_id(std::string(zen) + "." + step));
  // The server's check of the push is part of its aggregation since 75d4079.
  EXPECT_THROW(cpu_op_id("zen.check_push"), std::logic_error);
  EXPECT_EQ(cpu_ops()[cpu_op_id("allreduce.densify")], "allreduce.densify");
  EXPECT_THROW(cpu_op_id("zen.nope"), std::logic_error);
}

class CpuCostFile : public ::testing::Test {
 protected:
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("atoll-cpu-costs-" + std::to_string(::getpid()));
  void SetUp() override { std::filesystem::create_directories(dir); }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::filesystem::path write(const std::string& name, const std::string& text) {
    std::ofstream(dir / name) << text;
    return dir / name;
  }
  // Expects load() to fail with a message containing the file name and `what`.
  void expect_refused(const std::filesystem::path& file, const std::string& what) {
    try {
      (void)CpuCostTable::load(file);
      ADD_FAILURE() << file << " was accepted";
    } catch (const std::runtime_error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(file.filename().string()), std::string::npos) << m;
      EXPECT_NE(m.find(what), std::string::npos) << m;
    }
  }
};

TEST_F(CpuCostFile, SavesAndLoadsEveryOperation) {
  CpuCostTable t;
  std::vector<CpuCostSamples> samples(cpu_ops().size());
  for (std::size_t i = 0; i < samples.size(); ++i)
    for (int k = 1; k <= 4; ++k) samples[i].add(100.0 * k, 0, 1e-9 * (200 + (i + 1) * 100.0 * k));
  samples[cpu_op_id("auto.profile")] = CpuCostSamples{};
  t.merge(samples, "test run");
  t.save(dir / "t.json");
  const auto u = CpuCostTable::load(dir / "t.json");
  ASSERT_EQ(u.costs.size(), cpu_ops().size());
  for (std::size_t i = 0; i < u.costs.size(); ++i) {
    EXPECT_DOUBLE_EQ(u.costs[i].ns_per_item, t.costs[i].ns_per_item) << cpu_ops()[i];
    EXPECT_DOUBLE_EQ(u.costs[i].ns_per_call, t.costs[i].ns_per_call) << cpu_ops()[i];
    EXPECT_EQ(u.samples[i].s, t.samples[i].s);
  }
  EXPECT_NEAR(u.costs[cpu_op_id("zen.decode")].ns_per_item, cpu_op_id("zen.decode") + 1.0, 1e-6);
  EXPECT_EQ(u.unmeasured(), std::vector<std::string>{"auto.profile"});
  EXPECT_EQ(u.calibrations, std::vector<std::string>{"test run"});
}

TEST(CpuCostTable, NamesTheUnmeasuredOperationsARunCanCharge) {
  CpuCostTable t;  // nothing measured
  using V = std::vector<std::string>;
  EXPECT_EQ(t.unmeasured({"sparcml"}, false),
            (V{"sparcml.encode", "sparcml.decode", "sparcml.accumulate"}));
  const auto zen = t.unmeasured({"zen"}, false);
  EXPECT_EQ(zen.size(), 6u);  // partition, aggregate, plan, encode, decode, push_merge
  EXPECT_TRUE(std::all_of(zen.begin(), zen.end(), [](auto& op) { return op.starts_with("zen."); }));
  // Rows: Zen's row path too; another scheme on rows charges only its own operations.
  EXPECT_EQ(t.unmeasured({"zen"}, true).size(), 11u);
  EXPECT_EQ(t.unmeasured({"zen_coo", "allreduce"}, true).size(), 12u);
  EXPECT_EQ(t.unmeasured({"allreduce"}, true), V{"allreduce.densify"});
  // auto may run any scheme.
  EXPECT_EQ(t.unmeasured({"auto"}, false), t.unmeasured());
  EXPECT_EQ(t.unmeasured({"zen", "auto"}, true), t.unmeasured());
}

TEST_F(CpuCostFile, RefusesWhatIsNotATable) {
  expect_refused(dir / "absent.json", "absent.json");
  expect_refused(write("text.json", "ns 1 2 3"), "not JSON");
  // Found by fuzz target cpu_costs: nlohmann throws out_of_range, not parse_error, for this.
  expect_refused(write("overflow.json", R"({"format": "atoll-cpu-costs", "x": 8.8e+166397})"),
                 "not JSON");
  expect_refused(write("other.json", R"({"format": "other", "version": 1, "ops": {}})"),
                 "not an atoll cpu cost table");
  expect_refused(write("v2.json", R"({"format": "atoll-cpu-costs", "version": 2, "ops": {}})"),
                 "unsupported version");
  expect_refused(write("noops.json", R"({"format": "atoll-cpu-costs", "version": 1})"),
                 "no object \"ops\"");
  const std::string head = R"({"format": "atoll-cpu-costs", "version": 1, "ops": )";
  expect_refused(write("unknown.json", head + R"({"zen.nope": {}}})"),
                 "unknown operation 'zen.nope'");
  // A table written before an operation existed loads; the operation is unmeasured (charged 0,
  // and bench sync warns naming it).
  const auto missing = CpuCostTable::load(write("missing.json", head + "{}}"));
  EXPECT_EQ(missing.unmeasured().size(), cpu_ops().size());
  // A table written while an operation still existed loads too, that entry ignored (Zen's
  // check_push, part of its aggregate since 75d4079).
  const auto retired = CpuCostTable::load(write(
      "retired.json",
      head + R"({"zen.check_push": {"ns_per_call": 5, "ns_per_item": 1, "ns_per_byte": 0}}})"));
  EXPECT_EQ(retired.unmeasured().size(), cpu_ops().size());
  expect_refused(
      write(
          "negative.json",
          head + R"({"zen.partition": {"ns_per_call": 0, "ns_per_item": -2, "ns_per_byte": 0}}})"),
      "ns_per_item = -2");
  expect_refused(write("string.json", head + R"({"zen.partition": {"ns_per_call": "1"}}})"),
                 "no number 'ns_per_call'");
  expect_refused(
      write(
          "samples.json",
          head +
              R"({"zen.partition": {"ns_per_call": 0, "ns_per_item": 0, "ns_per_byte": 0, "samples": [1, 2]}}})"),
      "\"samples\" must be 10 numbers");
}

}  // namespace
