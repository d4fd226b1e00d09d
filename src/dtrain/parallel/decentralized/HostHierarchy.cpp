// HostHierarchy's communicators; see HostHierarchy.h.
#include "dtrain/parallel/decentralized/HostHierarchy.h"

#include <fmt/format.h>

#include <stdexcept>
#include <vector>

namespace dtrain::parallel {

int hosts_of(int world, int ranks_per_host) {
  if (ranks_per_host < 1 || world % ranks_per_host != 0) {
    throw std::invalid_argument(fmt::format(
        "parallel.decentralized.ranks_per_host: {} ranks per host do not divide the {} ranks of the job into "
        "hosts; set a divisor of {}",
        ranks_per_host, world, world));
  }
  return world / ranks_per_host;
}

HostHierarchy::HostHierarchy(comm::Communicator* comm, int ranks_per_host) : ranks_per_host_(ranks_per_host) {
  const int world = comm ? comm->size() : 1;
  const int rank = comm ? comm->rank() : 0;
  hosts_ = hosts_of(world, ranks_per_host);
  host_ = rank / ranks_per_host;
  leader_ = rank % ranks_per_host == 0;
  if (!comm) return;
  // Every rank takes part in every split, in the same order (Communicator::split is collective).
  if (ranks_per_host > 1) {
    for (int h = 0; h < hosts_; ++h) {
      std::vector<int> ranks;
      for (int r = 0; r < ranks_per_host; ++r) ranks.push_back(h * ranks_per_host + r);
      auto sub = comm->split(ranks);
      if (sub) host_comm_ = std::move(sub);
    }
  }
  if (hosts_ > 1) {
    std::vector<int> leaders;
    for (int h = 0; h < hosts_; ++h) leaders.push_back(h * ranks_per_host);
    leader_comm_ = comm->split(leaders);
  }
}

comm::CommStats HostHierarchy::stats() const {
  comm::CommStats total;
  if (host_comm_) total += host_comm_->stats();
  if (leader_comm_) total += leader_comm_->stats();
  return total;
}

}  // namespace dtrain::parallel
