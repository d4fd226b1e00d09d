// The store side of connecting: open or host the store (comm/store/StoreServer, or torchrun's
// TCPStore), then a join barrier through keys "joined/<rank>" so that a timeout can say which ranks
// are missing.
#include "dtrain/comm/c10d/StoreRendezvous.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <thread>
#include <vector>

#include "dtrain/comm/Work.h"
#include "dtrain/comm/rendezvous/HostName.h"
#include "dtrain/comm/store/StoreConnection.h"
#include "dtrain/comm/store/StoreSecret.h"
#include "dtrain/comm/store/StoreServer.h"

namespace dtrain::comm {

namespace {

using Clock = std::chrono::steady_clock;

std::string error_text(const std::exception& e) {
  // c10::Error::what() carries a C++ backtrace that says nothing to a user.
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e)) return c10_error->what_without_backtrace();
  return e.what();
}

// The store that dtrain hosts (StoreServer: rank 0's own, or `dtrain launch`'s) takes a
// StoreConnection; torchrun's store is c10d's TCPStore and takes c10d's client.
compat::StorePtr connect_store(const RendezvousInfo& r, const std::string& secret) {
  const bool host = !r.agent_store && r.rank == 0;
  if (!r.dtrain_store) {
    ::c10d::TCPStoreOptions options;
    options.port = static_cast<std::uint16_t>(r.master_port);
    options.isServer = false;
    // Joining is checked below with per-rank keys, which can name the ranks that are missing;
    // TCPStore's own worker count can only say "timed out".
    options.numWorkers = c10::nullopt;
    options.waitWorkers = false;
    options.timeout = r.timeout;
    return c10::make_intrusive<::c10d::TCPStore>(r.master_addr, options);
  }
  std::shared_ptr<StoreServer> server;
  if (host) server = std::make_shared<StoreServer>(r.master_addr, r.master_port, r.timeout, secret);
  return c10::make_intrusive<StoreConnection>(r.master_addr, host ? server->port() : r.master_port, r.timeout,
                                              secret, server);
}

compat::StorePtr open_store(const RendezvousInfo& r, const std::string& backend) {
  const bool host = !r.agent_store && r.rank == 0;
  try {
    if (!r.dtrain_store && !r.secret_file.empty()) {
      throw std::invalid_argument(fmt::format(
          "{} names a secret, but torchrun's store (c10d's TCPStore) takes none; start the job with "
          "`dtrain launch --secret-file` instead",
          kSecretFileVariable));
    }
    const std::string secret =
        r.secret_file.empty() ? std::string() : read_secret_file(r.secret_file, kSecretFileVariable);
    return connect_store(r, secret);
  } catch (const StoreRefused& e) {
    throw CommError(r.rank, r.world_size, "rendezvous (" + backend + ")", e.what());
  } catch (const std::invalid_argument& e) {
    throw CommError(r.rank, r.world_size, "rendezvous (" + backend + ")", e.what());
  } catch (const std::exception& e) {
    const std::string how = host ? fmt::format(
                                       "could not host the store at {}:{} ({}); pick a free port with "
                                       "--master-port or MASTER_PORT",
                                       r.master_addr, r.master_port, error_text(e))
                                 : fmt::format(
                                       "could not join the store at {}:{} within {} ms ({}); the store is "
                                       "hosted by {}: check that "
                                       "it runs and that MASTER_ADDR/MASTER_PORT point at it",
                                       r.master_addr, r.master_port, r.timeout.count(), error_text(e),
                                       r.agent_store ? "the launcher (torchrun or dtrain launch)" : "rank 0");
    throw CommError(r.rank, r.world_size, "rendezvous (" + backend + ")", how);
  }
}

std::string joined_key(int rank) {
  return fmt::format("joined/{}", rank);
}

}  // namespace

compat::StorePtr join_store(const RendezvousInfo& r, const std::string& backend) {
  if (const auto why = unresolvable_host(r.master_addr); !why.empty()) {
    throw CommError(
        r.rank, r.world_size, "rendezvous (" + backend + ")",
        fmt::format("cannot resolve the rendezvous host '{}' ({}); set MASTER_ADDR, --master-addr "
                    "or --dist-url to a name or address this machine resolves",
                    r.master_addr, why));
  }
  compat::StorePtr store = open_store(r, backend);
  if (!r.store_prefix.empty()) store = c10::make_intrusive<::c10d::PrefixStore>(r.store_prefix, store);

  std::vector<std::string> keys;
  for (int j = 0; j < r.world_size; ++j) keys.push_back(joined_key(j));
  std::vector<int> missing;
  try {
    // Every rank connects to a given store the same number of times, so the count of this rank's
    // earlier connects names the same fresh namespace on all ranks.
    const auto generation = store->add(fmt::format("dtrain/connects/{}", r.rank), 1);
    store = c10::make_intrusive<::c10d::PrefixStore>(fmt::format("dtrain/{}", generation), store);
    store->set(joined_key(r.rank), std::vector<std::uint8_t>{1});
    // Polling check() rather than a timed wait(): a TCPStore client whose wait() timed out may
    // read the late answer to it as the reply to its next request.
    const auto deadline = Clock::now() + r.timeout;
    auto pause = std::chrono::microseconds(200);
    while (!store->check(keys)) {
      if (Clock::now() >= deadline) {
        for (int j = 0; j < r.world_size; ++j) {
          if (!store->check({keys[j]})) missing.push_back(j);
        }
        break;
      }
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(20000));
    }
  } catch (const CommError&) {
    throw;
  } catch (const std::exception& e) {
    throw CommError(
        r.rank, r.world_size, "rendezvous (" + backend + ")",
        fmt::format("the store at {}:{} failed: {}", r.master_addr, r.master_port, error_text(e)));
  }
  if (!missing.empty()) {
    throw CommError(
        r.rank, r.world_size, "rendezvous (" + backend + ")",
        fmt::format("rank{} {} of world size {} did not join within {} ms at {}:{}; start every rank with "
                    "the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE, or raise the timeout",
                    missing.size() > 1 ? "s" : "", fmt::join(missing, ", "), r.world_size, r.timeout.count(),
                    r.master_addr, r.master_port));
  }
  return store;
}

}  // namespace dtrain::comm
