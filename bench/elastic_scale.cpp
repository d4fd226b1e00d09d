// Elastic jobs at cluster scale, simulated on this machine, and peer recovery against the disk
// (docs/faults-and-security.md, "Elastic jobs"). Prints one JSON line per measurement.
//   membership: N members (threads, each its own connection to a StoreServer that requires the
//     shared secret) rendezvous in generation 0 (connect, handshake, join), then N-1 of them (one
//     lost) agree on generation 1; seconds for each, N = 16 .. --max-members, doubling by 4.
//     Generation 1 closes after the round's last call (--last-call-ms), which is part of the time.
//   recovery: the state of a resnet18 (CIFAR stem) with SGD momentum, taken by a second rank from
//     the first over gloo on loopback (train::recover_from_peer: serialize, broadcast, read), against
//     Checkpoint::load of the same state from a file, from the page cache and from the disk (the
//     file's pages dropped first); --repeats of each, alternated, medians.
//   elastic_scale [--max-members 1024] [--last-call-ms 200] [--repeats 5]
#include <fcntl.h>
#include <fmt/format.h>
#include <torch/torch.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "BenchCommon.h"
#include "dtrain/comm/Backend.h"
#include "dtrain/comm/rendezvous/ElasticMembership.h"
#include "dtrain/comm/store/StoreServer.h"
#include "dtrain/config/RunConfig.h"
#include "dtrain/io/Checkpoint.h"
#include "dtrain/models/ModelFactory.h"
#include "dtrain/train/PeerRecovery.h"

