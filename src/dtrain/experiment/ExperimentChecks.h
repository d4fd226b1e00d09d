// The checks that make an experiment's runs comparable, made once every run has finished: runs of
// the same model started from the same weights, and runs of the same data, seed and number of
// workers split the training set the same way (each run records both as hashes in results.json).
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "dtrain/config/RunConfig.h"

namespace dtrain::experiment {

// A finished run as the checks see it.
struct FinishedRun {
  std::string name;
  config::RunConfig config;
  nlohmann::json results;  // its results.json
};

// Throws std::runtime_error naming both runs and both hashes when two runs with the same model
// and data set record a different initial_parameter_hash.
void check_initial_weights(const std::vector<FinishedRun>& runs);

// Throws std::runtime_error naming both runs and both hashes when two runs with the same data
// (apart from batching, augmentation and loading settings), seed and world size record a different
// data_partition_hash.
void check_data_partitions(const std::vector<FinishedRun>& runs);

}  // namespace dtrain::experiment
