// The life of one training run, for `dtrain train` and for a program of one's own: the run folder
// (made, or continued by a resume), the configuration a resume runs with, restarts from the latest
// checkpoint, an elastic job's generations, the trainer with its callbacks, and results.json. The
// command line (cli/TrainCommand.cpp) only reads its flags into a JobOptions and calls run_job.
#pragma once

#include <string>
#include <vector>

#include "dtrain/comm/Communicator.h"
#include "dtrain/config/RunConfig.h"

namespace dtrain::run {

struct TrainOptions {
  // Continue from this run folder's latest checkpoint, or from this checkpoint file (--resume).
  std::string resume;
  // Write into this run folder (made when missing) instead of a new one under config.out_dir
  // (--run-dir); restarts by a launcher continue in it from its latest checkpoint.
  std::string run_dir;
};

// Note [What a run records]
// The run folder's config.yaml (and results.json's config, and `dtrain train --print-config`) is the
// configuration that ran: CONFIG with every flag that stands for a key applied, --nproc N among
// them as the key nproc. A resume starts from that file, so it goes on with the workers that ran
// unless told otherwise; a resume refused for what it was given (a key it may not change, a
// checkpoint this run cannot continue, train.max_steps below the checkpoint's step) leaves
// config.yaml and results.json as they were.

// A job as `dtrain train`'s command line describes it: the run's options, how many local workers
// to start, and this worker's rendezvous where the command line gives it.
struct JobOptions : TrainOptions {
  // The configuration as given, which the workers this process starts read again: CONFIG ("" for
  // none) and the key=value overrides after it.
  std::string config_file;
  std::vector<std::string> overrides;
  // Local workers to start: --nproc, else the configuration's nproc (0).
  int nproc = 0;
  bool oversubscribe = false;  // --oversubscribe
  int max_restarts = 0;        // --max-restarts
  // --rank, --world-size, --master-addr, --master-port, --dist-url; -1 and "" where not given.
  int rank = -1;
  int world_size = -1;
  std::string master_addr;
  int master_port = -1;
  std::string dist_url;
};

// One training run of `config` in this process, as `dtrain train` runs it: the strategy by name,
// the run folder (config.yaml, the log, metrics.jsonl and .csv, TensorBoard, checkpoints, model.pt,
// results.json). With a `communicator`, this process is its rank of the job (every rank calls
// train with its own); without one, started by a launcher (dtrain launch, torchrun, mpirun, srun)
// the process is one worker of the job and connects as the environment says, and alone it is the
// only one (a config.nproc above 1 is refused: start the program with `dtrain launch
// --nproc-per-node N`). `config` is checked as a YAML file would be. Returns the exit status
// `dtrain train` would give (Note [Exit codes]), having printed the one-line error of a failure.
int train(const config::RunConfig& config, const TrainOptions& options = {},
          comm::CommunicatorPtr communicator = nullptr);

// `dtrain train`'s job: checks what can be checked before anything starts, then either starts
// `job.nproc` local workers running this program (when no launcher started this process and there
// is more than one, or restarts are asked for), or is one worker. Throws for a refused input.
int run_job(const config::RunConfig& config, const JobOptions& job);

}  // namespace dtrain::run
