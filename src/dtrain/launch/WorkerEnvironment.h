// What each worker is told: torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, ...,
// TORCHELASTIC_*) when the launcher starts the ranks itself, or mpirun's command line and
// environment when it delegates to mpirun; and how many intra-op threads each gets.
#pragma once

#include <string>
#include <vector>

#include "dtrain/comm/rendezvous/Rendezvous.h"
#include "dtrain/launch/Job.h"

namespace dtrain::launch {

// The first global rank whose output this node carries: with mpirun this node runs every rank.
int first_rank(const LaunchOptions& options);

// Intra-op threads per worker: --threads, else a user-set OMP_NUM_THREADS, else cores / local ranks.
int threads_per_worker(const LaunchOptions& options);

// Where rank `rank` writes its torchrun error file (TORCHELASTIC_ERROR_FILE).
std::string error_file(const std::string& log_dir, int rank);

// The environment of local rank `local_rank` in `attempt`.
// `incarnation`: how many workers this slot has had before this one in an elastic job (each is a
// new member with an id of its own).
comm::Environment torchrun_environment(const Job& job, int attempt, int local_rank, int incarnation = 0);

// mpirun's argv (mpirun itself first) and its environment.
std::vector<std::string> mpirun_arguments(const Job& job, int attempt);
comm::Environment mpirun_environment(const Job& job);

}  // namespace dtrain::launch
