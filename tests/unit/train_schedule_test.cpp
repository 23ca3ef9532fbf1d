// The trainer's schedule parts free of communication: --inject-fault parsing and slowdowns,
// the run plan (validation, checkpoints, the end), aedit's round clock and the sites' model clock.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <string>

#include "faults.h"
#include "run_plan.h"
#include "site_clock.h"
#include "timed_rounds.h"

namespace atl::train {
namespace {

std::string error_of(const std::string& spec) {
  try {
    parse_faults(spec);
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(Faults, ParsesEachKindAndLists) {
  EXPECT_FALSE(parse_faults("").corrupt);
  const auto f = parse_faults("corrupt:2:30:nan,straggler:1:3,stall:0.05:2");
  ASSERT_TRUE(f.corrupt && f.straggler && f.stall);
  EXPECT_EQ(f.corrupt->rank, 2);
  EXPECT_EQ(f.corrupt->step, 30);
  EXPECT_TRUE(std::isnan(f.corrupt->scale));
  EXPECT_EQ(f.straggler->rank, 1);
  EXPECT_EQ(f.straggler->factor, 3);
  EXPECT_EQ(f.stall->probability, 0.05);
  EXPECT_EQ(f.stall->seconds, 2);
  EXPECT_EQ(f.largest_rank(), 2);
  EXPECT_EQ(parse_faults("stall:0.1:1").largest_rank(), -1);
  const auto stop = parse_faults("stop:3:7");
  ASSERT_TRUE(stop.process);
  EXPECT_EQ(stop.process->signal, util::FaultSignal::stop);
  EXPECT_EQ(stop.process->rank, 3);
  EXPECT_EQ(stop.process->phase, "backward");
  EXPECT_EQ(stop.process->step, 7);
  EXPECT_EQ(stop.largest_rank(), 3);
  const auto kill = parse_faults("kill:4:pull:2,nan:1:9");
  ASSERT_TRUE(kill.process && kill.nan);
  EXPECT_EQ(kill.process->signal, util::FaultSignal::kill);
  EXPECT_EQ(kill.process->phase, "pull");
  EXPECT_EQ(kill.process->step, 2);
  EXPECT_EQ(kill.nan->rank, 1);
  EXPECT_EQ(kill.nan->step, 9);
  EXPECT_EQ(kill.largest_rank(), 4);
}

TEST(Faults, RefusesWithTheProblemNamed) {
  EXPECT_NE(error_of("straggler:1").find("unknown form"), std::string::npos);
  EXPECT_NE(error_of("slow:1:2").find("unknown form"), std::string::npos);
  EXPECT_NE(error_of("straggler:x:2").find("RANK 'x' is not a number"), std::string::npos);
  EXPECT_NE(error_of("straggler:0:0.5").find("FACTOR must be at least 1"), std::string::npos);
  EXPECT_NE(error_of("stall:-0.1:1").find("PROB must be in [0, 1]"), std::string::npos);
  EXPECT_NE(error_of("stall:0.1:0").find("SECONDS must be positive"), std::string::npos);
  EXPECT_NE(error_of("stall:0.1:inf").find("not a finite number"), std::string::npos);
  EXPECT_NE(error_of("stall:0.1:1,stall:0.2:1").find("stall given twice"), std::string::npos);
  EXPECT_NE(error_of("corrupt:1:0:2").find("STEP must be a step >= 1"), std::string::npos);
  EXPECT_NE(error_of("straggler:1:2,").find("unknown form"), std::string::npos);
  EXPECT_NE(error_of("stop:1:0").find("STEP must be a step >= 1"), std::string::npos);
  EXPECT_NE(error_of("stop:1:2,kill:0:push:3").find("one kill or stop per run"), std::string::npos);
  EXPECT_NE(error_of("kill:1:flush:3").find("unknown PHASE 'flush'"), std::string::npos);
  EXPECT_NE(error_of("kill:1:3").find("unknown form"), std::string::npos);
  EXPECT_NE(error_of("nan:1:0").find("STEP must be a step >= 1"), std::string::npos);
}

TEST(Slowdown, StragglerOnlyOnItsRankStallsSeededAndAtTheirRate) {
  const auto f = parse_faults("straggler:1:3,stall:0.25:2");
  const Slowdown rank0(f, 0, 7), rank1(f, 1, 7), rank1_again(f, 1, 7), other_seed(f, 1, 8);
  int stalls = 0, differ = 0;
  for (int step = 1; step <= 4000; ++step) {
    const double e0 = rank0.extra_seconds(step, 0.5), e1 = rank1.extra_seconds(step, 0.5);
    EXPECT_TRUE(e0 == 0 || e0 == 2) << step;
    EXPECT_TRUE(e1 == 1 || e1 == 3) << step;  // (3 − 1)·0.5, plus a stall
    EXPECT_EQ(e1, rank1_again.extra_seconds(step, 0.5));
    stalls += e0 == 2;
    differ += e1 != other_seed.extra_seconds(step, 0.5);
  }
  EXPECT_NEAR(stalls / 4000.0, 0.25, 0.03);
  EXPECT_GT(differ, 0);
  const Slowdown none(parse_faults(""), 0, 7);
  EXPECT_EQ(none.extra_seconds(3, 1.0), 0);
}

TrainConfig plan_config() {
  TrainConfig c;
  c.steps = 10;
  c.eval_every = 4;
  c.checkpoint_every = 5;
  c.out = "/tmp/out";
  return c;
}

TEST(RunPlan, ByStepNumber) {
  const RunPlan plan(plan_config(), 4, 0);
  EXPECT_FALSE(plan.at_step(3).eval);
  EXPECT_TRUE(plan.at_step(4).eval);
  EXPECT_TRUE(plan.at_step(5).checkpoint);
  EXPECT_FALSE(plan.at_step(9).last);
  const auto last = plan.at_step(10);
  EXPECT_TRUE(last.last && last.eval && last.checkpoint);
  auto no_out = plan_config();
  no_out.out.clear();
  EXPECT_FALSE(RunPlan(no_out, 4, 0).at_step(10).checkpoint);
}

TEST(RunPlan, AtRoundsByAllWorkersBatches) {
  RunPlan plan(plan_config(), 4, 0);  // eval every 16 batches, checkpoint every 20, end at 40
  auto p = plan.at_round(15);
  EXPECT_FALSE(p.eval || p.checkpoint || p.last);
  p = plan.at_round(17);  // crossed 16
  EXPECT_TRUE(p.eval);
  EXPECT_FALSE(p.checkpoint);
  p = plan.at_round(20);  // 20 exactly: a checkpoint; 32 not reached
  EXPECT_TRUE(p.checkpoint);
  EXPECT_FALSE(p.eval);
  p = plan.at_round(35);  // crossed 32 (eval)
  EXPECT_TRUE(p.eval);
  EXPECT_FALSE(p.checkpoint || p.last);
  p = plan.at_round(43);  // the budget: all three
  EXPECT_TRUE(p.last && p.eval && p.checkpoint);
  EXPECT_TRUE(plan.done());
  EXPECT_TRUE(RunPlan(plan_config(), 4, 40).done());  // resumed at the end
  EXPECT_FALSE(RunPlan(plan_config(), 4, 39).done());
}

TEST(TimedRounds, ClockPausesAndRestartsAtRounds) {
  TimedRounds r(1.0, 1);
  r.start(100.0);
  EXPECT_FALSE(r.step_done(100.6));
  r.pause(100.7);  // validation 5 s: not training time
  EXPECT_NEAR(r.elapsed(103.0), 0.7, 1e-12);
  r.resume(105.7);
  EXPECT_NEAR(r.elapsed(105.9), 0.9, 1e-12);
  EXPECT_TRUE(r.step_done(106.0));  // 1.0 s of training
  r.end_round(106.2, true);
  EXPECT_EQ(r.rounds(), 1);
  EXPECT_FALSE(r.step_done(107.1));
  r.end_round(107.3, false);  // skipped: the step still counts toward the next sync
  EXPECT_EQ(r.skipped(), 1);
  EXPECT_NEAR(r.elapsed(107.8), 0.5, 1e-12);
}

TEST(TimedRounds, SavesAndLoadsItsClockAndCounters) {
  TimedRounds r(2.0, 3);
  r.start(0.0);
  r.step_done(0.5);
  r.step_done(1.0);
  const auto saved = r.save(1.25);
  ASSERT_EQ(saved.size(), 4u);
  EXPECT_DOUBLE_EQ(saved[0], 1.25);
  EXPECT_DOUBLE_EQ(saved[1], 2.0);
  TimedRounds back(2.0, 3);
  back.load(saved);
  EXPECT_FALSE(back.running());
  back.start(50.0);  // the saved 1.25 s carry on
  EXPECT_FALSE(back.step_done(50.7));
  EXPECT_TRUE(back.step_done(50.75));
  EXPECT_EQ(back.save(50.75)[1], 4.0);
  EXPECT_THROW(back.load(std::vector<double>{1, 2, 3}), std::invalid_argument);
  EXPECT_THROW(back.load(std::vector<double>{1, -2, 3, 4}), std::invalid_argument);
  EXPECT_THROW(back.load(std::vector<double>{NAN, 2, 3, 4}), std::invalid_argument);
}

// aedit across sites: site 1 at half speed takes 2 local steps per round, sites 0 and 2 take 3;
// site 0's copy of every clock has advanced by each site's own round of compute after its 3.
TEST(SiteClock, LocalStepsAdvanceEachSiteByItsOwnRound) {
  SiteClock clock({1.0, 0.5, 1.0}, 0, 0.1);
  clock.local_step(0, false);  // a data-parallel warm-up step: one step everywhere
  clock.set_round_steps({3, 2, 3});
  for (int i = 0; i < 3; ++i) clock.local_step(0, true);
  const auto s = clock.state();  // clocks, then exchanges in flight
  ASSERT_EQ(s.size(), 6u);
  EXPECT_NEAR(s[0], 0.1 + 0.3, 1e-12);
  EXPECT_NEAR(s[1], 0.2 + 0.4, 1e-12);  // 2 steps of 0.2 s, not 3
  EXPECT_NEAR(s[2], 0.1 + 0.3, 1e-12);
  EXPECT_DOUBLE_EQ(clock.now(), s[0]);
  EXPECT_THROW(clock.set_round_steps({3, 2}), std::invalid_argument);
}

}  // namespace
}  // namespace atl::train
