// connect_gloo(): the store rendezvous, then c10d's ProcessGroupGloo (as GlooGroup, for the native
// collectives) with the options of BackendOptions (timeout, worker threads, network interface).
#include "dtrain/comm/gloo/GlooCommunicator.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <fmt/format.h>

#include "dtrain/comm/C10dCompat.h"
#include "dtrain/comm/c10d/C10dCommunicator.h"
#include "dtrain/comm/c10d/StoreRendezvous.h"
#include "dtrain/comm/gloo/GlooCollectives.h"
#include "dtrain/comm/gloo/GlooConnectLines.h"
#include "dtrain/comm/gloo/GlooWireBytes.h"

namespace dtrain::comm {

namespace {

bool is_loopback(const std::string& address) {
  return address == "localhost" || address == "::1" || address.rfind("127.", 0) == 0;
}

std::shared_ptr<::gloo::transport::Device> make_device(const BackendOptions& options,
                                                       const RendezvousInfo& rendezvous) {
  if (!options.gloo_interface.empty()) {
    return ::c10d::ProcessGroupGloo::createDeviceForInterface(options.gloo_interface);
  }
  // A job that meets on a loopback address runs on this host only: the loopback device keeps its
  // traffic off the network and cannot pick an interface the other ranks cannot reach.
  if (is_loopback(rendezvous.master_addr))
    return ::c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1");
  // This host's name, falling back to loopback when it does not resolve to a usable address.
  return ::c10d::ProcessGroupGloo::createDefaultDevice();
}

}  // namespace

std::unique_ptr<Communicator> connect_gloo(const BackendOptions& options, const RendezvousInfo& rendezvous) {
  const int rank = rendezvous.rank;
  const int size = rendezvous.world_size;
  if (options.gloo_threads < 1) {
    throw std::invalid_argument(
        fmt::format("gloo_threads must be at least 1; found {}; 2 is c10d's default", options.gloo_threads));
  }
  C10dCapabilities capabilities;
  capabilities.poll_wait = options.poll_wait;
  capabilities.flat_collectives = false;            // See Note [Emulated collectives]
  capabilities.p2p_completes_without_wait = false;  // Gloo's SendWork/RecvWork finish inside wait()
  capabilities.wire_bytes = gloo_wire_bytes;        // See Note [Gloo's algorithms]
  capabilities.reduces_bfloat16 = false;            // See Note [bfloat16 on Gloo]
  capabilities.reduces_float16 = gloo_reduces_float16();
  capabilities.reduced_dtypes = gloo_reduced_dtypes();
  capabilities.reduce_scatter = gloo_reduce_scatter;  // See Note [Gloo's native collectives]
  capabilities.allgather = gloo_allgather;
  if (size == 1) {
    // Nothing to meet: no store, no sockets, every operation is local.
    GroupFactory unused = [](const compat::StorePtr&, int, int) -> compat::GroupPtr {
      TORCH_INTERNAL_ASSERT(false, "a single-rank communicator never builds a group");
    };
    return std::make_unique<C10dCommunicator>("gloo", 0, 1, options.timeout, compat::StorePtr(),
                                              compat::GroupPtr(), unused, capabilities);
  }

  compat::StorePtr store = join_store(rendezvous, "gloo");
  std::shared_ptr<::gloo::transport::Device> device;
  try {
    device = make_device(options, rendezvous);
  } catch (const std::exception& e) {
    const char* text = e.what();
    if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e))
      text = c10_error->what_without_backtrace();
    throw CommError(
        rank, size, "rendezvous (gloo)",
        fmt::format("cannot open a Gloo device{}: {}; set gloo_interface to a network interface that "
                    "reaches the other ranks",
                    options.gloo_interface.empty() ? "" : " on interface " + options.gloo_interface, text));
  }
  // Every group, the world and its splits, shares the device (one listening socket) and options.
  GroupFactory factory = [device, timeout = options.timeout, threads = options.gloo_threads](
                             const compat::StorePtr& group_store, int group_rank, int group_size) {
    auto gloo_options = ::c10d::ProcessGroupGloo::Options::create(timeout);
    gloo_options->devices = {device};
    gloo_options->threads = threads;
    const WithoutGlooConnectLines quiet;
    return compat::GroupPtr(
        c10::make_intrusive<GlooGroup>(group_store, group_rank, group_size, gloo_options));
  };
  compat::GroupPtr group;
  try {
    group = factory(store, rank, size);
  } catch (const std::exception& e) {
    const char* text = e.what();
    if (const auto* c10_error = dynamic_cast<const c10::Error*>(&e))
      text = c10_error->what_without_backtrace();
    throw CommError(rank, size, "rendezvous (gloo)",
                    fmt::format("connecting the Gloo mesh failed: {}", text));
  }
  return std::make_unique<C10dCommunicator>("gloo", rank, size, options.timeout, std::move(store),
                                            std::move(group), std::move(factory), capabilities);
}

}  // namespace dtrain::comm
