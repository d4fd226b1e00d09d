// Transfer learning through `dtrain train`: a run initialised from another run's model.pt logs
// what it loaded and froze, and its resume continues from its own checkpoint without reading
// model.init_from again (the source may be gone by then).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/CliTestUtil.h"
#include "support/Files.h"
#include "support/ScratchDir.h"

namespace {

namespace fs = std::filesystem;

using dtrain::testing::last_json_line;
using dtrain::testing::read_file;
using dtrain::testing::run;

class TransferCommand : public ::testing::Test {
 protected:
  fs::path write_config(const std::string& name, const std::string& extra) {
    const auto path = dir_ / name;
    std::ofstream(path) << "name: " << name.substr(0, name.find('.')) << "\n"
                        << "out_dir: " << (dir_ / "runs").string() << "\n"
                        << "nproc: 1\n"
                        << "data: {dataset: synthetic, synthetic_shape: [1, 8, 8], synthetic_classes: 4,\n"
                        << "       synthetic_size: 128, batch_size: 16, test_subset_size: 32}\n"
                        << "model: {name: mlp, hidden: [16]" << extra << "}\n"
                        << "optim: {name: sgd, lr: 0.1, momentum: 0.9}\n"
                        << "parallel: {strategy: local}\n"
                        << "train: {epochs: 1, log_every_steps: 100, checkpoint_every_epochs: 1, seed: 3}\n";
    return path;
  }

  dtrain::testing::ScratchDir dir_;
};

TEST_F(TransferCommand, FineTuneLogsTheTransferAndResumesWithoutTheSource) {
  const auto source_cfg = write_config("source.yaml", "");
  const auto source = run("train " + source_cfg.string(), dir_.path());
  ASSERT_EQ(source.exit_code, 0) << source.err;
  const fs::path source_dir = last_json_line(source.out)["run_dir"].get<std::string>();
  ASSERT_TRUE(fs::exists(source_dir / "model.pt"));

  const auto tune_cfg =
      write_config("tune.yaml", ", init_from: " + source_dir.string() + ", freeze: [\"layers.1.*\"]");
  const auto tune = run("train " + tune_cfg.string(), dir_.path());
  ASSERT_EQ(tune.exit_code, 0) << tune.err;
  const fs::path tune_dir = last_json_line(tune.out)["run_dir"].get<std::string>();
  const std::string text = read_file(tune_dir / "site_0" / "log.txt");
  EXPECT_NE(text.find("model.init_from: 4 of the model's tensors loaded from " +
                      (source_dir / "model.pt").string()),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("model.freeze: 2 parameter tensor(s) frozen: layers.1.weight, layers.1.bias"),
            std::string::npos)
      << text;

  // The source is gone: a resume must take the weights from its own checkpoint.
  fs::remove_all(source_dir);
  const auto resumed =
      run("train " + tune_cfg.string() + " train.epochs=2 --resume " + tune_dir.string(), dir_.path());
  ASSERT_EQ(resumed.exit_code, 0) << resumed.err;
  EXPECT_EQ(last_json_line(resumed.out)["steps"], 2 * 128 / 16);

  // Without a resume the missing source is a one-line error naming the key.
  const auto again = run("train " + tune_cfg.string(), dir_.path());
  EXPECT_NE(again.exit_code, 0);
  EXPECT_NE(again.err.find("model.init_from: " + source_dir.string() + ": no such file or folder"),
            std::string::npos)
      << again.err;
}

}  // namespace