namespace {

using Clock = std::chrono::steady_clock;
using dtrain::comm::ElasticMembership;
using dtrain::comm::ElasticOptions;
using dtrain::comm::StoreClient;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

void membership(int members, std::chrono::milliseconds last_call) {
  const std::string secret = "elastic-scale-bench-secret";
  dtrain::comm::StoreServer server("127.0.0.1", 0, std::chrono::minutes(2), secret);
  ElasticOptions options;
  options.min_members = members / 2;
  options.max_members = members;
  options.last_call = last_call;
  options.timeout = std::chrono::minutes(2);
  options.run_id = fmt::format("bench{}", members);
  std::vector<int> ranks(static_cast<std::size_t>(members), -1);
  std::atomic<int> joined{0};
  std::promise<void> go;
  auto start_signal = go.get_future().share();
  Clock::time_point start, rendezvous_done, change_start;
  std::vector<std::thread> threads;
  // Generation 0: everyone; generation 1: all but the last member, as after a loss.
  std::atomic<bool> change{false};
  std::promise<void> go_change;
  auto change_signal = go_change.get_future().share();
  for (int m = 0; m < members; ++m) {
    threads.emplace_back([&, m] {
      start_signal.wait();
      StoreClient store("127.0.0.1", server.port(), options.timeout, secret);
      ElasticMembership membership(store, options, fmt::format("member-{}", m));
      const auto first = membership.join(0, -1);
      ranks[static_cast<std::size_t>(m)] = first.rank;
      if (++joined == members) rendezvous_done = Clock::now();
      change_signal.wait();
      if (m == members - 1) return;  // lost
      membership.join(1, first.rank);
    });
  }
  start = Clock::now();
  go.set_value();
  while (joined.load() < members) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const double rendezvous = std::chrono::duration<double>(rendezvous_done - start).count();
  change_start = Clock::now();
  go_change.set_value();
  for (auto& t : threads) t.join();
  const double agreed = seconds_since(change_start);
  std::printf("%s\n", fmt::format("{{\"bench\": \"membership\", \"members\": {}, \"rendezvous_s\": {:.3f}, "
                                  "\"change_s\": {:.3f}, \"last_call_s\": {:.3f}}}",
                                  members, rendezvous, agreed, last_call.count() / 1000.0)
                          .c_str());
  std::fflush(stdout);
}

// Writes the file's dirty pages and drops its pages from the page cache, so that the next read
// comes from the disk.
void drop_from_page_cache(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY);
  if (fd < 0) throw std::runtime_error("cannot open " + file.string());
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

dtrain::io::Checkpoint resnet18_state() {
  dtrain::config::ModelConfig config;
  config.name = "resnet18";
  torch::manual_seed(1);
  auto model = dtrain::models::create_model(config, dtrain::models::InputSpec{{3, 32, 32}, 10});
  dtrain::io::Checkpoint checkpoint;
  checkpoint.set_module_state("model", *model);
  for (const auto& p : model->named_parameters(/*recurse=*/true)) {
    checkpoint.set_tensor("optimizer/" + p.key() + "/momentum_buffer", torch::randn_like(p.value()));
  }
  checkpoint.set_metadata({{"step", 1000}});
  return checkpoint;
}

void recovery(int repeats) {
  const auto state = resnet18_state();
  const auto file = std::filesystem::temp_directory_path() / "dtrain-elastic-scale.ckpt";
  state.save(file);
  dtrain::comm::StoreServer server("127.0.0.1", 0);
  std::vector<double> peer_s, disk_s, cold_s;
  std::uint64_t bytes = 0;
  std::vector<std::unique_ptr<dtrain::comm::Communicator>> comms(2);
  {
    std::vector<std::thread> connecting;
    for (int r = 0; r < 2; ++r) {
      connecting.emplace_back([&, r] {
        dtrain::comm::RendezvousInfo info;
        info.rank = r;
        info.world_size = 2;
        info.master_addr = "127.0.0.1";
        info.master_port = server.port();
        info.agent_store = true;
        info.store_prefix = "/bench/";
        comms[static_cast<std::size_t>(r)] = dtrain::comm::connect(dtrain::comm::BackendOptions{}, info);
      });
    }
    for (auto& t : connecting) t.join();
  }
  for (int i = 0; i < repeats; ++i) {
    // A: from a peer, timed on the receiving rank.
    std::vector<std::thread> ranks;
    double took = 0.0;
    for (int r = 0; r < 2; ++r) {
      ranks.emplace_back([&, r] {
        std::optional<dtrain::io::Checkpoint> held;
        if (r == 0) held = state;
        const auto start = Clock::now();
        const auto got =
            dtrain::train::recover_from_peer(*comms[static_cast<std::size_t>(r)], held, r == 0 ? 1000 : -1);
        if (r == 1) {
          took = seconds_since(start);
          bytes = got.bytes;
        }
      });
    }
    for (auto& t : ranks) t.join();
    peer_s.push_back(took);
    // B: from the file, in the page cache; C: from the disk, the file's pages dropped from the
    // cache first (posix_fadvise on this file alone).
    auto start = Clock::now();
    (void)dtrain::io::Checkpoint::load(file);
    disk_s.push_back(seconds_since(start));
    drop_from_page_cache(file);
    start = Clock::now();
    (void)dtrain::io::Checkpoint::load(file);
    cold_s.push_back(seconds_since(start));
  }
  std::filesystem::remove(file);
  std::printf(
      "%s\n",
      fmt::format(
          "{{\"bench\": \"recovery\", \"model\": \"resnet18 + SGD momentum\", \"bytes\": {}, "
          "\"peer_s\": {:.3f}, \"page_cache_load_s\": {:.3f}, \"disk_load_s\": {:.3f}, \"repeats\": {}}}",
          bytes, bench::median(peer_s), bench::median(disk_s), bench::median(cold_s), repeats)
          .c_str());
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const bench::Flags flags(argc, argv);
    const int max_members = std::stoi(flags.get("max-members", "1024"));
    const auto last_call = std::chrono::milliseconds(std::stoi(flags.get("last-call-ms", "200")));
    for (int n = 16; n <= max_members; n *= 4) membership(n, last_call);
    recovery(std::stoi(flags.get("repeats", "5")));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_scale: %s\n", e.what());
    return 1;
  }
}
