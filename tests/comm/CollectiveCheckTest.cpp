// Hangs that name their culprit: parallel.debug: detail's fingerprint check of every collective
// (Note [Collective checks]) and the flight recorder's report on a timeout (Note [Flight
// recorder]), over gloo with ranks as threads; and the recorder's ring by itself.
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/comm/FlightRecorder.h"
#include "support/ThreadWorld.h"

namespace dtrain::comm {
namespace {

using ::testing::HasSubstr;

CallFingerprint allreduce_of(std::int64_t numel, std::int64_t seq) {
  CallFingerprint c;
  c.op = "allreduce";
  c.dtype = c10::ScalarType::Float;
  c.numel = numel;
  c.reduce = static_cast<int>(ReduceOp::Sum);
  c.seq = seq;
  return c;
}

TEST(FlightRecorder, KeepsTheLastCompletedAndTheOldestRunningOperation) {
  FlightRecorder recorder;
  EXPECT_FALSE(recorder.last_completed().has_value());
  const auto first = recorder.start(allreduce_of(10, 1));
  const auto second = recorder.start(allreduce_of(20, 2));
  EXPECT_EQ(recorder.oldest_pending()->seq, 1);
  recorder.finish(second, true);
  recorder.finish(first, true);
  // The newest operation finished, not the last to finish: #2.
  EXPECT_EQ(recorder.last_completed()->seq, 2);
  EXPECT_FALSE(recorder.oldest_pending().has_value());
  // A burst longer than the ring still leaves the last completed one known.
  std::vector<std::size_t> slots;
  for (int i = 0; i < 100; ++i) slots.push_back(recorder.start(allreduce_of(1, 3 + i)));
  EXPECT_EQ(recorder.last_completed()->seq, 2);
  EXPECT_THAT(recorder.summary(), HasSubstr("last completed allreduce(float32, 20, sum, #2)"));
  EXPECT_THAT(recorder.summary(), HasSubstr("in allreduce(float32, 1, sum, #39)"));  // the oldest of the ring
}

// Note [A recorder without a lock]: one thread issues, two others finish out of order and a
// fourth reads all along; every record a reader sees is whole (numel is twice seq in each one
// written), and at the end the newest operation is the last completed and none is left running.
TEST(FlightRecorder, ReadersSeeWholeRecordsWhileOtherThreadsStartAndFinish) {
  FlightRecorder recorder;
  constexpr int kOps = 1000000;
  std::vector<std::atomic<std::size_t>> tickets(kOps);
  std::atomic<int> issued{0};
  std::atomic<bool> done{false};
  std::atomic<int> torn{0};
  std::atomic<int> reads{0};
  std::thread issuer([&] {
    for (int i = 0; i < kOps; ++i) {
      tickets[i].store(recorder.start(allreduce_of(2 * (i + 1), i + 1)), std::memory_order_relaxed);
      issued.store(i + 1, std::memory_order_release);
    }
  });
  auto finisher = [&](int parity) {
    for (int i = parity; i < kOps; i += 2) {
      while (issued.load(std::memory_order_acquire) <= i) std::this_thread::yield();
      recorder.finish(tickets[i].load(std::memory_order_relaxed), true);
    }
  };
  std::thread even(finisher, 0);
  std::thread odd(finisher, 1);
  std::thread reader([&] {
    while (!done.load(std::memory_order_acquire)) {
      for (const auto& call : {recorder.last_completed(), recorder.oldest_pending()}) {
        if (call && (call->numel != 2 * call->seq || std::string(call->op) != "allreduce")) ++torn;
      }
      ++reads;
    }
  });
  issuer.join();
  even.join();
  odd.join();
  done.store(true, std::memory_order_release);
  reader.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_GT(reads.load(), 0);
  ASSERT_TRUE(recorder.last_completed().has_value());
  EXPECT_EQ(recorder.last_completed()->seq, kOps);
  EXPECT_FALSE(recorder.oldest_pending().has_value());
}

TEST(FlightRecorder, FingerprintsSurviveTheirWireForm) {
  CallFingerprint c;
  c.op = "broadcast";
  c.dtype = c10::ScalarType::BFloat16;
  c.numel = 12345;
  c.root = 3;
  c.seq = 42;
  const auto words = encode(c);
  EXPECT_EQ(decode(words.data()), c);
  EXPECT_EQ(describe(c), "broadcast(bfloat16, 12345, root 3, #42)");
  CallFingerprint other = c;
  other.numel = 12344;
  EXPECT_NE(other, c);
}

// Two ranks call different collectives as their second: under detail every rank gets the same
// one-line error naming both ranks and both calls, and nothing hangs (the test's timeout is 60 s;
// the check answers at once).
TEST(GlooCommunicator, DetailReportsMismatchedCollectivesNamingBothRanksAndCalls) {
  std::vector<std::string> errors(2);
  std::vector<float> first_sum(2);
  dtrain::testing::run_world(2, [&](CommunicatorPtr c) {
    c->set_debug(DebugMode::Detail);
    auto same = torch::full({1000}, static_cast<float>(c->rank() + 1));
    c->allreduce(same);  // #1: the same on both ranks, checked and run
    first_sum[c->rank()] = same[0].item<float>();
    try {
      if (c->rank() == 0) {
        auto t = torch::ones({1000});
        c->allreduce(t);
      } else {
        auto t = torch::ones({10});
        c->broadcast(t, 0);
      }
    } catch (const CommError& e) {
      errors[c->rank()] = e.what();
    }
    // A split inherits the mode.
    auto sub = c->split({0, 1});
    EXPECT_EQ(sub->debug(), DebugMode::Detail);
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_FLOAT_EQ(first_sum[r], 3.0f);
    EXPECT_THAT(errors[r], HasSubstr("rank 0 called allreduce(float32, 1000, sum, #2) but rank 1 called "
                                     "broadcast(float32, 10, root 0, #2)"))
        << "rank " << r;
    EXPECT_EQ(errors[r].find('\n'), std::string::npos) << errors[r];
  }
}

// Rank 1 of three stops taking part after two all-reduces (it keeps its connections open, as a
// process stuck in a loop would). After the timeout the other two name it, with the collective
// they completed last and the one they wait in.
TEST(GlooCommunicator, TimeoutNamesTheRankThatStoppedAndEachRanksLastCollective) {
  dtrain::testing::WorldOptions options;
  options.timeout = std::chrono::seconds(3);
  std::vector<std::string> errors(3);
  std::mutex mutex;
  std::condition_variable reported;
  int done = 0;
  dtrain::testing::run_world(
      3,
      [&](CommunicatorPtr c) {
        auto t = torch::ones({1000});
        c->allreduce(t);
        c->allreduce(t);
        if (c->rank() == 1) {
          std::unique_lock<std::mutex> lock(mutex);
          reported.wait(lock, [&] { return done == 2; });
          return;
        }
        try {
          c->allreduce(t);
        } catch (const CommError& e) {
          errors[c->rank()] = e.what();
        }
        {
          std::lock_guard<std::mutex> lock(mutex);
          ++done;
        }
        reported.notify_all();
      },
      options);
  for (int r : {0, 2}) {
    SCOPED_TRACE(errors[r]);
    EXPECT_THAT(errors[r], HasSubstr(fmt::format("rank {} (this one) last completed allreduce(float32, 1000, "
                                                 "sum, #2)",
                                                 r)));
    EXPECT_THAT(errors[r], HasSubstr("in allreduce(float32, 1000, sum, #3)"));
    EXPECT_THAT(errors[r],
                HasSubstr(fmt::format("rank {} last completed allreduce(float32, 1000, sum, #2)", 2 - r)));
    EXPECT_THAT(errors[r], HasSubstr("rank 1 sent no report"));
    EXPECT_THAT(errors[r], HasSubstr("stopped responding after collective #2"));
  }
}

}  // namespace
}  // namespace dtrain::comm
