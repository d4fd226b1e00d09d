// resolve_rendezvous(): explicit options > torchrun > OpenMPI > Slurm > one process, field by
// field, with every malformed value reported by the variable or option it came from; and
// launcher_of(), which of the launchers' environments is there to read.
#include "dtrain/comm/rendezvous/Rendezvous.h"

#include <fmt/format.h>

#include <cerrno>
#include <cstdlib>
#include <limits>
#include <stdexcept>
#include <vector>

#include "dtrain/comm/store/StoreSecret.h"

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

// The fields of RendezvousInfo as the sources offer them, each with where it came from. The first
// source to offer a field wins it, so the sources are read from the strongest to the weakest.
struct Offers {
  Sourced<int> rank, world_size, local_rank, local_world_size, port;
  Sourced<std::string> addr;
};

// 1. Explicit options, then the dAD paper's --dist-url.
void offer_options(const RendezvousOptions& options, Offers& o) {
  o.rank.offer(options.rank, "options.rank");
  o.world_size.offer(options.world_size, "options.world_size");
  o.local_rank.offer(options.local_rank, "options.local_rank");
  o.local_world_size.offer(options.local_world_size, "options.local_world_size");
  o.addr.offer(options.master_addr, "options.master_addr");
  o.port.offer(options.master_port, "options.master_port");
  if (options.dist_url.empty() || options.dist_url == "env://") return;
  const Address url = parse_tcp_url(options.dist_url);
  if (o.addr.value && *o.addr.value != url.host) {
    throw std::invalid_argument(
        fmt::format("dist_url='{}' names host {} but master_addr is {}; give only one of them",
                    options.dist_url, url.host, *o.addr.value));
  }
  if (o.port.value && *o.port.value != url.port) {
    throw std::invalid_argument(
        fmt::format("dist_url='{}' names port {} but master_port is {}; give only one of them",
                    options.dist_url, url.port, *o.port.value));
  }
  o.addr.offer(url.host, "dist_url");
  o.port.offer(url.port, "dist_url");
}

// 2a. torchrun and dtrain launch, which sets the same variables; with the agent's store, the
// attempt's key prefix.
void offer_torchrun(const Environment& env, Offers& o, RendezvousInfo& info) {
  o.rank.offer(env_int(env, "RANK"), "RANK");
  o.world_size.offer(env_int(env, "WORLD_SIZE"), "WORLD_SIZE");
  o.local_rank.offer(env_int(env, "LOCAL_RANK"), "LOCAL_RANK");
  o.local_world_size.offer(env_int(env, "LOCAL_WORLD_SIZE"), "LOCAL_WORLD_SIZE");
  const std::string* use_agent = find(env, "TORCHELASTIC_USE_AGENT_STORE");
  if (!use_agent || !truthy(*use_agent)) return;
  info.agent_store = true;
  // dtrain launch's store is dtrain's own (comm/store/StoreServer); torchrun's is c10d's TCPStore.
  const std::string* store = find(env, "DTRAIN_STORE");
  info.dtrain_store = store && *store == "dtrain";
  info.restart_count = env_int(env, "TORCHELASTIC_RESTART_COUNT").value_or(0);
  if (info.restart_count < 0) {
    throw std::invalid_argument(fmt::format("TORCHELASTIC_RESTART_COUNT={} is negative", info.restart_count));
  }
  // torchrun's workers prefix the agent's store the same way (torch/distributed/elastic).
  info.store_prefix = fmt::format("/worker/attempt_{}", info.restart_count);
}

// 2b. mpirun.
void offer_openmpi(const Environment& env, Offers& o) {
  o.rank.offer(env_int(env, "OMPI_COMM_WORLD_RANK"), "OMPI_COMM_WORLD_RANK");
  o.world_size.offer(env_int(env, "OMPI_COMM_WORLD_SIZE"), "OMPI_COMM_WORLD_SIZE");
  o.local_rank.offer(env_int(env, "OMPI_COMM_WORLD_LOCAL_RANK"), "OMPI_COMM_WORLD_LOCAL_RANK");
  o.local_world_size.offer(env_int(env, "OMPI_COMM_WORLD_LOCAL_SIZE"), "OMPI_COMM_WORLD_LOCAL_SIZE");
}

// 2c. srun.
void offer_slurm(const Environment& env, Offers& o) {
  o.rank.offer(env_int(env, "SLURM_PROCID"), "SLURM_PROCID");
  o.world_size.offer(env_int(env, "SLURM_NTASKS"), "SLURM_NTASKS");
  o.local_rank.offer(env_int(env, "SLURM_LOCALID"), "SLURM_LOCALID");
  for (const char* name : {"SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    if (const std::string* list = find(env, name)) {
      const int node = env_int(env, "SLURM_NODEID").value_or(0);
      o.local_world_size.offer(slurm_tasks_on_node(*list, node, name), name);
      break;
    }
  }
}

