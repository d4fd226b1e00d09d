// What a training run writes about itself when it ends: results.json (the figures, the settings,
// the status), per_class.csv, and results.json's "failed" form for a run that failed.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "dtrain/config/RunConfig.h"
#include "dtrain/io/RunDir.h"
#include "dtrain/train/Trainer.h"

namespace dtrain::run {

nlohmann::json results_json(const config::RunConfig& cfg, const train::Trainer& trainer,
                            const train::TrainResult& r, const io::RunDir& run, const std::string& backend);

// The final evaluation by class, named where the data set names its classes (data::class_names):
// class, name, samples, precision, recall. "" when there are no names to report by.
std::string per_class_csv(const train::EvalMetrics& m, const std::vector<std::string>& names);

// A run that fails leaves results.json saying so (status "failed", the error, the exit status), so a
// folder is never taken for a run that finished or one still running. Best effort: the error being
// reported matters more than this file.
void record_failure(const io::RunDir& run, const std::string& message, int exit_code);

}  // namespace dtrain::run
