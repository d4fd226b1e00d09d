// The launchers' own use of the rendezvous store. Node 0 hosts it for every worker, as torchrun's
// agent does; in a job of several nodes each launcher also joins it, so that a node whose worker
// failed tells the others, which stop theirs at once instead of waiting for a collective to time
// out. Keys of the launchers are apart from the workers' "/worker/attempt_<n>" prefix.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "dtrain/comm/store/StoreClient.h"
#include "dtrain/comm/store/StoreServer.h"
#include "dtrain/launch/Launcher.h"

namespace dtrain::launch {

// A worker that failed on some node: its global rank (-1 when unknown) and exit code.
struct NodeFailure {
  int rank = -1;
  int exit_code = 1;
};

// One launcher's registration, see Note [Launchers that share a host]: the cores its workers run
// on (shared_cores_id() in WorkerEnvironment.h) and how many workers it starts on them.
struct HostShare {
  std::string cores;
  int workers = 0;
};

class NodeStore {
 public:
  // Hosts the store on node 0 and joins it on every node of a multi-node job. Throws
  // std::runtime_error saying how to fix it when the port is taken or node 0 cannot be reached.
  explicit NodeStore(const LaunchOptions& options);

  // The store's port, which workers are told (a free one when master_port was 0).
  int port() const { return port_; }

  // Whether other nodes share it: failures are told and heard through it.
  bool shared() const { return client_ != nullptr; }

  // Tells the other nodes that `rank` failed in `attempt`; the first failure announced stays.
  // Throws std::runtime_error when the store cannot be reached.
  void announce_failure(int attempt, NodeFailure failure);

  // A failure announced by any node in `attempt`. When the store is gone, so is node 0's launcher
  // and with it the job: that is a failure of an unknown rank.
  std::optional<NodeFailure> failure(int attempt);

  // The exit barrier, see Note [Exit barrier]: this node's workers of `attempt` all succeeded;
  // and whether every one of `nnodes` nodes has said so. Throw std::runtime_error when the store
  // cannot be reached.
  void announce_done(int attempt, int node_rank);
  bool all_done(int attempt, int nnodes);

  // Note [Launchers that share a host]: node `node_rank`'s share of its host, said once before its
  // workers start; and a node's share, or nullopt while it has said none. Throw std::runtime_error
  // when the store cannot be reached.
  void register_share(int node_rank, const HostShare& share);
  std::optional<HostShare> share_of(int node_rank);

 private:
  std::unique_ptr<comm::StoreServer> server_;
  std::unique_ptr<comm::StoreClient> client_;
  int port_ = 0;
};

}  // namespace dtrain::launch
