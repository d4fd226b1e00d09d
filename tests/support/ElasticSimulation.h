// An elastic job of many members on one machine, for the scale test and bench/elastic_scale: the
// store (a StoreServer requiring the shared secret) in this process, the members as threads of a
// few forked processes, each its own connection, so that ten thousand of them fit the descriptor
// limits of both sides. Every member joins generation 0, a job started at its full size (MIN =
// MAX = N, so that a member slowed by the connection storm is not left to the next round); then
// the member ranked N/2 is lost and the others agree on generation 1 under the caller's MIN, after
// its last call. Needs nothing of LibTorch.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/rendezvous/ElasticMembership.h"
#include "dtrain/comm/store/StoreClient.h"
#include "dtrain/comm/store/StoreServer.h"

namespace dtrain::testing {

struct ElasticSimulation {
  double rendezvous_s = 0.0;     // from the start of the members' threads to the last one's generation 0
  double change_s = 0.0;         // from the loss to the last survivor's generation 1 (last call included)
  comm::StoreServerStats store;  // once every member is connected
  // Per member: its rank and world size in generation 0 and 1 (-1 for the lost one).
  struct Member {
    int rank0 = -1, world0 = 0, rank1 = -1, world1 = 0;
  };
  std::vector<Member> members;
  std::string error;  // the first member's failure, empty when none failed
};

namespace detail {

inline void write_all(int fd, const std::string& text) {
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

inline std::string read_all(int fd) {
  std::string text;
  char buffer[65536];
  ssize_t n = 0;
  while ((n = ::read(fd, buffer, sizeof(buffer))) > 0) text.append(buffer, static_cast<std::size_t>(n));
  return text;
}

// A forked process's members [first, first + count): each reports "m rank0 world0 rank1 world1"
// or "m error <what>" on `report` when all are done.
[[noreturn]] inline void run_members(int first, int count, int total, int port_pipe, int report,
                                     const comm::ElasticOptions& options, const std::string& secret) {
  int port = 0;
  if (::read(port_pipe, &port, sizeof(port)) != sizeof(port)) ::_exit(2);
  std::mutex mutex;
  std::string lines;
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(count));
  for (int m = first; m < first + count; ++m) {
    threads.emplace_back([&, m] {
      std::string line;
      try {
        comm::StoreClient store("127.0.0.1", port, options.timeout, secret);
        auto full = options;
        full.min_members = total;
        comm::ElasticMembership membership(store, options, "member-" + std::to_string(m));
        const auto g0 = comm::ElasticMembership(store, full, "member-" + std::to_string(m)).join(0, -1);
        if (store.add("sim/joined", 1) == total) store.set("sim/joined-all", "1");
        store.wait({"sim/change"}, options.timeout);
        int rank1 = -1, world1 = 0;
        if (g0.rank != total / 2) {
          const auto g1 = membership.join(g0);
          rank1 = g1.rank;
          world1 = g1.world_size;
          if (store.add("sim/changed", 1) == total - 1) store.set("sim/changed-all", "1");
        }
        line = std::to_string(m) + " " + std::to_string(g0.rank) + " " + std::to_string(g0.world_size) + " " +
               std::to_string(rank1) + " " + std::to_string(world1) + "\n";
      } catch (const std::exception& e) {
        line = std::to_string(m) + " error " + e.what() + "\n";
        try {
          comm::StoreClient store("127.0.0.1", port, std::chrono::seconds(5), secret);
          store.set_if_absent("sim/failed", line);
        } catch (const std::exception&) {
        }
      }
      std::lock_guard<std::mutex> lock(mutex);
      lines += line;
    });
  }
  for (auto& t : threads) t.join();
  write_all(report, lines);
  ::_exit(0);
}

}  // namespace detail

// `members` members in processes of at most `per_process` threads. options.max_members is
// `members`; generation 1 (one member short) closes after options.last_call.
inline ElasticSimulation simulate_elastic_job(int members, comm::ElasticOptions options,
                                              const std::string& secret, int per_process = 2500) {
  using Clock = std::chrono::steady_clock;
  options.max_members = members;
  ElasticSimulation result;
  result.members.resize(static_cast<std::size_t>(members));
  // Forked before the store exists, so that no child holds a copy of the store's sockets.
  struct Child {
    pid_t pid;
    int port_pipe;
    int report;
  };
  std::vector<Child> children;
  for (int first = 0; first < members; first += per_process) {
    int port_pipe[2], report[2];
    if (::pipe(port_pipe) != 0 || ::pipe(report) != 0) throw std::runtime_error("pipe failed");
    const int count = std::min(per_process, members - first);
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(port_pipe[1]);
      ::close(report[0]);
      for (const auto& c : children) {
        ::close(c.port_pipe);
        ::close(c.report);
      }
      detail::run_members(first, count, members, port_pipe[0], report[1], options, secret);
    }
    ::close(port_pipe[0]);
    ::close(report[1]);
    children.push_back({pid, port_pipe[1], report[0]});
  }
  comm::StoreServer server("127.0.0.1", 0, options.timeout, secret, members + 1);
  comm::StoreClient watch("127.0.0.1", server.port(), options.timeout, secret);
  const int port = server.port();
  const auto start = Clock::now();
  for (const auto& c : children) {
    [[maybe_unused]] const auto written = ::write(c.port_pipe, &port, sizeof(port));
    ::close(c.port_pipe);
  }
  auto seconds = [](Clock::duration d) { return std::chrono::duration<double>(d).count(); };
  if (watch.wait_until({"sim/joined-all", "sim/failed"}, options.timeout, /*any=*/true) &&
      !watch.check({"sim/failed"})) {
    result.rendezvous_s = seconds(Clock::now() - start);
    result.store = server.stats();
    const auto change = Clock::now();
    watch.set("sim/change", "1");
    if (watch.wait_until({"sim/changed-all", "sim/failed"}, options.timeout, /*any=*/true) &&
        !watch.check({"sim/failed"})) {
      result.change_s = seconds(Clock::now() - change);
    }
  }
  if (watch.check({"sim/failed"})) result.error = watch.get("sim/failed");
  if (result.error.empty() && result.change_s == 0.0)
    result.error = "the job did not finish within the timeout";
  if (!result.error.empty()) watch.set("sim/change", "1");  // release the members still waiting
  for (const auto& c : children) {
    const std::string lines = detail::read_all(c.report);
    ::close(c.report);
    int status = 0;
    ::waitpid(c.pid, &status, 0);
    std::size_t begin = 0;
    while (begin < lines.size()) {
      const auto end = lines.find('\n', begin);
      const std::string line = lines.substr(begin, end - begin);
      begin = end + 1;
      int m = -1;
      ElasticSimulation::Member r;
      if (std::sscanf(line.c_str(), "%d %d %d %d %d", &m, &r.rank0, &r.world0, &r.rank1, &r.world1) == 5) {
        result.members[static_cast<std::size_t>(m)] = r;
      } else if (result.error.empty()) {
        result.error = line;
      }
    }
  }
  return result;
}

}  // namespace dtrain::testing
