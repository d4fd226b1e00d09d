// Who may join the rendezvous store: it listens on the address it is given and nowhere else (c10d's
// TCPStore, for reference, listens on every address), and with a shared secret it refuses a
// client without it, or with another, before any key is read or written (Note [Store handshake]).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/Backend.h"
#include "dtrain/comm/C10dCompat.h"
#include "dtrain/comm/rendezvous/Rendezvous.h"
#include "dtrain/comm/store/StoreClient.h"
#include "dtrain/comm/store/StoreConnection.h"
#include "dtrain/comm/store/StoreSecret.h"
#include "dtrain/comm/store/StoreServer.h"
#include "support/ScratchDir.h"
#include "support/ThreadWorld.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;

// Whether a TCP connection to address:port is accepted.
bool accepts(const std::string& address, int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  ::inet_pton(AF_INET, address.c_str(), &a.sin_addr);
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
  ::close(fd);
  return ok;
}

// An IPv4 address of this host outside 127.0.0.0/8, or "" when it has none.
std::string non_loopback_address() {
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return {};
  std::string found;
  for (ifaddrs* i = list; i != nullptr && found.empty(); i = i->ifa_next) {
    if (i->ifa_addr == nullptr || i->ifa_addr->sa_family != AF_INET) continue;
    const auto* a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
    if ((ntohl(a->sin_addr.s_addr) >> 24) == 127) continue;
    char text[INET_ADDRSTRLEN];
    ::inet_ntop(AF_INET, &a->sin_addr, text, sizeof(text));
    found = text;
  }
  ::freeifaddrs(list);
  return found;
}

// A secret file in a fresh folder, readable by its owner only.
class SecretFile {
 public:
  explicit SecretFile(const std::string& secret, unsigned mode = 0600) {
    path_ = (dir_ / "secret").string();
    std::ofstream(path_) << secret << "\n";
    ::chmod(path_.c_str(), mode);
  }
  const std::string& path() const { return path_; }

 private:
  dtrain::testing::ScratchDir dir_;
  std::string path_;
};

// The server's refusals once there are `n` of them: it records one when its side of the connection
// ends, which may be just after the refused client has returned.
std::vector<std::string> refusals(const StoreServer& server, std::size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  auto lines = server.refusals();
  while (lines.size() < n && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
    lines = server.refusals();
  }
  return lines;
}

std::size_t count_with(const std::vector<std::string>& lines, const std::string& text) {
  std::size_t n = 0;
  for (const auto& line : lines) n += line.find(text) != std::string::npos ? 1 : 0;
  return n;
}

TEST(StoreSecurity, ListensOnlyOnTheAddressGiven) {
  StoreServer server("127.0.0.1", 0, 10s);
  EXPECT_TRUE(accepts("127.0.0.1", server.port()));
  // 127.0.0.2 is another address of this host (Linux answers all of 127/8 on lo): a wildcard
  // listener accepts there, ours must not.
  EXPECT_FALSE(accepts("127.0.0.2", server.port())) << "the store listens beyond 127.0.0.1";
  const std::string other = non_loopback_address();
  if (other.empty()) {
    std::cout << "[ NOTE ] this host has no IPv4 address outside 127/8: only 127.0.0.2 was tried\n";
  } else {
    EXPECT_FALSE(accepts(other, server.port())) << "the store listens on " << other;
  }
}

// LibTorch 2.x's TCPStore asks for a libuv server by default, which Debian's LibTorch lacks; 1.13
// has no such option.
template <class Options>
auto without_libuv(Options& options, int) -> decltype(options.useLibUV = false, void()) {
  options.useLibUV = false;
}
template <class Options>
void without_libuv(Options&, long) {}

