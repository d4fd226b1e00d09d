// CIFAR-10/100 binary reading, and its malformed-file errors.
#include "DataTestUtil.h"
#include "dtrain/data/Cifar.h"

using namespace dtrain::data;
using namespace dtrain::data::testing;
using ::testing::HasSubstr;

namespace {
// `n` records; record i has label(s) i % classes and every pixel of channel c equal to i + c.
std::vector<std::uint8_t> cifar_records(int n, int classes) {
  std::vector<std::uint8_t> out;
  for (int i = 0; i < n; ++i) {
    if (classes == 100) out.push_back(static_cast<std::uint8_t>(i % 20));  // coarse label
    out.push_back(static_cast<std::uint8_t>(i % classes));
    for (int c = 0; c < 3; ++c) out.insert(out.end(), 1024, static_cast<std::uint8_t>(i + c));
  }
  return out;
}
}  // namespace

TEST(Cifar, Cifar10TrainAndTest) {
  TempDir dir;
  for (int b = 1; b <= 5; ++b)
    write_bytes(dir / ("data_batch_" + std::to_string(b) + ".bin"), cifar_records(4, 10), false);
  write_bytes(dir / "test_batch.bin", cifar_records(3, 10), false);
  auto train = load_cifar(dir.str(), 10, true);
  auto test = load_cifar(dir.str(), 10, false);
  EXPECT_EQ(train.size(), 20);
  EXPECT_EQ(test.size(), 3);
  EXPECT_EQ(train.input_shape(), (std::vector<std::int64_t>{3, 32, 32}));
  EXPECT_EQ(train.labels()[7].item<std::int64_t>(), 3);  // record 3 of batch 2
  EXPECT_EQ(train.images()[7][2][31][31].item<int>(), 5);
}

TEST(Cifar, Cifar100UsesFineLabelsAndUnpackedFolder) {
  TempDir dir;
  std::filesystem::create_directories(dir / "cifar-100-binary");
  write_bytes(dir / "cifar-100-binary/train.bin", cifar_records(150, 100), false);
  write_bytes(dir / "cifar-100-binary/test.bin", cifar_records(2, 100), false);
  auto train = load_cifar(dir.str(), 100, true);
  EXPECT_EQ(train.size(), 150);
  EXPECT_EQ(train.num_classes(), 100);
  EXPECT_EQ(train.labels()[120].item<std::int64_t>(), 20);
}

TEST(Cifar, TruncatedFileNamed) {
  TempDir dir;
  auto bytes = cifar_records(3, 10);
  bytes.resize(bytes.size() - 100);
  const std::string path = dir / "test_batch.bin";
  write_bytes(path, bytes, false);
  auto msg = error_of([&] { load_cifar(dir.str(), 10, false); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("truncated"));
}

TEST(Cifar, EmptyFileNamed) {
  TempDir dir;
  const std::string path = dir / "test_batch.bin";
  write_bytes(path, {}, false);
  auto msg = error_of([&] { load_cifar(dir.str(), 10, false); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("empty"));
}

TEST(Cifar, LabelOutOfRangeNamed) {
  TempDir dir;
  auto bytes = cifar_records(3, 10);
  bytes[3073] = 42;  // label of record 1
  const std::string path = dir / "test_batch.bin";
  write_bytes(path, bytes, false);
  auto msg = error_of([&] { load_cifar(dir.str(), 10, false); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("record 1 has label 42"));
}

TEST(Cifar, MissingFileSaysHowToFix) {
  TempDir dir;
  EXPECT_THAT(error_of([&] { load_cifar(dir.str(), 10, true); }),
              HasSubstr("data.root: no file data_batch_1.bin in " + dir.str()));
}
