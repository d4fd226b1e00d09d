// The store server's event loop: a connection that stalls or sends garbage costs the others
// nothing, a Wait is answered when its key is written (or at its deadline, the connection staying
// in step), MultiGet reads many keys at once, and the descriptor limit is checked by name.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/store/StoreClient.h"
#include "dtrain/comm/store/StoreServer.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

int raw_connect(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  return fd;
}

// Every byte the server sends until it closes the connection.
std::size_t read_until_closed(int fd) {
  char buffer[256];
  std::size_t total = 0;
  ssize_t n = 0;
  while ((n = ::recv(fd, buffer, sizeof(buffer), 0)) > 0) total += static_cast<std::size_t>(n);
  return total;
}

std::vector<std::string> refusals(const StoreServer& server, std::size_t n) {
  const auto deadline = Clock::now() + 5s;
  auto lines = server.refusals();
  while (lines.size() < n && Clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
    lines = server.refusals();
  }
  return lines;
}

TEST(StoreLoop, GarbageAfterTheGreetingIsRefusedAndClosed) {
  StoreServer server("127.0.0.1", 0, 10s);
  StoreClient member("127.0.0.1", server.port(), 10s);
  const int fd = raw_connect(server.port());
  const std::string garbage = "GET / HTTP/1.1\r\n\r\n";
  ASSERT_EQ(::send(fd, garbage.data(), garbage.size(), MSG_NOSIGNAL), static_cast<ssize_t>(garbage.size()));
  EXPECT_EQ(read_until_closed(fd), 9u);  // the greeting (8) and its flag (1), then closed
  ::close(fd);
  const auto lines = refusals(server, 1);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("unknown request code 71; not a dtrain store client"), std::string::npos)
      << lines[0];
  member.set("k", "v");
  EXPECT_EQ(member.get("k"), "v");
}

TEST(StoreLoop, ASilentConnectionDoesNotHoldTheOthers) {
  StoreServer server("127.0.0.1", 0, 500ms, "secret");
  const int silent = raw_connect(server.port());  // never answers the challenge
  const auto start = Clock::now();
  StoreClient member("127.0.0.1", server.port(), 10s, "secret");
  member.set("k", "v");
  EXPECT_EQ(member.get("k"), "v");
  EXPECT_LT(Clock::now() - start, 400ms) << "a member waited behind a silent connection";
  // The handshake's deadline (the server's timeout here) closes it: greeting, flag, challenge.
  EXPECT_EQ(read_until_closed(silent), 8u + 1u + 32u);
  ::close(silent);
  const auto lines = refusals(server, 1);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("did not answer the secret challenge"), std::string::npos) << lines[0];
}

TEST(StoreLoop, AHalfSentRequestIsClosedAfterTheTimeoutWithoutHoldingTheOthers) {
  StoreServer server("127.0.0.1", 0, 500ms);
  const int stalled = raw_connect(server.port());
  const char half[] = {1, 0, 0};  // a Set whose key length never comes whole
  ASSERT_EQ(::send(stalled, half, sizeof(half), MSG_NOSIGNAL), 3);
  StoreClient member("127.0.0.1", server.port(), 10s);
  const auto start = Clock::now();
  member.set("k", "v");
  EXPECT_EQ(member.get("k"), "v");
  EXPECT_LT(Clock::now() - start, 400ms);
  EXPECT_EQ(read_until_closed(stalled), 8u + 1u);  // the greeting, then closed at the deadline
  EXPECT_GE(Clock::now() - start, 400ms);
  ::close(stalled);
}

TEST(StoreLoop, AWaitIsAnsweredWhenItsKeyIsSet) {
  StoreServer server("127.0.0.1", 0, 10s);
  StoreClient waiter("127.0.0.1", server.port(), 10s);
  auto woken = std::async(std::launch::async, [&] {
    const auto start = Clock::now();
    const bool set = waiter.wait_until({"round/closed", "finished"}, 10s, /*any=*/true);
    return std::make_pair(set, Clock::now() - start);
  });
  std::this_thread::sleep_for(100ms);
  StoreClient leader("127.0.0.1", server.port(), 10s);
  leader.set("round/closed", "3");
  const auto [set, took] = woken.get();
  EXPECT_TRUE(set);
  EXPECT_LT(took, 1s);
  EXPECT_EQ(waiter.get("round/closed"), "3");
}

