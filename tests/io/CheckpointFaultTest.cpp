// Checkpoint writes under faults: a write that fails for lack of space (RLIMIT_FSIZE stands in for a
// full disk: the same failed write(2), EFBIG instead of ENOSPC) costs one line naming the file and
// nothing else; a writer killed at a random moment, 50 times over, always leaves a checkpoint that
// loads, and the next start removes the temporaries the kills left.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <torch/torch.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dtrain/io/AtomicFile.h"
#include "dtrain/io/Checkpoint.h"
#include "support/ScratchDir.h"

namespace dtrain::io {
namespace {

namespace fs = std::filesystem;

// A checkpoint of `floats` values, all equal to `step`, with the step in its metadata: a loaded
// one tells by itself whether it is whole.
Checkpoint filled_checkpoint(std::int64_t step, std::int64_t floats) {
  Checkpoint checkpoint;
  checkpoint.set_tensor("model.weight", torch::full({floats}, static_cast<float>(step)));
  checkpoint.set_metadata({{"step", step}});
  return checkpoint;
}

void expect_whole(const Checkpoint& checkpoint) {
  const auto step = checkpoint.metadata().at("step").get<std::int64_t>();
  const auto& weight = checkpoint.tensor("model.weight");
  EXPECT_EQ(weight.min().item<float>(), static_cast<float>(step));
  EXPECT_EQ(weight.max().item<float>(), static_cast<float>(step));
}

std::vector<fs::path> temporaries_in(const fs::path& dir) {
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (is_temporary_file(entry.path())) found.push_back(entry.path());
  }
  return found;
}

// Files past `bytes` cannot be written while it lives: write(2) fails with EFBIG, as it fails with
// ENOSPC on a full disk, and SIGXFSZ is ignored so that the process lives to report it.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &saved_);
    saved_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, saved_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;

 private:
  rlimit saved_{};
  void (*saved_handler_)(int) = SIG_DFL;
};

TEST(CheckpointFaults, FullDiskNamesTheFileAndKeepsThePreviousCheckpoint) {
  dtrain::testing::ScratchDir dir;
  CheckpointStore store(dir.path());
  store.save(filled_checkpoint(1, 100), 1);
  std::string message;
  {
    const FileSizeLimit limit(64 * 1024);
    try {
      store.save(filled_checkpoint(2, 1 << 18), 2);  // 1 MiB of floats
    } catch (const std::exception& e) {
      message = e.what();
    }
  }
  ASSERT_FALSE(message.empty()) << "a checkpoint larger than the file size limit was written";
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  EXPECT_NE(message.find((dir.path() / "checkpoint-000000000002.ckpt").string()), std::string::npos)
      << message;
  EXPECT_NE(message.find(std::strerror(EFBIG)), std::string::npos) << message;
  EXPECT_TRUE(temporaries_in(dir.path()).empty());
  EXPECT_FALSE(fs::exists(dir.path() / "checkpoint-000000000002.ckpt"));
  const auto latest = store.load_latest();
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(latest->metadata().at("step"), 1);
  expect_whole(*latest);
}

TEST(CheckpointFaults, DiskFullFromTheFirstByteKeepsTheMarker) {
  dtrain::testing::ScratchDir dir;
  CheckpointStore store(dir.path());
  store.save(filled_checkpoint(1, 100), 1);
  // Not one byte fits: the checkpoint fails before the marker is touched, which still names step 1.
  {
    const FileSizeLimit limit(0);
    EXPECT_THROW(store.save(filled_checkpoint(2, 100), 2), std::runtime_error);
  }
  EXPECT_TRUE(temporaries_in(dir.path()).empty());
  ASSERT_TRUE(store.latest_path().has_value());
  EXPECT_EQ(store.latest_path()->filename(), "checkpoint-000000000001.ckpt");
}

TEST(CheckpointFaults, StaleTemporariesOfExitedWritersAreRemovedOthersKept) {
  dtrain::testing::ScratchDir dir;
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  ASSERT_GT(child, 0);
  ASSERT_EQ(::waitpid(child, nullptr, 0), child);  // an exited writer's pid
  auto touch = [&](const std::string& name) {
    std::FILE* f = std::fopen((dir.path() / name).c_str(), "w");
    std::fputs("partial", f);
    std::fclose(f);
    return dir.path() / name;
  };
  const auto dead = touch(".checkpoint-000000000003.ckpt.tmp." + std::to_string(child) + ".0");
  const auto own = touch(".latest.tmp." + std::to_string(::getpid()) + ".4");
  const auto live = touch(".model.pt.tmp." + std::to_string(::getppid()) + ".0");
  const auto other = touch("checkpoint-000000000001.ckpt");
  const auto removed = remove_stale_temporaries(dir.path());
  ASSERT_EQ(removed.size(), 1u);
  EXPECT_EQ(removed[0], dead);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(own));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(other));
}