TEST(StoreSecurity, C10dTcpStoreForComparisonListensEverywhere) {
  // The reason for our own server: c10d's (LibTorch 1.13) has no address to listen on. Were this to
  // fail, a newer LibTorch binds only its host and the comparison above proves less.
  ::c10d::TCPStoreOptions options;
  options.port = 0;
  options.isServer = true;
  options.waitWorkers = false;
  options.timeout = 10s;
  without_libuv(options, 0);
  auto store = c10::make_intrusive<::c10d::TCPStore>("127.0.0.1", options);
  EXPECT_TRUE(accepts("127.0.0.2", store->getPort()));
}

TEST(StoreSecurity, ClientWithoutTheSecretIsRefusedBeforeAnyKey) {
  StoreServer server("127.0.0.1", 0, 10s, "right secret");
  StoreClient member("127.0.0.1", server.port(), 10s, "right secret");
  member.set("k", "v");

  try {
    StoreClient stranger("127.0.0.1", server.port(), 2s);
    ADD_FAILURE() << "a client without the secret connected";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("asks for a shared secret"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("127.0.0.1:" + std::to_string(server.port())), std::string::npos);
  }
  try {
    StoreClient impostor("127.0.0.1", server.port(), 2s, "wrong secret");
    ADD_FAILURE() << "a client with a wrong secret connected";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("refused this process's secret"), std::string::npos) << e.what();
  }

  // Something that ignores the handshake and writes a set request (k = "evil") at once.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(server.port()));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  std::string request(
      "\x01\x00\x00\x00\x01k\x00\x00\x00\x04"
      "evil",
      14);
  request.resize(80, '\0');  // as long as a handshake answer, so it is read as one
  ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL), static_cast<ssize_t>(request.size()));
  char reply[128];
  ssize_t n = 0;
  std::size_t total = 0;
  while ((n = ::recv(fd, reply, sizeof(reply), 0)) > 0) total += static_cast<std::size_t>(n);
  ::close(fd);
  // Greeting (8), flag (1), challenge (32), refusal (1), then the server closed.
  EXPECT_EQ(total, 42u);

  EXPECT_EQ(member.get("k"), "v") << "a refused client changed a key";
  const auto lines = refusals(server, 3);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(count_with(lines, "refused the connection from 127.0.0.1:"), 3u);
  EXPECT_EQ(count_with(lines, "did not answer the secret challenge"), 1u);
  EXPECT_EQ(count_with(lines, "wrong secret"), 2u);
  EXPECT_EQ(count_with(lines, "right secret"), 0u);
}

// c10d clones a store for threads of its own in LibTorch 2.x (Store::clone(), Note [c10d across
// LibTorch versions]): the clone is a connection of its own that proves the same secret.
TEST(StoreSecurity, ACloneIsAConnectionOfItsOwnWithTheSameSecret) {
  StoreServer server("127.0.0.1", 0, 10s, "right secret");
  auto original = c10::make_intrusive<StoreConnection>("127.0.0.1", server.port(), 10s, "right secret");
  original->set("k", std::vector<std::uint8_t>{'v'});
  c10::intrusive_ptr<::c10d::Store> clone = original->clone_connection();
  ASSERT_NE(clone.get(), original.get());
  EXPECT_EQ(clone->get("k"), std::vector<std::uint8_t>{'v'});
  clone->set("from clone", std::vector<std::uint8_t>{'w'});
  EXPECT_EQ(original->get("from clone"), std::vector<std::uint8_t>{'w'});
  original.reset();  // the clone does not lean on the original's socket
  EXPECT_EQ(clone->add("counter", 2), 2);
  EXPECT_TRUE(server.refusals().empty());
}

TEST(StoreSecurity, ClientWithASecretRefusesAStoreThatAsksForNone) {
  StoreServer open_store("127.0.0.1", 0, 10s);
  try {
    StoreClient client("127.0.0.1", open_store.port(), 2s, "a secret");
    ADD_FAILURE() << "a client with a secret trusted a store that asks for none";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("asks for no secret"), std::string::npos) << e.what();
  }
}

