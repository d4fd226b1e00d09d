// What an elastic job's launcher hands its workers, read back, and the strategies an elastic job
// refuses (Note [Elastic workers]).
#include <gtest/gtest.h>

#include <string>

#include "dtrain/io/RunDir.h"
#include "dtrain/parallel/Registry.h"
#include "dtrain/run/ElasticWorker.h"
#include "support/ScratchDir.h"

namespace dtrain::run {
namespace {

TEST(ElasticWorker, ReadsItsSettingsFromTheLaunchersVariables) {
  EXPECT_FALSE(elastic_options({}).has_value());
  const comm::Environment env{{"DTRAIN_ELASTIC", "4:6"},
                              {"DTRAIN_ELASTIC_ID", "host-12-1-0"},
                              {"DTRAIN_ELASTIC_LAST_CALL_MS", "250"},
                              {"TORCHELASTIC_RUN_ID", "job7"}};
  const auto options = elastic_options(env);
  ASSERT_TRUE(options.has_value());
  EXPECT_EQ(options->min_members, 4);
  EXPECT_EQ(options->max_members, 6);
  EXPECT_EQ(options->last_call.count(), 250);
  EXPECT_EQ(options->run_id, "job7");
  EXPECT_EQ(elastic_member_id(env), "host-12-1-0");
  for (const auto* bad : {"4", "6:4", "0:2", "a:b", "2:3x"}) {
    try {
      elastic_options({{"DTRAIN_ELASTIC", bad}});
      FAIL() << bad << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("DTRAIN_ELASTIC"), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(elastic_member_id({}), std::invalid_argument);
}

// Every registered strategy as its registration declares it: an elastic one is accepted, and holds
// the whole state when it says so; a fixed one is refused naming itself, its reason and the way out.
TEST(ElasticWorker, StrategiesWhoseStateNoPeerHoldsAreRefusedByName) {
  config::RunConfig cfg;
  for (const auto& info : parallel::registered_strategies()) {
    const auto& can = info.capabilities;
    cfg.parallel.strategy = info.name;
    EXPECT_EQ(holds_whole_state(cfg), can.elastic == parallel::Elasticity::WholeState) << info.name;
    if (can.elastic != parallel::Elasticity::Fixed) {
      EXPECT_NO_THROW(check_elastic(cfg)) << info.name;
      continue;
    }
    try {
      check_elastic(cfg);
      FAIL() << info.name << " was accepted";
    } catch (const std::invalid_argument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("parallel.strategy " + info.name), std::string::npos) << what;
      EXPECT_NE(what.find(can.fixed_because), std::string::npos) << what;
      EXPECT_NE(what.find("--max-restarts"), std::string::npos) << what;
    }
  }
  // The built-in strategies' declarations, and the line a refused one prints.
  const auto elastic = [](const char* name) { return parallel::find_strategy(name).capabilities.elastic; };
  EXPECT_EQ(elastic("data_parallel"), parallel::Elasticity::WholeState);
  EXPECT_EQ(elastic("zero"), parallel::Elasticity::ShardedState);
  for (const auto* name : {"pipeline", "decentralized", "local", "dad", "rankdad"}) {
    EXPECT_EQ(elastic(name), parallel::Elasticity::Fixed) << name;
  }
  cfg.parallel.strategy = "pipeline";
  try {
    check_elastic(cfg);
    FAIL() << "pipeline was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()),
              "dtrain launch --nnodes MIN:MAX: parallel.strategy pipeline cannot change size while it runs: "
              "each member holds its own stages, which another number of members splits otherwise; elastic "
              "jobs run data_parallel or zero; give a fixed --nnodes and --max-restarts to restart from the "
              "checkpoint at the new size");
  }
  // A mesh fixes the number of workers, whatever the strategy.
  cfg.parallel.strategy = "zero";
  cfg.parallel.mesh.dp_replicate = 2;
  cfg.parallel.mesh.dp_shard = 2;
  try {
    check_elastic(cfg);
    FAIL() << "a mesh was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "parallel.mesh (pp 0, dp_replicate 2, dp_shard 2, tp 0; 0 = not set) fixes the "
                  "number of workers"),
              std::string::npos)
        << e.what();
  }
}

TEST(ElasticWorker, MembershipLinesCountTheStepsEachGenerationTrainsAgain) {
  dtrain::testing::ScratchDir dir;
  const auto run = io::RunDir::create(dir.path(), "elastic");
  struct Case {
    std::int64_t reached;
    bool failed;
    std::int64_t resumed;
    int lost;
  };
  // A failure with the state from a peer: the step in flight. An admission: nothing. A failure
  // continued from a checkpoint 25 steps back: those and the step in flight.
  const std::vector<Case> cases{{104, true, 104, 1}, {200, false, 200, 0}, {275, true, 250, 26}};
  Generation first;
  first.members.generation = 0;
  agree_on_previous(first, Generation(), nullptr);
  record_generation(run, first, 0);
  for (std::size_t i = 0; i < cases.size(); ++i) {
    Generation previous, next;
    previous.reached_step = cases[i].reached;
    previous.failed = cases[i].failed;
    agree_on_previous(next, previous, nullptr);
    next.members.generation = static_cast<int>(i) + 1;
    next.resumed_from_step = cases[i].resumed;
    record_generation(run, next, cases[i].resumed);
  }
  const auto lines = generations_json(run);
  ASSERT_EQ(lines.size(), cases.size() + 1);
  EXPECT_FALSE(lines[0].contains("steps_lost"));
  for (std::size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(lines[i + 1]["steps_lost"], cases[i].lost) << i;
}

}  // namespace
}  // namespace dtrain::run
