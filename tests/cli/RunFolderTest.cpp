// What a run folder says about the run: a run refused for its data leaves results.json saying it
// failed, with the error and exit status, and no metrics or TensorBoard files; a finished run's
// results.json says finished.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/CliTestUtil.h"
#include "dtrain/io/JsonFile.h"
#include "support/ScratchDir.h"

namespace {

namespace fs = std::filesystem;

using dtrain::testing::last_json_line;
using dtrain::testing::run;

TEST(RunFolder, ARunRefusedForItsDataSaysItFailedAndLeavesNoMetrics) {
  dtrain::testing::ScratchDir dir;
  const auto images = dir.path() / "images";
  fs::create_directories(images / "a");
  fs::create_directories(images / "b");  // a class folder without images
  std::ofstream(images / "a" / "1.png") << "not read: the empty class is refused first";
  const auto cfg = dir.path() / "run.yaml";
  std::ofstream(cfg) << "name: f\nout_dir: " << (dir.path() / "runs").string()
                     << "\nnproc: 1\ndata: {dataset: image-folder, root: " << images.string()
                     << ", image_size: 8, batch_size: 2}\nmodel: {name: mlp}\nparallel: {strategy: local}\n";
  const auto failed = run("train " + cfg.string(), dir.path());
  ASSERT_EQ(failed.exit_code, 2) << failed.err;
  std::vector<fs::path> folders(fs::directory_iterator(dir.path() / "runs"), fs::directory_iterator{});
  ASSERT_EQ(folders.size(), 1u);
  const auto results = dtrain::io::read_json_file(folders[0] / "results.json");
  EXPECT_EQ(results["status"], "failed");
  EXPECT_EQ(results["exit_code"], 2);
  EXPECT_NE(results["error"].get<std::string>().find((images / "b").string() + " holds no .png/.jpg images"),
            std::string::npos)
      << results;
  for (const auto& entry : fs::directory_iterator(folders[0])) {
    const auto name = entry.path().filename().string();
    EXPECT_TRUE(name.rfind("metrics", 0) != 0 && name.rfind("events.out.tfevents", 0) != 0) << name;
  }

  // A run that trains to its end says finished.
  const auto tiny = dir.path() / "tiny.yaml";
  std::ofstream(tiny)
      << "name: t\nout_dir: " << (dir.path() / "runs").string()
      << "\nnproc: 1\ndata: {dataset: synthetic, synthetic_shape: [1, 4, 4], synthetic_size: 32, "
         "batch_size: 8}\nmodel: {name: mlp, hidden: [8]}\nparallel: {strategy: local}\n";
  const auto finished = run("train " + tiny.string(), dir.path());
  ASSERT_EQ(finished.exit_code, 0) << finished.err;
  EXPECT_EQ(last_json_line(finished.out)["status"], "finished");
}

}  // namespace
