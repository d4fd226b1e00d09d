// StoreServer: a free port when asked for port 0, and a taken port reported with its address
// (no C++ backtrace from c10d).
#include <gtest/gtest.h>

#include <chrono>
#include <stdexcept>
#include <string>

#include "dtrain/comm/store/StoreServer.h"

namespace dtrain::comm {
namespace {

using namespace std::chrono_literals;

TEST(StoreServer, TakenPortIsReportedWithItsAddress) {
  StoreServer first("127.0.0.1", 0, 10s);
  EXPECT_GT(first.port(), 0);
  try {
    StoreServer second("127.0.0.1", first.port(), 10s);
    ADD_FAILURE() << "a second store bound the taken port " << first.port();
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("cannot host a store at 127.0.0.1:" + std::to_string(first.port())),
              std::string::npos)
        << what;
    EXPECT_EQ(what.find("Exception raised from"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace dtrain::comm