TEST(StoreLoop, AWaitThatTimesOutLeavesTheConnectionInStep) {
  StoreServer server("127.0.0.1", 0, 10s);
  StoreClient client("127.0.0.1", server.port(), 10s);
  client.set("a", "1");
  EXPECT_FALSE(client.wait_until({"a", "never"}, 50ms, /*any=*/false));
  EXPECT_TRUE(client.wait_until({"a", "never"}, 50ms, /*any=*/true));
  EXPECT_EQ(client.add("n", 2), 2);
  EXPECT_EQ(client.get("a"), "1");
}

TEST(StoreLoop, OneWriteWakesEveryWaiter) {
  StoreServer server("127.0.0.1", 0, 10s);
  constexpr int kWaiters = 200;
  std::vector<std::future<bool>> waiters;
  std::atomic<int> connected{0};
  for (int i = 0; i < kWaiters; ++i) {
    waiters.push_back(std::async(std::launch::async, [&] {
      StoreClient client("127.0.0.1", server.port(), 10s);
      ++connected;
      return client.wait_until({"go"}, 20s, /*any=*/false);
    }));
  }
  while (connected < kWaiters) std::this_thread::sleep_for(1ms);
  StoreClient setter("127.0.0.1", server.port(), 10s);
  setter.add("go", 1);
  for (auto& w : waiters) EXPECT_TRUE(w.get());
}

TEST(StoreLoop, MultiGetReadsEveryKeyAtOnce) {
  StoreServer server("127.0.0.1", 0, 10s);
  StoreClient client("127.0.0.1", server.port(), 10s);
  client.set("a", "1");
  client.set("c", std::string("3\0", 2));
  const auto values = client.multi_get({"a", "b", "c"});
  ASSERT_EQ(values.size(), 3u);
  EXPECT_EQ(values[0], std::optional<std::string>("1"));
  EXPECT_EQ(values[1], std::nullopt);
  EXPECT_EQ(values[2], std::optional<std::string>(std::string("3\0", 2)));
}

TEST(StoreLoop, StatsCountConnectionsAndTheirBytes) {
  StoreServer server("127.0.0.1", 0, 10s);
  StoreClient a("127.0.0.1", server.port(), 10s);
  StoreClient b("127.0.0.1", server.port(), 10s);
  a.set("k", "value");
  b.check({"k"});  // both connections accepted by now
  const auto stats = server.stats();
  EXPECT_EQ(stats.connections, 2u);
  EXPECT_GT(stats.connection_bytes, 0u);
  EXPECT_EQ(stats.keys, 1u);
  EXPECT_EQ(stats.value_bytes, 5u);
}

TEST(StoreLoop, TooFewDescriptorsAreRefusedWithTheNumbersAndHowToRaiseThem) {
  rlimit limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &limit), 0);
  if (limit.rlim_max == RLIM_INFINITY) GTEST_SKIP() << "no hard limit on descriptors here";
  try {
    reserve_descriptors(limit.rlim_max + 1, "a store for many members");
    FAIL() << "more descriptors than the hard limit were granted";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("a store for many members needs about " + std::to_string(limit.rlim_max + 1)),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("hard " + std::to_string(limit.rlim_max)), std::string::npos) << what;
    EXPECT_NE(what.find("ulimit -Hn"), std::string::npos) << what;
  }
  // Within the hard limit the soft one is raised.
  reserve_descriptors(std::min<rlim_t>(limit.rlim_max, 4096), "a store");
  rlimit after{};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &after), 0);
  EXPECT_GE(after.rlim_cur, std::min<rlim_t>(limit.rlim_max, 4096));
}

}  // namespace
}  // namespace dtrain::comm
