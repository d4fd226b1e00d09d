// `dtrain cam` end to end: a resnet18 trained for two steps on CIFAR-shaped synthetic data, its
// maps for test samples and an image file (files, PNG sizes, cam.json), and the one-line errors for
// a model without global average pooling, a missing run folder and a run without weights.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "cli/CliTestUtil.h"
#include "dtrain/data/ImageFolder.h"
#include "support/ScratchDir.h"

namespace {

namespace fs = std::filesystem;

using dtrain::testing::last_json_line;
using dtrain::testing::run;

class CamCommand : public ::testing::Test {
 protected:
  std::string config(const std::string& model) const {
    return "name: cam\n"
           "out_dir: " +
           (dir_ / "runs").string() +
           "\n"
           "nproc: 1\n"
           "data: {dataset: synthetic, synthetic_shape: [3, 16, 16], synthetic_classes: 4, synthetic_size: "
           "32,\n"
           "       batch_size: 8, test_subset_size: 8}\n"
           "model: {name: " +
           model +
           "}\n"
           "optim: {name: sgd, lr: 0.05}\n"
           "parallel: {strategy: local}\n"
           "train: {epochs: 1, max_steps: 2, log_every_steps: 100, seed: 1}\n";
  }

  dtrain::testing::ScratchDir dir_;
};

TEST_F(CamCommand, MapsOfATinyResNetRunAreWrittenAsPngs) {
  std::ofstream(dir_ / "resnet.yaml") << config("resnet18");
  const auto trained = run("train " + (dir_ / "resnet.yaml").string(), dir_.path());
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const fs::path run_dir = last_json_line(trained.out)["run_dir"].get<std::string>();

  // An image file of another size and channel layout: decoded, resized to 16x16.
  dtrain::data::write_image((dir_ / "picture.png").string(),
                            torch::randint(0, 256, {3, 40, 24}, torch::kLong).to(torch::kUInt8));
  const auto cam = run("cam " + run_dir.string() + " --test-index 0,3 --images " +
                           (dir_ / "picture.png").string() + " --classes top2",
                       dir_.path());
  ASSERT_EQ(cam.exit_code, 0) << cam.err;
  const auto summary = last_json_line(cam.out);
  EXPECT_EQ(summary["weights"], (run_dir / "model.pt").string());
  EXPECT_EQ(summary["feature_maps"], nlohmann::json({3, 512, 2, 2}));
  ASSERT_EQ(summary["images"].size(), 3u);
  EXPECT_EQ(summary["images"][0]["name"], "picture");
  EXPECT_EQ(summary["images"][1]["name"], "test0");
  for (const auto& image : summary["images"]) {
    ASSERT_EQ(image["classes"].size(), 2u);
    EXPECT_EQ(image["classes"][0]["class"], image["predicted"]);  // top2 starts with the prediction
    EXPECT_GE(image["classes"][0]["logit"].get<double>(), image["classes"][1]["logit"].get<double>());
    for (const auto& c : image["classes"]) {
      // 16x16 shown at 128 (x8): input | heat map | blend with 4-pixel gaps.
      const auto png = dtrain::data::decode_image(c["file"].get<std::string>());
      EXPECT_EQ(png.sizes(), (std::vector<std::int64_t>{3, 128, 3 * 128 + 2 * 4})) << c["file"];
    }
  }
  // Rows: images; columns: the input and one blend per class.
  const auto grid = dtrain::data::decode_image((run_dir / "cam" / "grid.png").string());
  EXPECT_EQ(grid.sizes(), (std::vector<std::int64_t>{3, 3 * 128 + 2 * 4, 3 * 128 + 2 * 4}));
  EXPECT_TRUE(fs::exists(run_dir / "cam" / "cam.json"));

  const auto bad_class = run("cam " + run_dir.string() + " --test-index 0 --classes 9", dir_.path());
  EXPECT_NE(bad_class.exit_code, 0);
  EXPECT_NE(bad_class.err.find("--classes: '9' is not a class of this run (0 to 3)"), std::string::npos)
      << bad_class.err;
}

TEST_F(CamCommand, RefusesModelsWithoutGlobalAveragePoolingAndMissingRuns) {
  fs::create_directories(dir_ / "lenet");
  std::ofstream(dir_ / "lenet" / "config.yaml") << config("lenet5");
  const auto lenet = run("cam " + (dir_ / "lenet").string() + " --test-index 0", dir_.path());
  EXPECT_EQ(lenet.exit_code, 2);
  EXPECT_EQ(
      lenet.err,
      "dtrain: error: model.name: lenet5 has no global average pooling before its classifier; CAM needs "
      "resnet18 or resnet50\n");

  const auto missing = run("cam " + (dir_ / "nothing").string() + " --test-index 0", dir_.path());
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find("RUN_DIR: " + (dir_ / "nothing").string() + ": no such folder"),
            std::string::npos)
      << missing.err;

  fs::create_directories(dir_ / "untrained");
  std::ofstream(dir_ / "untrained" / "config.yaml") << config("resnet18");
  const auto untrained = run("cam " + (dir_ / "untrained").string() + " --test-index 0", dir_.path());
  EXPECT_NE(untrained.exit_code, 0);
  EXPECT_NE(untrained.err.find("holds no model.pt and no checkpoint"), std::string::npos) << untrained.err;
}

}  // namespace
