// Gloo's "is connected to" lines are kept out of std::cerr while groups connect, and everything
// else written meanwhile comes out whole, also when ranks that are threads connect at once.
#include <gtest/gtest.h>

#include <condition_variable>
#include <iostream>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/gloo/GlooConnectLines.h"

namespace dtrain::comm {
namespace {

std::string connect_line(int rank) {
  return "[./gloo/transport/tcp/context.cc:243] INFO Rank " + std::to_string(rank) +
         " is connected to 3. Expected number of connected peers is: 3";
}

TEST(GlooConnectLines, OnlyGloosConnectionReportsAreLeftOut) {
  EXPECT_EQ(without_gloo_connect_lines(connect_line(0) + "\nkept\n" + connect_line(1) + "\n"), "kept\n");
  EXPECT_EQ(without_gloo_connect_lines("a\nb"), "a\nb");
  EXPECT_EQ(without_gloo_connect_lines("INFO Rank 2 is connected to 1 (not Gloo's form)\n"),
            "INFO Rank 2 is connected to 1 (not Gloo's form)\n");
  EXPECT_EQ(without_gloo_connect_lines(""), "");
}

TEST(GlooConnectLines, ThreadsConnectingAtOnceShareOneHoldAndLoseNothingElse) {
  std::ostringstream captured;
  auto* original = std::cerr.rdbuf(captured.rdbuf());
  constexpr int kThreads = 4;
  std::mutex mutex;
  std::condition_variable all_in;
  int inside = 0;
  {
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        const WithoutGlooConnectLines quiet;
        {
          // Every scope is open before any writes, so all four share one hold.
          std::unique_lock<std::mutex> lock(mutex);
          if (++inside == kThreads) all_in.notify_all();
          all_in.wait(lock, [&] { return inside == kThreads; });
        }
        // One write a line, as Gloo's logging macro makes it.
        std::cerr << connect_line(t) + "\n";
        std::cerr << "kept " + std::to_string(t) + "\n";
      });
    }
    for (auto& thread : threads) thread.join();
  }
  std::cerr.rdbuf(original);
  const auto text = captured.str();
  for (int t = 0; t < kThreads; ++t) {
    EXPECT_NE(text.find("kept " + std::to_string(t) + "\n"), std::string::npos) << text;
  }
  EXPECT_EQ(text.find("is connected to"), std::string::npos) << text;
  EXPECT_EQ(text.size(), kThreads * std::string("kept 0\n").size()) << text;
}

}  // namespace
}  // namespace dtrain::comm
