// Fuzz target: an experiment file (dtrain's form or DiNNO's), read and expanded into its runs.
// Every run must be a folder inside out_dir (Experiment.h: is_folder_name).
#include <stdexcept>
#include <string>

#include "dtrain/config/ConfigError.h"
#include "dtrain/experiment/Experiment.h"
#include "fuzz/FuzzInput.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dtrain;
  const std::string path = fuzz::write_scratch("experiment.yaml", fuzz::as_text(data, size));
  experiment::ExperimentSpec spec;
  try {
    spec = experiment::load_experiment(path);
  } catch (const config::ConfigError&) {
    return 0;  // refused, naming file:line and key
  } catch (const std::invalid_argument&) {
    return 0;  // the file cannot be read (ExperimentFile.cpp)
  }
  for (const auto& run : experiment::expand_runs(spec)) {
    // A run's folder is its name with "__" and the sweep's values made folder-safe: one name,
    // never a path that leaves out_dir.
    if (!experiment::is_folder_name(run.name))
      fuzz::property_failed("run name is not a folder name: " + run.name);
  }
  return 0;
}
