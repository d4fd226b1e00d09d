// Choco-SGD's compressors: what each keeps of a vector, its message size, and that the receiver
// decodes exactly what the sender meant.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include "dtrain/parallel/decentralized/Compressor.h"

namespace dtrain::parallel {
namespace {

torch::Tensor vector_of(std::int64_t n) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(11);
  return torch::randn({n}, gen);
}

TEST(Compressor, IdentityIsExact) {
  const auto v = vector_of(100);
  Compressor c({CompressorKind::Identity, 0.1, 4}, 100, 1);
  EXPECT_EQ(c.message_bytes(), 400);
  EXPECT_TRUE(torch::equal(c.decode(c.encode(v, 0, 0), 0, 0), v));
}

TEST(Compressor, TopKKeepsTheLargestCoordinates) {
  const auto v = vector_of(1000);
  Compressor c({CompressorKind::TopK, 0.05, 4}, 1000, 1);
  EXPECT_EQ(c.message_bytes(), 8 * 50);
  const auto q = c.decode(c.encode(v, 3, 7), 3, 7);
  EXPECT_EQ(q.ne(0).sum().item<std::int64_t>(), 50);
  const auto kept = std::get<1>(v.abs().topk(50));
  EXPECT_TRUE(torch::equal(q.index_select(0, kept), v.index_select(0, kept)));
}

TEST(Compressor, RandomKSendsValuesOnlyAndTheReceiverRedrawsTheCoordinates) {
  const auto v = vector_of(1000);
  Compressor c({CompressorKind::RandomK, 0.1, 4}, 1000, 1);
  EXPECT_EQ(c.message_bytes(), 4 * 100);
  const auto q = c.decode(c.encode(v, 2, 5), 2, 5);
  const auto kept = q.ne(0);
  EXPECT_EQ(kept.sum().item<std::int64_t>(), 100);
  EXPECT_TRUE(torch::equal(q.masked_select(kept), v.masked_select(kept)));
  const auto other = c.decode(c.encode(v, 2, 6), 2, 6);  // another round, other coordinates
  EXPECT_FALSE(torch::equal(other.ne(0), kept));
}

TEST(Compressor, SignKeepsSignsAndTheMeanMagnitude) {
  const auto v = vector_of(1001);
  Compressor c({CompressorKind::Sign, 0.1, 4}, 1001, 1);
  EXPECT_EQ(c.message_bytes(), (1001 + 7) / 8 + 4);
  const auto q = c.decode(c.encode(v, 0, 0), 0, 0);
  EXPECT_TRUE(torch::equal(q.sign(), v.sign()));
  EXPECT_NEAR(q.abs().mean().item<double>(), v.abs().mean().item<double>(), 1e-5);
}

TEST(Compressor, QbitIsAContractionWithinItsLevels) {
  const std::int64_t n = 4096;
  const auto v = vector_of(n);
  for (int bits : {1, 2, 4, 7}) {
    Compressor c({CompressorKind::QBit, 0.1, bits}, n, 1);
    EXPECT_EQ(c.message_bytes(), (n * (bits + 1) + 7) / 8 + 4);
    const auto q = c.decode(c.encode(v, 1, 1), 1, 1);
    // Signs agree wherever a coordinate survives, and |v - Q(v)| < |v| (contractive).
    const auto nonzero = q.ne(0);
    EXPECT_TRUE(torch::equal(q.masked_select(nonzero).sign(), v.masked_select(nonzero).sign())) << bits;
    EXPECT_LT((v - q).norm().item<double>(), v.norm().item<double>()) << bits;
  }
}

}  // namespace
}  // namespace dtrain::parallel
