// The schema of a RunConfig: every key, its range or allowed names, written once as a description
// that config/'s readers and writers visit (see Options.h). A field added to RunConfig.h and
// described here is loaded, validated, saved and compared without further code.
#pragma once

#include "dtrain/config/Options.h"
#include "dtrain/config/RunConfig.h"

namespace dtrain::config {

// The choice keys whose names other layers register (config/Registry.h).
inline constexpr const char* kDatasetKey = "data.dataset";
inline constexpr const char* kPartitionKey = "data.partition";
inline constexpr const char* kModelKey = "model.name";
inline constexpr const char* kOptimizerKey = "optim.name";
inline constexpr const char* kScheduleKey = "optim.scheduler.name";
inline constexpr const char* kLossKey = "optim.loss";
inline constexpr const char* kStrategyKey = "parallel.strategy";

// The keys of model.* that only some models read (a built-in model declares which in its
// Choice::reads): model.hidden is mlp's, model.patch vit's.
const std::vector<std::string>& model_specific_keys();
// Why model.<key> does not apply to model `model_name`, or "" when it does (or when the model is a
// program's own, which may read any key, or not registered).
std::string model_key_unused(const std::string& model_name, const std::string& key);

// Visits every option of `config`, sections in the order of RunConfig.h. Writers must not modify.
void describe_run(OptionVisitor& visitor, RunConfig& config);
// The parallel section alone (keys relative to `parallel`), as describe_run visits it.
void describe_parallel(OptionVisitor& visitor, ParallelConfig& parallel);

}  // namespace dtrain::config
