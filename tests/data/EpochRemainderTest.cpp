// An epoch across a size change: at the same number of holders the rest is what each holder would
// have read; at another it is read once, in whole steps, the last samples by drop_last and equalize;
// a second change continues after what the first size read.
#include "DataTestUtil.h"
#include "dtrain/data/EpochRemainder.h"
#include "dtrain/data/Random.h"

#include <algorithm>
#include <map>

using namespace dtrain::data;

namespace {

constexpr std::uint64_t kSeed = 5;

std::vector<Shard> shards(int holders, std::int64_t n = 103) {
  PartitionOptions o;  // random: shares of 34/35 (3 holders), 51/52 (2), ...
  auto labels = torch::randint(0, 10, {n}, make_generator(3), torch::kLong);
  return partition_all(holders, o, labels, kSeed);
}

SamplerOptions sampler(bool drop_last, Equalize equalize = Equalize::pad) {
  SamplerOptions o;
  o.batch_size = 4;
  o.drop_last = drop_last;
  o.equalize = equalize;
  return o;
}

std::vector<std::int64_t> values(const torch::Tensor& t) {
  auto c = t.contiguous();
  return {c.data_ptr<std::int64_t>(), c.data_ptr<std::int64_t>() + c.numel()};
}

std::map<std::int64_t, int> counts(const std::vector<torch::Tensor>& parts) {
  std::map<std::int64_t, int> seen;
  for (const auto& p : parts)
    for (auto v : values(p)) ++seen[v];
  return seen;
}

}  // namespace

TEST(EpochRemainder, AtTheSameSizeEveryHolderReadsTheBatchesItWouldHaveRead) {
  for (bool drop_last : {true, false}) {
    const auto o = sampler(drop_last);
    const auto all = shards(3);
    const std::int64_t from = 3;
    RemainderDeal deal(unread_samples(all, o, kSeed, 2, from), 3, o);
    for (int h = 0; h < 3; ++h) {
      DistributedSampler s(all[static_cast<std::size_t>(h)], o, kSeed);
      const auto order = s.epoch_order(2);
      const auto end = std::min(order.size(0), s.batches_per_epoch() * o.batch_size);
      EXPECT_EQ(values(deal.indices(h)),
                values(order.narrow(0, from * o.batch_size, end - from * o.batch_size)))
          << "holder " << h << " drop_last " << drop_last;
      EXPECT_EQ(deal.steps(), s.batches_per_epoch() - from);
    }
  }
}

TEST(EpochRemainder, AtAnotherSizeEverySampleLeftIsReadOnceInWholeSteps) {
  const auto o = sampler(/*drop_last=*/true);
  const auto all = shards(3);
  const auto left = unread_samples(all, o, kSeed, 0, 2);
  // pad draws 35 samples a holder: 8 batches of 4, of which 2 are read.
  ASSERT_EQ(left.size(0), 3 * (8 - 2) * 4);
  for (int holders : {2, 4, 5}) {
    RemainderDeal deal(left, holders, o);
    const std::int64_t step = holders * o.batch_size;
    EXPECT_EQ(deal.steps(), left.size(0) / step);
    std::vector<torch::Tensor> parts;
    for (int h = 0; h < holders; ++h) {
      parts.push_back(deal.indices(h));
      EXPECT_EQ(parts.back().size(0), deal.steps() * o.batch_size);
    }
    // The first whole steps of what is left, each sample as often as it is left (pad repeats some).
    EXPECT_EQ(counts(parts), counts({left.narrow(0, 0, deal.steps() * step)})) << holders << " holders";
  }
}

TEST(EpochRemainder, TheLastSamplesFollowEqualize) {
  const auto left = torch::arange(30, torch::kLong);  // 2 whole steps of 3 x 4, then 6 samples
  {
    RemainderDeal pad(left, 3, sampler(false, Equalize::pad));
    EXPECT_EQ(pad.steps(), 3);
    EXPECT_EQ(pad.sizes(), (std::vector<std::int64_t>{10, 10, 10}));
    EXPECT_EQ(values(pad.indices(2)).back(), 29);
  }
  {
    RemainderDeal pad(torch::arange(25, torch::kLong), 3, sampler(false, Equalize::pad));
    // One left, ceil(1 / 3) each: the shortfall is taken again from the start.
    EXPECT_EQ(pad.sizes(), (std::vector<std::int64_t>{9, 9, 9}));
    EXPECT_EQ(values(pad.indices(0)).back(), 24);
    EXPECT_EQ(values(pad.indices(1)).back(), 0);
    EXPECT_EQ(values(pad.indices(2)).back(), 1);
  }
  {
    RemainderDeal drop(torch::arange(28, torch::kLong), 3, sampler(false, Equalize::drop));
    EXPECT_EQ(drop.sizes(), (std::vector<std::int64_t>{9, 9, 9}));  // 4 left: one each, one dropped
  }
  {
    RemainderDeal join(torch::arange(28, torch::kLong), 3, sampler(false, Equalize::none));
    EXPECT_EQ(join.sizes(), (std::vector<std::int64_t>{10, 9, 9}));
    EXPECT_EQ(counts({join.indices(0), join.indices(1), join.indices(2)}),
              counts({torch::arange(28, torch::kLong)}));
  }
  {
    RemainderDeal dropped(left, 3, sampler(true));
    EXPECT_EQ(dropped.steps(), 2);
    EXPECT_EQ(dropped.sizes(), (std::vector<std::int64_t>{8, 8, 8}));
  }
}

TEST(EpochRemainder, ASecondChangeContinuesAfterWhatTheFirstSizeRead) {
  const auto o = sampler(/*drop_last=*/false, Equalize::none);
  const auto all = shards(3);
  const auto left = unread_samples(all, o, kSeed, 1, 1);
  // 2 holders read 3 whole steps, then 4 holders read the rest.
  const std::int64_t read = 3 * 2 * o.batch_size;
  RemainderDeal first(left, 2, o), second(left.narrow(0, read, left.size(0) - read), 4, o);
  std::vector<torch::Tensor> parts;
  for (int h = 0; h < 2; ++h) parts.push_back(first.indices(h).narrow(0, 0, 3 * o.batch_size));
  for (int h = 0; h < 4; ++h) parts.push_back(second.indices(h));
  // Every sample of the epoch once: those read before the first change and the rest.
  std::vector<torch::Tensor> epoch = parts;
  for (const auto& s : all) {
    DistributedSampler sampler_of(s, o, kSeed);
    epoch.push_back(sampler_of.epoch_order(1).narrow(0, 0, std::min(o.batch_size, s.size())));
  }
  const auto seen = counts(epoch);
  EXPECT_EQ(static_cast<std::int64_t>(seen.size()), 103);
  for (const auto& [sample, n] : seen) EXPECT_EQ(n, 1) << "sample " << sample;
}
