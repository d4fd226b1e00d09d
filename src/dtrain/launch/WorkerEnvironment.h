// What each worker is told: torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, ...,
// TORCHELASTIC_*) when the launcher starts the ranks itself, or mpirun's command line and
// environment when it delegates to mpirun; and how many intra-op threads each gets (Job::threads).
#pragma once

#include <string>
#include <vector>

#include "dtrain/comm/rendezvous/Rendezvous.h"
#include "dtrain/launch/Job.h"

namespace dtrain::launch {

// The first global rank whose output this node carries: with mpirun this node runs every rank.
int first_rank(const LaunchOptions& options);

// The workers this launcher starts: its node's ranks, or with mpirun every rank of the job.
int local_workers(const LaunchOptions& options);

// How many cores this process may run on (its CPU affinity).
int usable_cores();

// Note [Launchers that share a host]
// A launcher gives each worker a share of its host's cores as intra-op threads (OMP_NUM_THREADS).
// Several nodes of one job may run on one host, though: trying a multi-node job on one machine, or
// the hosts of bench/netns.sh, which are network namespaces of one kernel. Each launcher dividing
// the cores among its own workers alone gives the host as many threads per core as there are
// launchers, and oversubscribed cores slow every step many times over. So before starting workers
// each launcher says in node 0's store (NodeStore::register_share) which cores it runs on and how
// many workers it starts there, waits until every node has said so, and divides its cores among
// the workers of every launcher on the same cores. Cores are named by the kernel's boot id, which
// namespaces and containers of one machine share whatever their host names, and the CPU affinity:
// launchers pinned to different cores (taskset) keep theirs. An elastic job's nodes come and go,
// so its launchers count the nodes there when they start, not later ones. --threads and a user-set
// OMP_NUM_THREADS win over the division, as on one node.

// The cores this process runs on, as every process on them names them: "<boot id>/<cpus>", e.g.
// "5f0c...e2/0-3,8". Without a boot id, the host name stands for the machine.
std::string shared_cores_id();

// Intra-op threads per worker: --threads, else a user-set OMP_NUM_THREADS, else `cores` divided
// among the workers of every share in `shares` on the cores named `on` (local_workers() when none
// is), at least one each. See Note [Launchers that share a host].
int threads_per_worker(const LaunchOptions& options, int cores, const std::string& on,
                       const std::vector<HostShare>& shares);

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
