// NodeStore over comm's StoreServer and StoreClient: a failure is one key per attempt,
// "<rank> <exit code>", set only by the first node to fail; a node's share of its host is one key
// per node, "<workers> <cores>".
#include "dtrain/launch/NodeStore.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <vector>

#include "dtrain/comm/store/StoreSecret.h"

namespace dtrain::launch {
namespace {

std::string failure_key(int attempt) {
  return fmt::format("/dtrain_launch/attempt_{}/failure", attempt);
}

std::string done_key(int attempt, int node_rank) {
  return fmt::format("/dtrain_launch/attempt_{}/done_{}", attempt, node_rank);
}

std::string share_key(int node_rank) {
  return fmt::format("/dtrain_launch/share_{}", node_rank);
}

}  // namespace

NodeStore::NodeStore(const LaunchOptions& options) {
  const bool host = options.node_rank == 0;
  const std::string secret = options.secret_file.empty()
                                 ? std::string()
                                 : comm::read_secret_file(options.secret_file, "--secret-file");
  try {
    if (host) {
      // Every node's launcher and every worker (elastic workers hold a connection each) may connect.
      const int members = options.nnodes * (options.nproc_per_node + 1);
      server_ = std::make_unique<comm::StoreServer>(options.master_addr, options.master_port,
                                                    options.rendezvous_timeout, secret, members);
    }
    port_ = host ? server_->port() : options.master_port;
    if (options.nnodes > 1) {
      client_ =
          std::make_unique<comm::StoreClient>(options.master_addr, port_, options.rendezvous_timeout, secret);
    }
  } catch (const std::exception& e) {
    throw std::runtime_error(fmt::format(
        "dtrain launch: cannot {} the rendezvous store at {}:{}: {}; {}", host ? "host" : "reach",
        options.master_addr, options.master_port, e.what(),
        host ? "choose a free --master-port"
             : "start node 0 first, check --master-addr, and give every node the same --secret-file"));
  }
}

void NodeStore::announce_failure(int attempt, NodeFailure failure) {
  client_->set_if_absent(failure_key(attempt), fmt::format("{} {}", failure.rank, failure.exit_code));
}

std::optional<NodeFailure> NodeStore::failure(int attempt) {
  try {
    if (!client_->check({failure_key(attempt)})) return std::nullopt;
    NodeFailure failure;
    std::sscanf(client_->get(failure_key(attempt)).c_str(), "%d %d", &failure.rank, &failure.exit_code);
    return failure;
  } catch (const std::exception&) {
    // Node 0's launcher is gone: its workers, and so this job, are gone with it.
    return NodeFailure{};
  }
}

void NodeStore::announce_done(int attempt, int node_rank) {
  client_->set(done_key(attempt, node_rank), "1");
}

bool NodeStore::all_done(int attempt, int nnodes) {
  std::vector<std::string> keys;
  for (int node = 0; node < nnodes; ++node) keys.push_back(done_key(attempt, node));
  return client_->check(keys);
}

void NodeStore::register_share(int node_rank, const HostShare& share) {
  client_->set(share_key(node_rank), fmt::format("{} {}", share.workers, share.cores));
}

std::optional<HostShare> NodeStore::share_of(int node_rank) {
  if (!client_->check({share_key(node_rank)})) return std::nullopt;
  const std::string value = client_->get(share_key(node_rank));
  const auto space = value.find(' ');
  HostShare share;
  share.workers = std::atoi(value.substr(0, space).c_str());
  share.cores = space == std::string::npos ? std::string() : value.substr(space + 1);
  return share;
}

}  // namespace dtrain::launch
