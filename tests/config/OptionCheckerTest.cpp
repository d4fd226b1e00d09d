// OptionChecker against the YAML reader: a configuration checked in place is refused with the key
// and the message the reader gives for the same values written to config.yaml and read back, and
// is accepted, with its names made canonical, where the reader accepts it.
#include "dtrain/config/OptionChecker.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "dtrain/config/ConfigError.h"
#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/config/Schema.h"
#include "dtrain/parallel/data_parallel/DataParallelStrategyOptions.h"
#include "dtrain/parallel/zero/ZeroOptions.h"

namespace dtrain::config {
namespace {

struct Outcome {
  bool refused = false;
  std::string key, message;
};

Outcome outcome(const std::function<void()>& check) {
  try {
    check();
  } catch (const ConfigError& e) {
    return {true, e.key(), e.message()};
  }
  return {};
}

// The reader's verdict on `config` as config.yaml holds it.
Outcome read_back(const RunConfig& config) {
  return outcome([&] { parse_run_config(to_yaml(config), "config.yaml"); });
}

Outcome checked_in_place(RunConfig& config) {
  return outcome([&] {
    OptionChecker checker("", "code");
    describe_run(checker, config);
  });
}

struct Case {
  const char* name;
  std::function<void(RunConfig&)> set;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all{
      {"defaults", [](RunConfig&) {}},
      {"name with a slash", [](RunConfig& c) { c.name = "a/b"; }},
      {"empty out_dir", [](RunConfig& c) { c.out_dir = ""; }},
      {"nproc 0", [](RunConfig& c) { c.nproc = 0; }},
      {"empty synthetic_shape", [](RunConfig& c) { c.data.synthetic_shape = {}; }},
      {"a zero in synthetic_shape",
       [](RunConfig& c) {
         c.data.synthetic_shape = {3, 0, 8};
       }},
      {"an empty freeze pattern",
       [](RunConfig& c) {
         c.model.freeze = {"layers.0.*", ""};
       }},
      {"dropout 1", [](RunConfig& c) { c.model.dropout = 1.0; }},
      {"an unknown model", [](RunConfig& c) { c.model.name = "lenet6"; }},
      {"accumulation_steps 0", [](RunConfig& c) { c.parallel.accumulation_steps = 0; }},
      {"a negative timeout", [](RunConfig& c) { c.parallel.timeout_s = -1.5; }},
      {"gloo_threads 0", [](RunConfig& c) { c.parallel.gloo_threads = 0; }},
      {"a strategy in capitals", [](RunConfig& c) { c.parallel.strategy = "LOCAL"; }},
      {"a misspelt strategy", [](RunConfig& c) { c.parallel.strategy = "locall"; }},
      {"zero stage 4",
       [](RunConfig& c) {
         c.parallel.strategy = "zero";
         c.parallel.options.get<parallel::ZeroOptions>("zero").stage = 4;
       }},
      {"compression powersgd with a bf16 wire",
       [](RunConfig& c) {
         c.parallel.strategy = "data_parallel";
         auto& o = c.parallel.options.get<parallel::DataParallelStrategyOptions>("data_parallel");
         o.compression = parallel::GradCompression::PowerSgd;
         o.powersgd_wire = parallel::PowerSgdWire::Bf16;
       }},
      {"bucket_mb 0",
       [](RunConfig& c) {
         c.parallel.options.get<parallel::DataParallelStrategyOptions>("data_parallel").bucket_mb = 0;
       }},
      {"a section of a strategy not chosen",
       [](RunConfig& c) { c.parallel.options.get<parallel::ZeroOptions>("zero").stage = 4; }},
  };
  return all;
}

TEST(OptionChecker, RefusesWhatTheReaderRefusesWithItsKeyAndMessage) {
  for (const auto& test : cases()) {
    SCOPED_TRACE(test.name);
    RunConfig config;
    test.set(config);
    const auto reference = read_back(config);
    const auto checked = checked_in_place(config);
    EXPECT_EQ(checked.refused, reference.refused);
    EXPECT_EQ(checked.key, reference.key);
    EXPECT_EQ(checked.message, reference.message);
  }
}

TEST(OptionChecker, LeavesTheValuesAsReadingThemWould) {
  for (const auto& test : cases()) {
    SCOPED_TRACE(test.name);
    RunConfig config;
    test.set(config);
    if (read_back(config).refused) continue;
    const auto read = parse_run_config(to_yaml(config), "config.yaml");
    ASSERT_FALSE(checked_in_place(config).refused);
    EXPECT_EQ(to_yaml(config), to_yaml(read));
  }
}

TEST(OptionChecker, NamesTheKeyBelowItsPrefix) {
  ParallelConfig parallel;
  parallel.strategy = "zero";
  parallel.options.get<parallel::ZeroOptions>("zero").stage = 0;
  try {
    OptionChecker checker("parallel", "the strategy's options");
    describe_parallel(checker, parallel);
    FAIL() << "stage 0 was taken";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.key(), "parallel.zero.stage");
    EXPECT_EQ(e.where(), "the strategy's options");
    EXPECT_EQ(e.message().rfind("parallel.zero.stage: expected ", 0), 0u) << e.message();
  }
}

}  // namespace
}  // namespace dtrain::config