TEST(StoreSecurity, SecretFileMustBeTheOwnersOnlyAndNotEmpty) {
  SecretFile good("s3cret");
  EXPECT_EQ(read_secret_file(good.path(), "--secret-file"), "s3cret");
  SecretFile shared("s3cret", 0644);
  try {
    read_secret_file(shared.path(), "--secret-file");
    ADD_FAILURE() << "a world-readable secret file was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("chmod 600"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find("s3cret"), std::string::npos) << e.what();
  }
  SecretFile empty("");
  EXPECT_THROW(read_secret_file(empty.path(), "--secret-file"), std::invalid_argument);
  EXPECT_THROW(read_secret_file(good.path() + ".missing", "--secret-file"), std::invalid_argument);
}

// A gloo world whose rank 0 hosts the store with the secret, end to end: every rank proves it, and
// the all-reduce gives the exact sum.
TEST(StoreSecurity, GlooWorldWithTheSecretRendezvousesAndReduces) {
  SecretFile secret("world secret");
  const int port = [] {
    StoreServer probe("127.0.0.1", 0, 1s);
    return probe.port();
  }();
  constexpr int n = 2;
  dtrain::testing::run_threads(n, [&](int r) {
    RendezvousInfo info = dtrain::testing::thread_rank_info(r, n, port, 20s);
    info.agent_store = false;
    info.secret_file = secret.path();
    BackendOptions options;
    options.name = "gloo";
    options.timeout = 20s;
    auto comm = connect(options, info);
    at::Tensor t = torch::full({3}, static_cast<float>(r + 1));
    comm->allreduce(t, ReduceOp::Sum);
    EXPECT_TRUE(torch::equal(t, torch::full({3}, 3.0f)));
  });
}

TEST(StoreSecurity, RankWithoutTheSecretCannotJoinAWorldWithOne) {
  SecretFile secret("world secret");
  StoreServer server("127.0.0.1", 0, 10s, "world secret");
  RendezvousInfo info = dtrain::testing::thread_rank_info(1, 2, server.port(), 2s);
  BackendOptions options;
  options.name = "gloo";
  options.timeout = 2s;
  try {
    connect(options, info);
    ADD_FAILURE() << "a rank without the secret joined";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("DTRAIN_SECRET_FILE"), std::string::npos) << e.what();
  }
  EXPECT_EQ(refusals(server, 1).size(), 1u);
  StoreClient member("127.0.0.1", server.port(), 2s, "world secret");
  // The first key a joining rank writes (comm/c10d/StoreRendezvous.cpp) was never written.
  EXPECT_FALSE(member.check({"dtrain/connects/1"}));
}

// Which store a launched worker meets: dtrain launch's (DTRAIN_STORE=dtrain) takes a secret, and
// the secret's path comes from DTRAIN_SECRET_FILE; torchrun's c10d store takes none, so a worker
// given a secret there stops before connecting instead of joining unauthenticated.
TEST(StoreSecurity, TorchrunsStoreTakesNoSecret) {
  Environment env{{"RANK", "1"},
                  {"WORLD_SIZE", "2"},
                  {"MASTER_ADDR", "127.0.0.1"},
                  {"MASTER_PORT", "29500"},
                  {"TORCHELASTIC_USE_AGENT_STORE", "True"}};
  EXPECT_FALSE(resolve_rendezvous({}, env).dtrain_store);
  env["DTRAIN_STORE"] = "dtrain";
  env["DTRAIN_SECRET_FILE"] = "/run/job.secret";
  const RendezvousInfo launched = resolve_rendezvous({}, env);
  EXPECT_TRUE(launched.dtrain_store);
  EXPECT_EQ(launched.secret_file, "/run/job.secret");

  SecretFile secret("s");
  RendezvousInfo info = dtrain::testing::thread_rank_info(1, 2, 1, 1s);
  info.dtrain_store = false;
  info.secret_file = secret.path();
  BackendOptions options;
  options.name = "gloo";
  options.timeout = 1s;
  try {
    connect(options, info);
    ADD_FAILURE() << "a worker with a secret joined torchrun's store";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("torchrun's store"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dtrain::comm
