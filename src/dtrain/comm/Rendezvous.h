// Rendezvous: who am I, how many are we, and where do we meet. Resolved from, in this order,
// explicit options (CLI, seed 000's --dist-url tcp://HOST:PORT), torchrun's environment (with its
// agent-hosted store), OpenMPI's and Slurm's. comm never reads the process environment itself:
// callers pass it in (config::process_environment()).
#pragma once

#include <chrono>
#include <map>
#include <optional>
#include <string>

namespace dtrain::comm {

using Environment = std::map<std::string, std::string>;

struct RendezvousOptions {
  std::optional<int> rank;
  std::optional<int> world_size;
  std::optional<int> local_rank;
  std::optional<int> local_world_size;
  std::optional<std::string> master_addr;
  std::optional<int> master_port;
  std::string dist_url;  // "tcp://HOST:PORT", seed 000's form; "env://" means "from the environment"
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
  std::string store_prefix;
  int restart_count = 0;
  std::string source = "default";  // "options", "torchrun", "openmpi", "slurm", "default"
  std::chrono::milliseconds timeout{std::chrono::minutes(5)};
};

// Throws std::invalid_argument naming the variable or option that is malformed or inconsistent.
RendezvousInfo resolve_rendezvous(const RendezvousOptions& options, const Environment& env);

}  // namespace dtrain::comm
