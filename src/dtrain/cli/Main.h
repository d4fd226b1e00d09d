// dtrain's command line and its training run, in a program of one's own. A project that registers
// its own models, data sets and losses (models/ModelFactory.h, data/UserDataset.h, optim/Loss.h)
// gets the `dtrain` tool's commands over them by ending its main() in run(); or it trains one
// configuration from code with train().
#pragma once

#include <string>

#include "dtrain/config/RunConfig.h"

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

struct TrainOptions {
  // Continue from this run folder's latest checkpoint, or from this checkpoint file (--resume).
  std::string resume;
  // Write into this run folder (made when missing) instead of a new one under config.out_dir
  // (--run-dir); restarts by a launcher continue in it from its latest checkpoint.
  std::string run_dir;
};

// One training run of `config` in this process, as `dtrain train` runs it: the strategy by name,
// the run folder (config.yaml, the log, metrics.jsonl and .csv, TensorBoard, checkpoints, model.pt,
// results.json). Started by a launcher (dtrain launch, torchrun, mpirun, srun), the process is one
// worker of the job; alone, it is the only one (a config.nproc above 1 is refused: start the
// program with `dtrain launch --nproc-per-node N`). `config` is checked as a YAML file would be.
// Returns the exit status run() would give, having printed the one-line error of a failure.
int train(const config::RunConfig& config, const TrainOptions& options = {});

}  // namespace dtrain::cli
