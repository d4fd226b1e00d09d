// A program's own data sets (data/UserDataset.h): read through get(i) into batches of the samples'
// own shape, normalised per feature, partitioned like any other; samples that disagree in shape or
// type and labels outside the classes are refused in one line naming the data set, split and sample.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

#include "dtrain/config/RunConfig.h"
#include "dtrain/data/Factory.h"
#include "dtrain/data/UserDataset.h"

namespace dtrain::data {
namespace {

// Sample i is `make(i)`, label i % 3.
class Listed final : public ExampleDataset {
 public:
  Listed(std::int64_t n, std::function<torch::Tensor(std::int64_t)> make) : n_(n), make_(std::move(make)) {}
  std::int64_t size() const override { return n_; }
  Example get(std::int64_t i) const override { return {make_(i), i % 3}; }

 private:
  std::int64_t n_;
  std::function<torch::Tensor(std::int64_t)> make_;
};

// Registers `name` (once per process) with training samples from `make` and 6 test samples like sample 0.
void register_listed(const std::string& name, std::int64_t classes,
                     std::function<torch::Tensor(std::int64_t)> make) {
  register_dataset({name, "a test's samples"}, [=](const config::DataConfig&) {
    auto test = std::make_shared<Listed>(6, [make](std::int64_t) { return make(0); });
    return ExampleSplits{std::make_shared<Listed>(12, make), test, classes};
  });
}

config::DataConfig data_of(const std::string& name) {
  config::DataConfig data;
  data.dataset = name;
  return data;
}

std::string refusal(const std::string& name) {
  try {
    load_datasets(data_of(name));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(nothing refused)";
}

TEST(UserDataset, FeatureVectorsKeepTheirShapeAndAreNormalisedPerFeature) {
  register_listed("features-test", 3, [](std::int64_t i) {
    return torch::tensor({static_cast<float>(i), 100.0f + 10 * static_cast<float>(i)});
  });
  const auto sets = load_datasets(data_of("features-test"));
  EXPECT_EQ(sets.train->input_shape(), (std::vector<std::int64_t>{2}));
  EXPECT_FALSE(sets.train->tokens());
  EXPECT_EQ(sets.train->size(), 12);
  const auto batch = sets.train_plain->get_batch(torch::arange(12, torch::kLong), 0);
  ASSERT_EQ(batch.inputs.sizes(), (std::vector<std::int64_t>{12, 2}));
  EXPECT_TRUE(batch.inputs.mean(0).abs().lt(1e-5).all().item<bool>()) << batch.inputs.mean(0);
  EXPECT_TRUE(torch::equal(batch.targets, torch::arange(12, torch::kLong).remainder(3)));
}

TEST(UserDataset, ImagesGetTheImageTransforms) {
  register_listed("images-test", 3, [](std::int64_t i) {
    return torch::full({1, 4, 4}, static_cast<float>(i));
  });
  auto data = data_of("images-test");
  data.horizontal_flip = true;
  data.random_crop_padding = 1;
  const auto sets = load_datasets(data);
  EXPECT_EQ(sets.train->input_shape(), (std::vector<std::int64_t>{1, 4, 4}));
  EXPECT_EQ(sets.train->get_batch(torch::arange(3, torch::kLong), 5).inputs.sizes(),
            (std::vector<std::int64_t>{3, 1, 4, 4}));
}

TEST(UserDataset, SamplesThatDisagreeAreRefusedNamingTheSample) {
  register_listed("ragged-test", 3, [](std::int64_t i) { return torch::zeros({i == 7 ? 3 : 2}); });
  EXPECT_EQ(
      refusal("ragged-test"),
      "data set ragged-test, training set: sample 7 has input [3] Float, but sample 0 has [2] Float; every "
      "sample needs one shape and type");
  register_listed("typed-test", 3,
                  [](std::int64_t i) { return torch::zeros({2}, i == 4 ? torch::kDouble : torch::kFloat); });
  EXPECT_NE(refusal("typed-test").find("sample 4 has input [2] Double"), std::string::npos);
  register_listed("labels-test", 2, [](std::int64_t) { return torch::zeros({2}); });
  EXPECT_EQ(refusal("labels-test"),
            "data set labels-test, training set: sample 2 has label 2, outside [0, 2) (its classes)");
}

TEST(UserDataset, CropsOfSamplesThatAreNotImagesAreRefused) {
  register_listed("vectors-test", 3, [](std::int64_t) { return torch::zeros({5}); });
  auto data = data_of("vectors-test");
  data.horizontal_flip = true;
  EXPECT_THROW(
      {
        try {
          load_datasets(data);
        } catch (const std::invalid_argument& e) {
          EXPECT_NE(std::string(e.what()).find("data.horizontal_flip"), std::string::npos) << e.what();
          throw;
        }
      },
      std::invalid_argument);
}

TEST(UserDataset, ANameIsRegisteredOnce) {
  register_listed("once-test", 3, [](std::int64_t) { return torch::zeros({2}); });
  EXPECT_THROW(register_listed("once-test", 3, [](std::int64_t) { return torch::zeros({2}); }),
               std::logic_error);
  EXPECT_THROW(register_listed("MNIST", 3, [](std::int64_t) { return torch::zeros({2}); }), std::logic_error);
}

}  // namespace
}  // namespace dtrain::data
