// dtrain's command line and its training run, in a program of one's own. A project that registers
// its own models, data sets and losses (models/ModelFactory.h, data/UserDataset.h, optim/Loss.h)
// gets the `dtrain` tool's commands over them by ending its main() in run(); or it trains one
// configuration from code with train() (run::train in run/Run.h).
#pragma once

#include <string>

#include "dtrain/config/RunConfig.h"
#include "dtrain/run/Run.h"

namespace dtrain::cli {

// Runs the command line `argv` as the dtrain tool does (train, launch, experiment, report, bench,
// info, cam) and returns its exit status: 0, 2 for a usage or input error, 1 for a failure in
// training, a worker's status through the launchers. The workers that train, experiment and
// bench throughput start, and the restarts of --max-restarts, run this same program
// (/proc/self/exe), so every one of them knows what the program registered:
//   int main(int argc, char** argv) {
//     dtrain::models::register_model({"mynet", "my network"}, build_mynet);
//     return dtrain::cli::run(argc, argv);   // ./app train run.yaml model.name=mynet --nproc 2
//   }
int run(int argc, char** argv);

// One training run of `config` in this process, as `dtrain train` runs it: run::train (run/Run.h),
// which also takes a communicator of the program's own, under the name it first had here.
using TrainOptions = run::TrainOptions;
inline int train(const config::RunConfig& config, const TrainOptions& options = {}) {
  return run::train(config, options);
}

}  // namespace dtrain::cli
