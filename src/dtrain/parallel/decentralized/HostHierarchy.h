// HostHierarchy: the groups of hierarchical gossip (Note [Hierarchical gossip]). Consecutive runs of
// ranks_per_host ranks form a host; each host has a communicator of its own ranks (its all-reduce
// and broadcast) and its first rank, the leader, talks to the other hosts' leaders.
#pragma once

#include <memory>

#include "dtrain/comm/CommStats.h"
#include "dtrain/comm/Communicator.h"

namespace dtrain::parallel {

// The hosts `world` ranks form, ranks_per_host to a host. Throws std::invalid_argument when
// ranks_per_host (at least 1) does not divide the world.
int hosts_of(int world, int ranks_per_host);

class HostHierarchy {
 public:
  // Collective over `comm` (null: one rank, one host). Throws as hosts_of.
  HostHierarchy(comm::Communicator* comm, int ranks_per_host);

  int hosts() const { return hosts_; }
  int host() const { return host_; }  // this rank's host
  int ranks_per_host() const { return ranks_per_host_; }
  bool leader() const { return leader_; }
  // This host's ranks, numbered from its leader; null with one rank per host.
  comm::Communicator* host_comm() const { return host_comm_.get(); }
  // The leaders, numbered by host; null on other ranks and with one host.
  comm::Communicator* leader_comm() const { return leader_comm_.get(); }
  // What this rank sent and received over both communicators so far.
  comm::CommStats stats() const;

 private:
  int hosts_ = 1;
  int host_ = 0;
  int ranks_per_host_ = 1;
  bool leader_ = true;
  std::unique_ptr<comm::Communicator> host_comm_, leader_comm_;
};

}  // namespace dtrain::parallel
