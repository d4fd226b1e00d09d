// torchrun's environment, variable for variable, so that a worker cannot tell dtrain launch from
// torchrun with an agent store; mpirun gets the same settings through -x.
#include "dtrain/launch/WorkerEnvironment.h"

#include <sched.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <thread>
#include <utility>

#include "dtrain/comm/store/StoreSecret.h"

namespace dtrain::launch {
namespace {

// This host's name, for the ids of elastic members ("host" when it has none).
std::string this_host() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "host";
  return name;
}

}  // namespace

int first_rank(const LaunchOptions& options) {
  return options.backend == "mpi" ? 0 : options.node_rank * options.nproc_per_node;
}

int local_workers(const LaunchOptions& options) {
  return options.backend == "mpi" ? options.nnodes * options.nproc_per_node : options.nproc_per_node;
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

std::string shared_cores_id() {
  std::string machine;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> machine;
  if (machine.empty()) machine = this_host();
  std::string cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return machine;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &set)) continue;
    int last = cpu;
    while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set)) ++last;
    cpus += (cpus.empty() ? "" : ",") + (last == cpu ? std::to_string(cpu) : fmt::format("{}-{}", cpu, last));
    cpu = last;
  }
  return machine + "/" + cpus;
}

int threads_per_worker(const LaunchOptions& options, int cores, const std::string& on,
                       const std::vector<HostShare>& shares) {
  if (options.threads > 0) return options.threads;
  const auto user = options.environment.find("OMP_NUM_THREADS");
  if (user != options.environment.end()) {
    try {
      const int value = std::stoi(user->second);
      if (value > 0) return value;
    } catch (const std::exception&) {
    }
  }
  int workers = 0;
  for (const auto& share : shares) {
    if (share.cores == on) workers += std::max(0, share.workers);
  }
  if (workers == 0) workers = local_workers(options);
  return std::max(1, cores / workers);
}

std::string error_file(const std::string& log_dir, int rank) {
  return fmt::format("{}/rank_{}.error.json", log_dir, rank);
}

comm::Environment torchrun_environment(const Job& job, int attempt, int local_rank, int incarnation) {
  const LaunchOptions& options = job.options;
  comm::Environment env = options.environment;
  const int world_size = options.nnodes * options.nproc_per_node;
  const int rank = options.node_rank * options.nproc_per_node + local_rank;
  env["RANK"] = std::to_string(rank);
  env["LOCAL_RANK"] = std::to_string(local_rank);
  env["WORLD_SIZE"] = std::to_string(world_size);
  env["LOCAL_WORLD_SIZE"] = std::to_string(options.nproc_per_node);
  env["GROUP_RANK"] = std::to_string(options.node_rank);
  env["GROUP_WORLD_SIZE"] = std::to_string(options.nnodes);
  env["ROLE_RANK"] = std::to_string(rank);
  env["ROLE_WORLD_SIZE"] = std::to_string(world_size);
  env["ROLE_NAME"] = "default";
  env["MASTER_ADDR"] = options.master_addr;
  env["MASTER_PORT"] = std::to_string(job.store->port());
  env["TORCHELASTIC_RESTART_COUNT"] = std::to_string(attempt);
  env["TORCHELASTIC_MAX_RESTARTS"] = std::to_string(options.max_restarts);
  env["TORCHELASTIC_RUN_ID"] = options.run_id;
  env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  env["DTRAIN_STORE"] = "dtrain";  // comm::RendezvousInfo::dtrain_store: our store, not torchrun's
  // The secret's path only, never the secret (comm/store/StoreSecret.h).
  if (!options.secret_file.empty()) env[comm::kSecretFileVariable] = options.secret_file;
  env["TORCHELASTIC_ERROR_FILE"] = error_file(job.log_dir, rank);
  env["OMP_NUM_THREADS"] = std::to_string(job.threads);
  if (options.elastic()) {
    env[kElasticVariable] = fmt::format("{}:{}", options.min_nnodes * options.nproc_per_node,
                                        options.nnodes * options.nproc_per_node);
    env[kElasticIdVariable] =
        fmt::format("{}-{}-{}-{}", this_host(), job.launcher_pid, local_rank, incarnation);
    env[kElasticLastCallVariable] = std::to_string(options.last_call.count());
  } else {
    for (const char* key : {kElasticVariable, kElasticIdVariable, kElasticLastCallVariable}) env.erase(key);
  }
  if (job.diagnostics.status_line()) {
    env[kStatusRelayVariable] = "1";
  } else {
    env.erase(kStatusRelayVariable);  // from an enclosing launcher, which does not see these lines
  }
  return env;
}

std::vector<std::string> mpirun_arguments(const Job& job, int attempt) {
  const LaunchOptions& options = job.options;
  const int nproc = options.nproc_per_node;
  std::vector<std::string> args{options.mpirun, "-n", std::to_string(nproc)};
  if (nproc > usable_cores()) args.push_back("--oversubscribe");
  args.push_back("--tag-output");
  // Which node runs each rank, for a failure report (MpiOutputDemux reads it and keeps it out of
  // the launcher's stderr).
  args.push_back("--display-map");
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"OMP_NUM_THREADS", std::to_string(job.threads)},
           {"TORCHELASTIC_RESTART_COUNT", std::to_string(attempt)},
           {"TORCHELASTIC_MAX_RESTARTS", std::to_string(options.max_restarts)},
           {"TORCHELASTIC_RUN_ID", options.run_id}}) {
    args.push_back("-x");
    args.push_back(key + "=" + value);
  }
  if (job.diagnostics.status_line()) {
    args.push_back("-x");
    args.push_back(std::string(kStatusRelayVariable) + "=1");
  }
  args.insert(args.end(), options.command.begin(), options.command.end());
  return args;
}

comm::Environment mpirun_environment(const Job& job) {
  comm::Environment env = job.options.environment;
  // A launcher started from inside another torchrun job must not hand its rendezvous to MPI
  // ranks, which take their ranks from OpenMPI's variables.
  for (const char* key : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
                          "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE",
                          "DTRAIN_STORE", "TORCHELASTIC_ERROR_FILE", kStatusRelayVariable}) {
    env.erase(key);
  }
  env["OMP_NUM_THREADS"] = std::to_string(job.threads);
  if (::geteuid() == 0) {
    env["OMPI_ALLOW_RUN_AS_ROOT"] = "1";
    env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1";
  }
  return env;
}

}  // namespace dtrain::launch