// The writer: removes what an earlier kill left (as a run does at its start), checks the latest
// checkpoint loads, tells the test it is ready, then saves checkpoints back to back until killed.
[[noreturn]] void write_until_killed(const fs::path& dir, int ready_fd, const Checkpoint& payload) {
  int status = 0;
  try {
    CheckpointStore store(dir);
    const auto removed = store.remove_stale_temporaries();
    const auto latest = store.load_latest();
    std::int64_t step = latest ? latest->metadata().at("step").get<std::int64_t>() + 1 : 1;
    const char report = static_cast<char>('0' + std::min<std::size_t>(removed.size(), 9));
    if (::write(ready_fd, &report, 1) != 1) ::_exit(3);
    for (;; ++step) {
      Checkpoint checkpoint = payload;
      checkpoint.set_metadata({{"step", step}});
      checkpoint.set_tensor("step", torch::tensor({step}, torch::kInt64));
      store.save(checkpoint, step);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "writer: %s\n", e.what());
    status = 2;
  }
  ::_exit(status);
}

TEST(CheckpointKills, FiftyKillsMidWriteAlwaysLeaveALoadableCheckpointAndNoStaleTemporaries) {
  dtrain::testing::ScratchDir dir;
  // Built before any fork: the writers only serialize, and a forked child had better not start
  // torch's thread pools.
  Checkpoint payload;
  payload.set_tensor("model.weight", torch::zeros({1 << 16}));  // 256 KiB
  std::mt19937 random(20261124);
  std::uniform_int_distribution<int> delay_us(0, 30000);
  int killed_mid_write = 0;
  std::set<std::int64_t> steps_seen;
  std::vector<fs::path> left_by_last_kill;
  const auto start = std::chrono::steady_clock::now();
  for (int kill = 0; kill < 50; ++kill) {
    int ready[2];
    ASSERT_EQ(::pipe(ready), 0);
    const pid_t writer = ::fork();
    if (writer == 0) {
      ::close(ready[0]);
      write_until_killed(dir.path(), ready[1], payload);
    }
    ASSERT_GT(writer, 0);
    ::close(ready[1]);
    char report = 0;
    const bool started = ::read(ready[0], &report, 1) == 1;
    ::close(ready[0]);
    ASSERT_TRUE(started) << "writer " << kill << " died before it was ready";
    // The writer's start removed what the previous kill left.
    EXPECT_EQ(report - '0', static_cast<int>(left_by_last_kill.size())) << "kill " << kill;
    for (const auto& path : left_by_last_kill) EXPECT_FALSE(fs::exists(path)) << path;

    // The random moment: the fault, not a synchronisation.
    std::this_thread::sleep_for(std::chrono::microseconds(delay_us(random)));
    ASSERT_EQ(::kill(writer, SIGKILL), 0);
    int status = 0;
    ASSERT_EQ(::waitpid(writer, &status, 0), writer);
    ASSERT_TRUE(WIFSIGNALED(status)) << "writer " << kill << " exited with " << WEXITSTATUS(status);

    left_by_last_kill = temporaries_in(dir.path());
    killed_mid_write += left_by_last_kill.empty() ? 0 : 1;
    const auto latest = CheckpointStore(dir.path()).load_latest();
    if (!latest) {
      EXPECT_TRUE(steps_seen.empty()) << "kill " << kill << ": no checkpoint after an earlier one loaded";
      continue;
    }
    const auto step = latest->metadata().at("step").get<std::int64_t>();
    EXPECT_EQ(latest->tensor("step").item<std::int64_t>(), step);
    EXPECT_EQ(latest->tensor("model.weight").numel(), 1 << 16);
    EXPECT_EQ(latest->tensor("model.weight").abs().max().item<float>(), 0.0f);
    EXPECT_TRUE(steps_seen.empty() || step >= *steps_seen.rbegin()) << "the latest checkpoint went back";
    steps_seen.insert(step);
  }
  // The next start cleans the last kill's leftovers too.
  CheckpointStore(dir.path()).remove_stale_temporaries();
  EXPECT_TRUE(temporaries_in(dir.path()).empty());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "50 kills in %.2f s: %d mid-write (a temporary file left), %zu distinct latest steps, up to %lld\n",
      seconds, killed_mid_write, steps_seen.size(),
      steps_seen.empty() ? 0LL : static_cast<long long>(*steps_seen.rbegin()));
  EXPECT_GE(killed_mid_write, 5) << "too few kills landed inside a write to test it";
  // How far the writers get depends on the disk's speed; that some checkpoint was completed does not.
  EXPECT_FALSE(steps_seen.empty()) << "no writer completed a checkpoint in 50 runs";
}

}  // namespace
}  // namespace dtrain::io
