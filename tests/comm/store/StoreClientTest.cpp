// StoreClient against a StoreServer in this process: values set by one client are read by another,
// the first of several set_if_absent wins, wait returns once keys are set and names the ones that
// never are, and a store that is not there is reported with its address.
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <thread>

#include "dtrain/comm/store/StoreClient.h"
#include "dtrain/comm/store/StoreServer.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;

TEST(StoreClient, SetThenGetFromAnotherClient) {
  StoreServer server("127.0.0.1", 0, 10s);
  StoreClient writer("127.0.0.1", server.port(), 10s);
  StoreClient reader("127.0.0.1", server.port(), 10s);
  EXPECT_FALSE(reader.check({"greeting"}));
  writer.set("greeting", "hello");
  EXPECT_TRUE(reader.check({"greeting"}));
  EXPECT_EQ(reader.get("greeting"), "hello");
  writer.set("greeting", std::string("bytes\0kept", 10));  // binary-safe, and set overwrites
  EXPECT_EQ(reader.get("greeting"), std::string("bytes\0kept", 10));
}

TEST(StoreClient, SetIfAbsentKeepsTheFirstValue) {
  StoreServer server("127.0.0.1", 0, 10s);
  StoreClient first("127.0.0.1", server.port(), 10s);
  StoreClient second("127.0.0.1", server.port(), 10s);
  EXPECT_EQ(first.set_if_absent("failure", "1 3"), "1 3");
  EXPECT_EQ(second.set_if_absent("failure", "0 9"), "1 3");
  EXPECT_EQ(second.get("failure"), "1 3");
}

TEST(StoreClient, WaitReturnsOnceEveryKeyIsSet) {
  StoreServer server("127.0.0.1", 0, 10s);
  StoreClient waiter("127.0.0.1", server.port(), 10s);
  waiter.set("a", "1");
  std::thread setter([port = server.port()] {
    StoreClient client("127.0.0.1", port, 10s);
    client.set("b", "2");
  });
  waiter.wait({"a", "b"}, 10s);
  setter.join();
  EXPECT_EQ(waiter.get("b"), "2");
}

TEST(StoreClient, WaitNamesTheKeysThatNeverCame) {
  StoreServer server("127.0.0.1", 0, 10s);
  StoreClient client("127.0.0.1", server.port(), 10s);
  client.set("here", "1");
  try {
    client.wait({"here", "missing"}, 100ms);
    ADD_FAILURE() << "wait returned without the key 'missing'";
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("missing not set within 100 ms"), std::string::npos) << what;
    EXPECT_EQ(what.find("here"), std::string::npos) << what;
  }
}

TEST(StoreClient, NoStoreIsReportedWithItsAddress) {
  int port = 0;
  {
    StoreServer gone("127.0.0.1", 0, 10s);
    port = gone.port();
  }
  try {
    StoreClient client("127.0.0.1", port, 300ms);
    ADD_FAILURE() << "connected to a store that was closed";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("store at 127.0.0.1:" + std::to_string(port)), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace dtrain::comm
