// Every configuration dtrain ships under configs/ reads: each run configuration, and each
// experiment with every run it expands to (the base file and the run's overrides), so a file the
// README and the guides point at cannot drift from what the reader accepts.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "dtrain/config/RunConfigYaml.h"
#include "dtrain/experiment/Experiment.h"

namespace dtrain::experiment {
namespace {

namespace fs = std::filesystem;

std::string read_text(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<fs::path> yaml_files(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  return files;
}

TEST(ShippedConfigs, EveryRunConfigurationReads) {
  const fs::path configs = DTRAIN_CONFIGS_DIR;
  auto files = yaml_files(configs);
  for (const auto& file : yaml_files(configs / "bench")) files.push_back(file);
  ASSERT_GE(files.size(), 3u);
  for (const auto& file : files) {
    SCOPED_TRACE(file.string());
    EXPECT_NO_THROW(config::parse_run_config(read_text(file), file.string(), {}));
  }
}

TEST(ShippedConfigs, EveryExperimentAndEachOfItsRunsReads) {
  const auto files = yaml_files(fs::path(DTRAIN_CONFIGS_DIR) / "experiments");
  ASSERT_GE(files.size(), 4u);
  for (const auto& file : files) {
    SCOPED_TRACE(file.string());
    ExperimentSpec spec;
    ASSERT_NO_THROW(spec = load_experiment(file));
    const auto base = read_text(spec.base);
    for (const auto& run : expand_runs(spec)) {
      SCOPED_TRACE(run.name);
      // As the experiment reads them: a run goes without the model keys its model does not read.
      config::GridModelKeys keys;
      EXPECT_NO_THROW(config::parse_grid_run_config(base, spec.base.string(), run.overrides, keys));
    }
  }
}

}  // namespace
}  // namespace dtrain::experiment
