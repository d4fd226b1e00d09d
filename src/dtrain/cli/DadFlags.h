// The dAD paper's command line on `dtrain train`: the flags of Catalyst dAD's runner
// (distributed_auto_differentiation/experiment.py). A flag that names a setting of ours is an
// override of that key (config::Override with `flag` set), so it is validated, written to
// config.yaml and reported as `key=value` is, and its errors name the flag. The rendezvous flags
// (--rank, --num-nodes, --dist-url, --master-addr, --master-port) are train's own options.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <utility>
#include <vector>

#include "dtrain/config/Overrides.h"

namespace dtrain::cli {

// What a configuration holds when `dtrain train` is given no CONFIG: RunConfig's defaults, but the
// run folder is the dAD paper's <log-dir>/<name>/ with log-dir `logs`.
inline constexpr const char* kDadDefaults = "out_dir: logs\nrun_folder: named\n";
inline constexpr const char* kDadDefaultsSource = "dtrain train without CONFIG";

class DadFlags {
 public:
  // Adds --backend, --lr, --batch-size, ... to `cmd`; the values given are kept here.
  void add_to(CLI::App& cmd);

  // The overrides that the flags given stand for, in the order of the paper's usage line. Throws
  // std::invalid_argument naming the flag where one cannot be honoured (--model-args with
  // arguments) or its value has not the paper's form (--N, --model-kwargs).
  std::vector<config::Override> overrides() const;

  // Records `flag` (e.g. "--lr") given with `value`, as the command line does.
  void set(const std::string& flag, const std::string& value);

 private:
  std::vector<std::pair<std::string, std::string>> given_;  // (flag, value)
};

// Throws std::invalid_argument when a flag and a key=value override set the same key (or one sets
// a section holding the other's key): one of them would be silently lost.
void check_no_conflict(const std::vector<config::Override>& flags,
                       const std::vector<config::Override>& overrides);

}  // namespace dtrain::cli
