// The feed that hands the trainer its batches on the training device (Note [Copying batches
// ahead]): with 0 to 4 loader threads the same batches in the same order, augmentation included,
// over two epochs and after resuming mid-epoch; on a GPU (where one is at hand) the batches copied
// ahead from pinned memory equal the CPU's.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <vector>

#include "dtrain/data/Factory.h"
#include "dtrain/data/Partition.h"
#include "dtrain/train/DeviceFeed.h"

namespace dtrain::train {
namespace {

config::DataConfig augmented(int threads) {
  config::DataConfig c;
  c.dataset = "synthetic";
  c.synthetic_shape = {3, 8, 8};
  c.synthetic_classes = 4;
  c.synthetic_size = 200;
  c.batch_size = 16;
  c.random_crop_padding = 2;
  c.horizontal_flip = true;
  c.loader_threads = threads;
  return c;
}

// Every batch of epochs 0 and 1 (epoch 1 from step `resume_at`), on the CPU.
std::vector<data::Batch> batches(int threads, torch::Device device, std::int64_t resume_at = 0) {
  const auto c = augmented(threads);
  const auto sets = data::load_datasets(c);
  const auto shard = data::partition(0, 1, c, sets.train->labels(), 3);
  DeviceFeed feed(
      std::make_unique<StepFeed>(sets.train, std::vector<data::Shard>{shard}, c, 3, 1, device.is_cuda()),
      device);
  std::vector<data::Batch> out;
  for (std::int64_t epoch = 0; epoch < 2; ++epoch) {
    feed.start_epoch(epoch, epoch == 1 ? resume_at : 0);
    while (auto batch = feed.next()) {
      EXPECT_EQ(batch->inputs.device(), device);
      out.push_back({batch->inputs.to(torch::kCPU), batch->targets.to(torch::kCPU)});
    }
  }
  return out;
}

void expect_equal(const std::vector<data::Batch>& a, const std::vector<data::Batch>& b,
                  std::size_t offset = 0) {
  ASSERT_EQ(a.size() + offset, b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i].inputs, b[i + offset].inputs)) << "batch " << i;
    EXPECT_TRUE(torch::equal(a[i].targets, b[i + offset].targets)) << "batch " << i;
  }
}

TEST(DeviceFeed, AnyNumberOfLoaderThreadsGivesTheSameBatchesInOrder) {
  const auto reference = batches(0, torch::kCPU);
  ASSERT_EQ(reference.size(), 2u * (200 / 16));
  EXPECT_FALSE(
      torch::equal(reference[0].inputs, reference[200 / 16].inputs));  // reshuffled and augmented anew
  for (int threads = 1; threads <= 4; ++threads) {
    SCOPED_TRACE(threads);
    expect_equal(batches(threads, torch::kCPU), reference);
  }
}

TEST(DeviceFeed, ResumingMidEpochGivesTheRestOfThatEpoch) {
  const auto reference = batches(0, torch::kCPU);
  const auto resumed = batches(2, torch::kCPU, /*resume_at=*/5);
  const std::size_t per_epoch = 200 / 16;
  ASSERT_EQ(resumed.size(), reference.size() - 5);
  for (std::size_t i = per_epoch; i < resumed.size(); ++i) {
    EXPECT_TRUE(torch::equal(resumed[i].inputs, reference[i + 5].inputs)) << "batch " << i;
  }
}

TEST(DeviceFeed, AutoLoaderThreadsAreTwoOnAGpuAndNoneOnTheCpu) {
  EXPECT_EQ(data::loader_threads(augmented(-1), /*for_gpu=*/false), 0);
  EXPECT_EQ(data::loader_threads(augmented(-1), /*for_gpu=*/true), 2);
  EXPECT_EQ(data::loader_threads(augmented(3), /*for_gpu=*/true), 3);
}

TEST(DeviceFeed, BatchesCopiedAheadToTheGpuEqualTheCpusBatches) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no GPU";
  const auto reference = batches(0, torch::kCPU);
  for (int threads : {0, 2}) {
    SCOPED_TRACE(threads);
    expect_equal(batches(threads, torch::Device(torch::kCUDA, 0)), reference);
  }
}

}  // namespace
}  // namespace dtrain::train
