// The configuration a `--resume` runs with, and what it changes.
//
// Note [What a resume may change]
// A resumed run continues the run its checkpoint belongs to, in that run's folder: its model, data,
// optimizer and seed are the checkpoint's, so a setting that would have trained other weights (a
// model key, the data, optim.*, train.seed) cannot change on a resume and is refused by name. What
// may change is how long and how it goes on: the epochs and steps (and so the learning-rate
// schedule's length), logging, evaluation and checkpoint cadence, the workers (nproc, the strategy
// and its options, the backend: the checkpoint is read at any world size and by any exact strategy),
// the device and precision, threads and loader threads. Without CONFIG the run folder's own
// config.yaml is the base, so `dtrain train --resume DIR` alone continues the run as it was. The run
// folder's config.yaml is rewritten as the effective configuration, and every resume appends a line
// to its resumes.jsonl: when, from which checkpoint, at which step, and each key it changed.
#pragma once

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>
#include <vector>

#include "dtrain/config/Overrides.h"
#include "dtrain/config/RunConfig.h"

namespace dtrain::run {

struct ResumeChange {
  std::string key;  // dotted, e.g. "train.epochs"
  nlohmann::json was, now;
};

// The configuration a run starts with: `config_file`, or without one the resumed run's own
// config.yaml, or else `default_text` (read as `default_source`); then `overrides`. On a resume
// (`resume` names a run folder, its checkpoints/ or a checkpoint) it is checked against the run's
// saved configuration, so a key a resume may not change is refused before anything starts.
config::RunConfig load_run_config(const std::string& config_file,
                                  const std::vector<config::Override>& overrides, const std::string& resume,
                                  const std::string& default_text, const std::string& default_source);

// The keys that differ between the run's saved configuration and `config`. Throws
// std::invalid_argument naming the first key that may not change on a resume (and where each value
// comes from) when there is one.
std::vector<ResumeChange> resume_changes(const config::RunConfig& saved, const config::RunConfig& config,
                                         const std::filesystem::path& saved_path);

// The run folder's saved configuration, if it has one (config.yaml).
std::filesystem::path saved_config_path(const std::filesystem::path& run_folder);

// "train.epochs 2 -> 3, nproc 2 -> 1", or "no setting changed".
std::string describe(const std::vector<ResumeChange>& changes);

// Appends one line to `run_folder`/resumes.jsonl.
void record_resume(const std::filesystem::path& run_folder, const std::string& checkpoint, std::int64_t step,
                   const std::vector<ResumeChange>& changes);

}  // namespace dtrain::run
