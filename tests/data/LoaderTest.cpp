// The loader: threaded prefetch yields exactly the batches of the single-threaded loader, in the
// same order, and resuming at a saved position continues the same sequence.
#include "DataTestUtil.h"
#include "dtrain/data/Loader.h"
#include "dtrain/data/Synthetic.h"

using namespace dtrain::data;

namespace {

std::shared_ptr<ImageDataset> dataset() {
  SyntheticOptions o;
  o.shape = {3, 8, 8};
  o.size = 300;
  auto ds = std::make_shared<ImageDataset>(make_synthetic(o));
  ImageTransformOptions t;
  t.random_crop_padding = 2;
  t.horizontal_flip = true;
  ds->set_transform(t);
  return ds;
}

std::vector<Batch> epoch(Loader& loader, std::int64_t e, std::int64_t first = 0) {
  loader.start_epoch(e, first);
  std::vector<Batch> out;
  while (auto b = loader.next()) out.push_back(std::move(*b));
  return out;
}

void expect_same(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i].inputs, b[i].inputs)) << "batch " << i;
    EXPECT_TRUE(torch::equal(a[i].targets, b[i].targets)) << "batch " << i;
  }
}

}  // namespace

TEST(Loader, ThreadsGiveIdenticalBatches) {
  auto ds = dataset();
  SamplerOptions o;
  o.batch_size = 16;
  o.drop_last = false;
  auto shard = partition(1, 2, PartitionOptions{}, ds->labels(), 5);
  Loader serial(ds, DistributedSampler(shard, o, 9), LoaderOptions{0, 0});
  auto reference = epoch(serial, 1);
  ASSERT_EQ(reference.size(), 10u);  // 150 samples, batches of 16, last one partial
  EXPECT_EQ(reference.back().size(), 6);
  for (int threads : {1, 3}) {
    for (int prefetch : {0, 4}) {
      Loader threaded(ds, DistributedSampler(shard, o, 9), LoaderOptions{threads, prefetch});
      expect_same(epoch(threaded, 1), reference);
    }
  }
  // Another epoch is another order.
  EXPECT_FALSE(torch::equal(epoch(serial, 2)[0].targets, reference[0].targets));
}

TEST(Loader, ResumesMidEpoch) {
  auto ds = dataset();
  SamplerOptions o;
  o.batch_size = 32;
  Loader loader(ds, DistributedSampler(whole(ds->size()), o, 3), LoaderOptions{2, 2});
  auto full = epoch(loader, 4);
  loader.start_epoch(4);
  loader.next();
  loader.next();
  const SamplerPosition at = loader.position();
  EXPECT_EQ(at.epoch, 4);
  EXPECT_EQ(at.batch, 2);
  Loader fresh(ds, DistributedSampler(whole(ds->size()), o, 3), LoaderOptions{0, 0});
  auto rest = epoch(fresh, at.epoch, at.batch);
  expect_same(rest, std::vector<Batch>(full.begin() + 2, full.end()));
}

TEST(Loader, StopsEarlyWithoutHanging) {
  auto ds = dataset();
  SamplerOptions o;
  o.batch_size = 8;
  Loader loader(ds, DistributedSampler(whole(ds->size()), o, 3), LoaderOptions{2, 1});
  loader.start_epoch(0);
  ASSERT_TRUE(loader.next().has_value());
  loader.start_epoch(1);  // abandons epoch 0 with batches in flight
  std::int64_t count = 0;
  while (loader.next()) ++count;
  EXPECT_EQ(count, loader.batches_per_epoch());
}