// 3a. Defaults: one process. Checks the world size and the rank in it.
void settle_world(const Offers& o, RendezvousInfo& info) {
  info.world_size = o.world_size.value.value_or(1);
  info.rank = o.rank.value.value_or(0);
  if (o.world_size.value && info.world_size < 1) {
    throw std::invalid_argument(fmt::format("{}={} is not a valid world size; it must be at least 1",
                                            o.world_size.origin, info.world_size));
  }
  if (o.rank.value && (info.rank < 0 || info.rank >= info.world_size)) {
    throw std::invalid_argument(fmt::format(
        "{}={} is outside [0, {}) given by {}; ranks count from 0 to world size - 1", o.rank.origin,
        info.rank, info.world_size, o.world_size.value ? o.world_size.origin : "the default world size"));
  }
  if (!o.rank.value && o.world_size.value && info.world_size > 1) {
    throw std::invalid_argument(fmt::format("{}={} but no rank is given; set RANK or options.rank as well",
                                            o.world_size.origin, info.world_size));
  }
}

// 3b. Without a local layout, all ranks on this host.
void settle_local(const Offers& o, RendezvousInfo& info) {
  info.local_world_size = o.local_world_size.value.value_or(info.world_size);
  info.local_rank =
      o.local_rank.value.value_or(o.local_world_size.value ? info.rank % info.local_world_size : info.rank);
  if (o.local_world_size.value && (info.local_world_size < 1 || info.local_world_size > info.world_size)) {
    throw std::invalid_argument(fmt::format("{}={} is outside [1, {}] (the world size)",
                                            o.local_world_size.origin, info.local_world_size,
                                            info.world_size));
  }
  if (info.local_rank < 0 || info.local_rank >= info.local_world_size) {
    throw std::invalid_argument(fmt::format("{}={} is outside [0, {}) (the local world size)",
                                            o.local_rank.value ? o.local_rank.origin : "local rank",
                                            info.local_rank, info.local_world_size));
  }
}

// 3c. Where to meet.
void settle_address(const Offers& o, RendezvousInfo& info) {
  if (o.addr.value) info.master_addr = *o.addr.value;
  if (!o.port.value) return;
  // Port 0 ("any free port") cannot be shared with other ranks; it only makes sense alone.
  const int lowest = info.world_size == 1 ? 0 : 1;
  if (*o.port.value < lowest || *o.port.value > 65535) {
    throw std::invalid_argument(
        fmt::format("{}={} is not a TCP port; expected {}..65535", o.port.origin, *o.port.value, lowest));
  }
  info.master_port = *o.port.value;
}

// RANK without WORLD_SIZE, or the reverse, is a mistake whichever source wins.
void require_rank_with_world_size(const Environment& env) {
  const bool has_rank = find(env, "RANK") != nullptr;
  const bool has_world = find(env, "WORLD_SIZE") != nullptr;
  if (has_rank != has_world) {
    throw std::invalid_argument(
        fmt::format("{} is set but {} is not; set both (torchrun and dtrain launch do)",
                    has_rank ? "RANK" : "WORLD_SIZE", has_rank ? "WORLD_SIZE" : "RANK"));
  }
}

}  // namespace

RendezvousSource launcher_of(const Environment& env) {
  if (find(env, "RANK")) return RendezvousSource::Torchrun;
  if (find(env, "OMPI_COMM_WORLD_RANK")) return RendezvousSource::OpenMpi;
  const std::string* tasks = find(env, "SLURM_NTASKS");
  if (find(env, "SLURM_PROCID") && tasks && *tasks != "1") return RendezvousSource::Slurm;
  return RendezvousSource::Default;
}

RendezvousInfo resolve_rendezvous(const RendezvousOptions& options, const Environment& env) {
  RendezvousInfo info;
  info.timeout = options.timeout;
  Offers offers;
  offer_options(options, offers);
  require_rank_with_world_size(env);
  const RendezvousSource launcher = launcher_of(env);
  switch (launcher) {
    case RendezvousSource::Torchrun:
      offer_torchrun(env, offers, info);
      break;
    case RendezvousSource::OpenMpi:
      offer_openmpi(env, offers);
      break;
    case RendezvousSource::Slurm:
      offer_slurm(env, offers);
      break;
    case RendezvousSource::Default:
    case RendezvousSource::Options:
      break;
  }
  // MASTER_ADDR/MASTER_PORT complete any of the sources above.
  offers.addr.offer(env_string(env, "MASTER_ADDR"), "MASTER_ADDR");
  offers.port.offer(env_int(env, "MASTER_PORT"), "MASTER_PORT");
  if (launcher == RendezvousSource::Slurm) {
    offers.addr.offer(env_string(env, "SLURM_LAUNCH_NODE_IPADDR"), "SLURM_LAUNCH_NODE_IPADDR");
  }
  const bool explicit_options = options.rank || options.world_size;
  info.source = kRendezvousSourceNames.name(explicit_options ? RendezvousSource::Options : launcher);

  settle_world(offers, info);
  settle_local(offers, info);
  settle_address(offers, info);
  if (const std::string* secret_file = find(env, kSecretFileVariable)) info.secret_file = *secret_file;
  return info;
}

}  // namespace dtrain::comm
