// Transforms: crop and flip are fixed by the batch seed and do what they say; normalisation uses
// the data set's statistics.
#include "DataTestUtil.h"
#include "dtrain/data/Dataset.h"
#include "dtrain/data/Random.h"

using namespace dtrain::data;

namespace {
ImageDataset ramp_dataset() {
  // 16 images (1, 6, 6) of value 10*col + row + sample, all distinct within an image.
  auto rows = torch::arange(6).view({1, 1, 6, 1});
  auto cols = torch::arange(6).view({1, 1, 1, 6});
  auto n = torch::arange(16).view({16, 1, 1, 1});
  auto images = (cols * 10 + rows + n).to(torch::kUInt8);
  return ImageDataset("ramp", images, torch::arange(16, torch::kLong) % 2, 2);
}
}  // namespace

TEST(Transforms, FlipMirrorsSomeSamplesDeterministically) {
  auto ds = ramp_dataset();
  ImageTransformOptions t;
  t.normalize = false;
  t.horizontal_flip = true;
  ds.set_transform(t);
  auto idx = torch::arange(16, torch::kLong);
  auto a = ds.get_batch(idx, 7).inputs, b = ds.get_batch(idx, 7).inputs, c = ds.get_batch(idx, 8).inputs;
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_FALSE(torch::equal(a, c));
  auto plain = ds.images().to(torch::kFloat) / 255.0;
  int flipped = 0;
  for (int i = 0; i < 16; ++i) {
    const bool same = torch::allclose(a[i], plain[i]);
    const bool mirrored = torch::allclose(a[i], plain[i].flip({2}));
    EXPECT_TRUE(same != mirrored) << "sample " << i;
    flipped += mirrored;
  }
  EXPECT_GT(flipped, 0);
  EXPECT_LT(flipped, 16);
}

TEST(Transforms, CropIsAShiftedWindowOfThePaddedImage) {
  auto ds = ramp_dataset();
  ImageTransformOptions t;
  t.normalize = false;
  t.random_crop_padding = 2;
  ds.set_transform(t);
  auto idx = torch::arange(16, torch::kLong);
  auto a = ds.get_batch(idx, 3).inputs;
  EXPECT_TRUE(torch::equal(a, ds.get_batch(idx, 3).inputs));
  EXPECT_FALSE(torch::equal(a, ds.get_batch(idx, 4).inputs));
  auto padded = torch::constant_pad_nd(ds.images().to(torch::kFloat) / 255.0, {2, 2, 2, 2}, 0.0);
  for (int i = 0; i < 16; ++i) {
    bool found = false;
    for (int dy = 0; dy <= 4 && !found; ++dy) {
      for (int dx = 0; dx <= 4 && !found; ++dx) {
        found = torch::equal(a[i], padded[i].narrow(1, dy, 6).narrow(2, dx, 6));
      }
    }
    EXPECT_TRUE(found) << "sample " << i << " is not a 6x6 window of the padded image";
  }
}

TEST(Transforms, NormalizeGivesZeroMeanUnitStd) {
  auto gen = make_generator(1);
  auto images = (torch::rand({200, 3, 4, 4}, gen) * 255).to(torch::kUInt8);
  ImageDataset ds("rand", images, torch::zeros({200}, torch::kLong), 1);
  auto x = ds.get_batch(torch::arange(200, torch::kLong), 0).inputs;
  EXPECT_EQ(x.scalar_type(), torch::kFloat);
  auto mean = x.mean({0, 2, 3}), std = x.std({0, 2, 3}, /*unbiased=*/false);
  EXPECT_TRUE(torch::allclose(mean, torch::zeros({3}), 0, 1e-4)) << mean;
  EXPECT_TRUE(torch::allclose(std, torch::ones({3}), 0, 1e-4)) << std;
}
