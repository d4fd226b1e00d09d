// Runs that should agree are grouped by a key made of the settings that decide the hash; the first
// run of a group sets the hash the others must record.
#include "dtrain/experiment/ExperimentChecks.h"

#include <fmt/format.h>

#include <map>
#include <optional>
#include <stdexcept>
#include <utility>

#include "dtrain/config/RunConfigYaml.h"

namespace dtrain::experiment {
namespace {

// (earlier, later): the first run whose hash differs from that of an earlier run with its key.
std::optional<std::pair<std::size_t, std::size_t>> first_disagreement(
    const std::vector<std::string>& keys, const std::vector<std::string>& hashes) {
  std::map<std::string, std::size_t> first;  // key -> the first run with it
  for (std::size_t i = 0; i < keys.size(); ++i) {
    const auto [it, inserted] = first.emplace(keys[i], i);
    if (!inserted && hashes[it->second] != hashes[i]) return std::make_pair(it->second, i);
  }
  return std::nullopt;
}

std::vector<std::string> hashes(const std::vector<FinishedRun>& runs, const char* field) {
  std::vector<std::string> out;
  for (const auto& run : runs) out.push_back(run.results.is_object() ? run.results.value(field, "") : "");
  return out;
}

// The data settings that decide which samples each worker trains on.
std::string partition_key(const FinishedRun& run) {
  auto data = config::to_json(run.config)["data"];
  for (const char* key : {"batch_size", "eval_batch_size", "drop_last", "normalize", "random_crop_padding",
                          "horizontal_flip", "loader_threads", "prefetch", "test_subset_size"}) {
    data.erase(key);
  }
  return data.dump() + "/" + std::to_string(run.config.train.seed) + "/" +
         std::to_string(run.results.is_object() ? run.results.value("world_size", 1) : 1);
}

}  // namespace

void check_initial_weights(const std::vector<FinishedRun>& runs) {
  std::vector<std::string> keys;
  for (const auto& run : runs)
    keys.push_back(config::to_json(run.config)["model"].dump() + run.config.data.dataset);
  const auto hash = hashes(runs, "initial_parameter_hash");
  if (const auto pair = first_disagreement(keys, hash)) {
    const auto [a, b] = *pair;
    throw std::runtime_error(
        fmt::format("experiment: runs '{}' and '{}' use the same model but started from different weights "
                    "({} against {}); give them the same train.seed",
                    runs[a].name, runs[b].name, hash[a], hash[b]));
  }
}

void check_data_partitions(const std::vector<FinishedRun>& runs) {
  std::vector<std::string> keys;
  for (const auto& run : runs) keys.push_back(partition_key(run));
  const auto hash = hashes(runs, "data_partition_hash");
  if (const auto pair = first_disagreement(keys, hash)) {
    const auto [a, b] = *pair;
    throw std::runtime_error(
        fmt::format("experiment: runs '{}' and '{}' have the same data, seed and workers but split the "
                    "training set differently ({} against {})",
                    runs[a].name, runs[b].name, hash[a], hash[b]));
  }
}

}  // namespace dtrain::experiment
