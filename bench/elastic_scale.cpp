// Elastic jobs at cluster scale, simulated on this machine, and peer recovery against the disk
// (docs/faults-and-security.md, "Elastic jobs"). Prints one JSON line per measurement.
//   membership: N members (threads of a few forked processes, each its own connection to a
//     StoreServer that requires the shared secret; tests/support/ElasticSimulation.h) rendezvous
//     in generation 0 (connect, handshake, join), then N-1 of them (one lost) agree on generation
//     1; seconds for each and the store's memory per connection, N = 16 .. --max-members by 4 and
//     --max-members itself, as JSON lines and a table. Generation 1 closes after the round's last
//     call (--last-call-ms), which is part of the time.
//   recovery: the state of a resnet18 (CIFAR stem) with SGD momentum, taken by a second rank from
//     the first over gloo on loopback (train::recover_from_peer: serialize, broadcast, read), against
//     Checkpoint::load of the same state from a file, from the page cache and from the disk (the
//     file's pages dropped first); --repeats of each, alternated, medians.
//   elastic_scale [--max-members 10000] [--last-call-ms 200] [--repeats 5]
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
#include "support/ElasticSimulation.h"

namespace {

using Clock = std::chrono::steady_clock;
using dtrain::comm::ElasticOptions;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One size of the simulated job (support/ElasticSimulation.h); prints its JSON line and returns
// its row of the table.
std::string membership(int members, std::chrono::milliseconds last_call) {
  ElasticOptions options;
  options.min_members = members / 2;
  options.last_call = last_call;
  options.timeout = std::chrono::minutes(2);
  options.run_id = fmt::format("bench{}", members);
  const auto job = dtrain::testing::simulate_elastic_job(members, options, "elastic-scale-bench-secret");
  if (!job.error.empty()) throw std::runtime_error(fmt::format("{} members: {}", members, job.error));
  const double per_connection = job.store.connections == 0
                                    ? 0.0
                                    : static_cast<double>(job.store.connection_bytes) / job.store.connections;
  std::printf("%s\n", fmt::format("{{\"bench\": \"membership\", \"members\": {}, \"rendezvous_s\": {:.3f}, "
                                  "\"change_s\": {:.3f}, \"last_call_s\": {:.3f}, \"store_connections\": {}, "
                                  "\"store_bytes_per_connection\": {:.0f}, \"store_value_bytes\": {}}}",
                                  members, job.rendezvous_s, job.change_s, last_call.count() / 1000.0,
                                  job.store.connections, per_connection, job.store.value_bytes)
                          .c_str());
  std::fflush(stdout);
  return fmt::format("| {:>7} | {:>14.3f} | {:>10.3f} | {:>22.0f} |", members, job.rendezvous_s, job.change_s,
                     per_connection);
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
    const int max_members = std::stoi(flags.get("max-members", "10000"));
    const auto last_call = std::chrono::milliseconds(std::stoi(flags.get("last-call-ms", "200")));
    // The store and a watching client in this process: a descriptor a member, and some to spare.
    dtrain::comm::reserve_descriptors(static_cast<std::size_t>(max_members) + 128, "elastic_scale's store");
    std::vector<int> sizes;
    for (int n = 16; n < max_members; n *= 4) sizes.push_back(n);
    sizes.push_back(max_members);
    std::vector<std::string> rows;
    for (int n : sizes) rows.push_back(membership(n, last_call));
    std::printf("\n| members | rendezvous (s) | change (s) | store bytes/connection |\n");
    std::printf("|--------:|---------------:|-----------:|-----------------------:|\n");
    for (const auto& row : rows) std::printf("%s\n", row.c_str());
    std::printf("(change includes the round's last call, %.3f s)\n\n", last_call.count() / 1000.0);
    std::fflush(stdout);
    recovery(std::stoi(flags.get("repeats", "5")));
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "elastic_scale: %s\n", e.what());
    return 1;
  }
}
