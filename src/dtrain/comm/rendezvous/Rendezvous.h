// Rendezvous: who am I, how many are we, and where do we meet. Resolved from, in this order,
// explicit options (CLI, the dAD paper's --dist-url tcp://HOST:PORT), torchrun's environment (with its
// agent-hosted store), OpenMPI's and Slurm's. comm never reads the process environment itself:
// callers pass it in (config::process_environment()).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

#include "dtrain/util/EnumNames.h"

namespace dtrain::comm {

using Environment = std::map<std::string, std::string>;

// Where a worker's rank and world size come from: explicit options, the launcher that started it,
// or nowhere (one process).
enum class RendezvousSource { Default, Options, Torchrun, OpenMpi, Slurm };
inline constexpr util::EnumNames<RendezvousSource, 5> kRendezvousSourceNames{{{
    {RendezvousSource::Default, "default"},
    {RendezvousSource::Options, "options"},
    {RendezvousSource::Torchrun, "torchrun"},
    {RendezvousSource::OpenMpi, "openmpi"},
    {RendezvousSource::Slurm, "slurm"},
}}};

struct RendezvousOptions {
  std::optional<int> rank;
  std::optional<int> world_size;
  std::optional<int> local_rank;
  std::optional<int> local_world_size;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  std::string dist_url;  // "tcp://HOST:PORT", the dAD paper's form; "env://" means "from the environment"
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

struct RendezvousInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // torchrun (TORCHELASTIC_USE_AGENT_STORE=True) or `dtrain launch` already host the TCPStore:
  // every worker connects as a client and prefixes keys with store_prefix.
  bool agent_store = false;
  // Whether the store is dtrain's (comm/store/StoreServer: hosted by rank 0 or `dtrain launch`, which
  // sets DTRAIN_STORE=dtrain) rather than torchrun's c10d TCPStore, which takes no secret.
  bool dtrain_store = true;
  // A file holding the store's shared secret (DTRAIN_SECRET_FILE), see comm/store/StoreSecret.h; "" = none.
  std::string secret_file;
  std::string store_prefix;
  int restart_count = 0;
  std::string source = "default";  // kRendezvousSourceNames: "options", "torchrun", "openmpi", ...
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// Which launcher started this process, told by the variables it sets, in the order that
// resolve_rendezvous prefers them: Torchrun (RANK: torchrun or dtrain launch), OpenMpi
// (OMPI_COMM_WORLD_RANK: mpirun), Slurm (SLURM_PROCID in a step of more than one task: srun);
// else Default. A Slurm step of one task (a shell from `srun --pty bash`) is one process that a
// user may start a job from, not a worker of a job. The one place that tells launchers apart:
// resolve_rendezvous reads the variables of the source it names, and `dtrain train` starts
// workers of its own only where it says Default.
RendezvousSource launcher_of(const Environment& env);

// Throws std::invalid_argument naming the variable or option that is malformed or inconsistent.
RendezvousInfo resolve_rendezvous(const RendezvousOptions& options, const Environment& env);

}  // namespace dtrain::comm
