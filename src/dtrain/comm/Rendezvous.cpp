// resolve_rendezvous(): explicit options > torchrun > OpenMPI > Slurm > one process, field by
// field, with every malformed value reported by the variable or option it came from.
#include "dtrain/comm/Rendezvous.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <vector>

namespace dtrain::comm {

namespace {

// A value and where it came from ("RANK", "options.rank"), for error messages.
template <typename T>
struct Sourced {
  std::optional<T> value;
  std::string origin;

  void offer(const std::optional<T>& v, const std::string& from) {
    if (!value && v) {
      value = v;
      origin = from;
    }
  }
};

const std::string* find(const Environment& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() ? nullptr : &it->second;
}

int parse_int(const std::string& text, const std::string& origin) {
  errno = 0;
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno == ERANGE || value < std::numeric_limits<int>::min() ||
      value > std::numeric_limits<int>::max() || text.find_first_of(" \t") != std::string::npos) {
    throw std::invalid_argument(
        fmt::format("{}='{}' is not an integer; set it to a whole number", origin, text));
  }
  return static_cast<int>(value);
}

std::optional<int> env_int(const Environment& env, const std::string& name) {
  const std::string* text = find(env, name);
  if (!text) return std::nullopt;
  return parse_int(*text, name);
}

std::optional<std::string> env_string(const Environment& env, const std::string& name) {
  const std::string* text = find(env, name);
  if (!text || text->empty()) return std::nullopt;
  return *text;
}

struct Address {
  std::string host;
  int port = 0;
};

// "tcp://HOST:PORT" or "tcp://[IPv6]:PORT".
Address parse_tcp_url(const std::string& url) {
  const std::string scheme = "tcp://";
  auto bad = [&](const std::string& why) {
    return std::invalid_argument(fmt::format(
        "dist_url='{}' {}; expected tcp://HOST:PORT (e.g. tcp://10.0.0.1:29500) or env://", url, why));
  };
  if (url.rfind(scheme, 0) != 0) throw bad("has an unsupported scheme");
  std::string rest = url.substr(scheme.size());
  if (!rest.empty() && rest.back() == '/') rest.pop_back();
  std::string host;
  std::string port;
  if (!rest.empty() && rest.front() == '[') {
    const auto close = rest.find(']');
    if (close == std::string::npos || close + 1 >= rest.size() || rest[close + 1] != ':') {
      throw bad("has a malformed IPv6 address");
    }
    host = rest.substr(1, close - 1);
    port = rest.substr(close + 2);
  } else {
    const auto colon = rest.rfind(':');
    if (colon == std::string::npos) throw bad("has no port");
    host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  if (host.empty()) throw bad("has no host");
  if (host.find_first_of("/?#@ ") != std::string::npos) throw bad("has a malformed host");
  return Address{host, parse_int(port, "dist_url port")};
}

// Slurm's compressed tasks-per-node list, "2(x3),1" = 2,2,2,1; the entry for node `node`.
std::optional<int> slurm_tasks_on_node(const std::string& list, int node, const std::string& origin) {
  std::vector<int> counts;
  std::size_t start = 0;
  while (start <= list.size()) {
    const auto comma = list.find(',', start);
    const std::string item =
        list.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    const auto paren = item.find("(x");
    if (paren == std::string::npos) {
      counts.push_back(parse_int(item, origin));
    } else {
      if (item.back() != ')') {
        throw std::invalid_argument(fmt::format("{}='{}' is malformed; expected e.g. 2(x3),1", origin, list));
      }
      const int count = parse_int(item.substr(0, paren), origin);
      const int repeat = parse_int(item.substr(paren + 2, item.size() - paren - 3), origin);
      for (int i = 0; i < repeat; ++i) counts.push_back(count);
    }
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  if (node < 0 || node >= static_cast<int>(counts.size())) return std::nullopt;
  return counts[node];
}

bool truthy(const std::string& text) {
  return text == "True" || text == "true" || text == "1";
}

}  // namespace

RendezvousInfo resolve_rendezvous(const RendezvousOptions& options, const Environment& env) {
  Sourced<int> rank, world_size, local_rank, local_world_size, port;
  Sourced<std::string> addr;
  RendezvousInfo info;
  info.timeout = options.timeout;

  // 1. Explicit options, then seed 000's --dist-url.
  rank.offer(options.rank, "options.rank");
  world_size.offer(options.world_size, "options.world_size");
  local_rank.offer(options.local_rank, "options.local_rank");
  local_world_size.offer(options.local_world_size, "options.local_world_size");
  addr.offer(options.master_addr, "options.master_addr");
  port.offer(options.master_port, "options.master_port");
  if (!options.dist_url.empty() && options.dist_url != "env://") {
    const Address url = parse_tcp_url(options.dist_url);
    if (addr.value && *addr.value != url.host) {
      throw std::invalid_argument(
          fmt::format("dist_url='{}' names host {} but master_addr is {}; give only one of them",
                      options.dist_url, url.host, *addr.value));
    }
    if (port.value && *port.value != url.port) {
      throw std::invalid_argument(
          fmt::format("dist_url='{}' names port {} but master_port is {}; give only one of them",
                      options.dist_url, url.port, *port.value));
    }
    addr.offer(url.host, "dist_url");
    port.offer(url.port, "dist_url");
  }
  if (rank.value || world_size.value) info.source = "options";

  // 2. torchrun (and dtrain launch, which sets the same variables).
  const bool has_rank = find(env, "RANK") != nullptr;
  const bool has_world = find(env, "WORLD_SIZE") != nullptr;
  if (has_rank != has_world) {
    throw std::invalid_argument(
        fmt::format("{} is set but {} is not; set both (torchrun and dtrain launch do)",
                    has_rank ? "RANK" : "WORLD_SIZE", has_rank ? "WORLD_SIZE" : "RANK"));
  }
  const bool torchrun = has_rank && has_world;
  const bool openmpi = !torchrun && find(env, "OMPI_COMM_WORLD_RANK") != nullptr;
  const bool slurm = !torchrun && !openmpi && find(env, "SLURM_PROCID") != nullptr;
  if (torchrun) {
    rank.offer(env_int(env, "RANK"), "RANK");
    world_size.offer(env_int(env, "WORLD_SIZE"), "WORLD_SIZE");
    local_rank.offer(env_int(env, "LOCAL_RANK"), "LOCAL_RANK");
    local_world_size.offer(env_int(env, "LOCAL_WORLD_SIZE"), "LOCAL_WORLD_SIZE");
    if (const std::string* use_agent = find(env, "TORCHELASTIC_USE_AGENT_STORE");
        use_agent && truthy(*use_agent)) {
      info.agent_store = true;
      info.restart_count = env_int(env, "TORCHELASTIC_RESTART_COUNT").value_or(0);
      if (info.restart_count < 0) {
        throw std::invalid_argument(
            fmt::format("TORCHELASTIC_RESTART_COUNT={} is negative", info.restart_count));
      }
      // torchrun's workers prefix the agent's store the same way (torch/distributed/elastic).
      info.store_prefix = fmt::format("/worker/attempt_{}", info.restart_count);
    }
    if (info.source == "default") info.source = "torchrun";
  } else if (openmpi) {
    rank.offer(env_int(env, "OMPI_COMM_WORLD_RANK"), "OMPI_COMM_WORLD_RANK");
    world_size.offer(env_int(env, "OMPI_COMM_WORLD_SIZE"), "OMPI_COMM_WORLD_SIZE");
    local_rank.offer(env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK"), "OMPI_COMM_WORLD_LOCAL_RANK");
    local_world_size.offer(env_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE"), "OMPI_COMM_WORLD_LOCAL_SIZE");
    if (info.source == "default") info.source = "openmpi";
  } else if (slurm) {
    rank.offer(env_int(env, "SLURM_PROCID"), "SLURM_PROCID");
    world_size.offer(env_int(env, "SLURM_NTASKS"), "SLURM_NTASKS");
    local_rank.offer(env_int(env, "SLURM_LOCALID"), "SLURM_LOCALID");
    for (const char* name : {"SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
      if (const std::string* list = find(env, name)) {
        const int node = env_int(env, "SLURM_NODEID").value_or(0);
        local_world_size.offer(slurm_tasks_on_node(*list, node, name), name);
        break;
      }
    }
    if (info.source == "default") info.source = "slurm";
  }
  // MASTER_ADDR/MASTER_PORT complete any of the sources above.
  addr.offer(env_string(env, "MASTER_ADDR"), "MASTER_ADDR");
  port.offer(env_int(env, "MASTER_PORT"), "MASTER_PORT");
  if (slurm) addr.offer(env_string(env, "SLURM_LAUNCH_NODE_IPADDR"), "SLURM_LAUNCH_NODE_IPADDR");

  // 3. Defaults: one process; without a local layout, all ranks on this host.
  info.world_size = world_size.value.value_or(1);
  info.rank = rank.value.value_or(0);
  if (world_size.value && info.world_size < 1) {
    throw std::invalid_argument(fmt::format("{}={} is not a valid world size; it must be at least 1",
                                            world_size.origin, info.world_size));
  }
  if (rank.value && (info.rank < 0 || info.rank >= info.world_size)) {
    throw std::invalid_argument(fmt::format(
        "{}={} is outside [0, {}) given by {}; ranks count from 0 to world size - 1", rank.origin, info.rank,
        info.world_size, world_size.value ? world_size.origin : "the default world size"));
  }
  if (!rank.value && world_size.value && info.world_size > 1) {
    throw std::invalid_argument(fmt::format("{}={} but no rank is given; set RANK or options.rank as well",
                                            world_size.origin, info.world_size));
  }
  info.local_world_size = local_world_size.value.value_or(info.world_size);
  info.local_rank =
      local_rank.value.value_or(local_world_size.value ? info.rank % info.local_world_size : info.rank);
  if (local_world_size.value && (info.local_world_size < 1 || info.local_world_size > info.world_size)) {
    throw std::invalid_argument(fmt::format("{}={} is outside [1, {}] (the world size)",
                                            local_world_size.origin, info.local_world_size, info.world_size));
  }
  if (info.local_rank < 0 || info.local_rank >= info.local_world_size) {
    throw std::invalid_argument(fmt::format("{}={} is outside [0, {}) (the local world size)",
                                            local_rank.value ? local_rank.origin : "local rank",
                                            info.local_rank, info.local_world_size));
  }
  if (addr.value) info.master_addr = *addr.value;
  if (port.value) {
    // Port 0 ("any free port") cannot be shared with other ranks; it only makes sense alone.
    const int lowest = info.world_size == 1 ? 0 : 1;
    if (*port.value < lowest || *port.value > 65535) {
      throw std::invalid_argument(
          fmt::format("{}={} is not a TCP port; expected {}..65535", port.origin, *port.value, lowest));
    }
    info.master_port = *port.value;
  }
  return info;
}

}  // namespace dtrain::comm
