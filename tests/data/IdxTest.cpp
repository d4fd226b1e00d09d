// IDX reading: raw and gzip files round-trip, and every kind of malformed file is an error that
// names the file and what is wrong.
#include "DataTestUtil.h"
#include "dtrain/data/Idx.h"

#include <chrono>

#include "support/Files.h"

using namespace dtrain::data;
using namespace dtrain::data::testing;
using ::testing::HasSubstr;

class IdxRoundTrip : public ::testing::TestWithParam<bool> {};

TEST_P(IdxRoundTrip, ReadsImagesAndLabels) {
  TempDir dir;
  write_mnist(dir.str(), "train", 25, GetParam());
  write_mnist(dir.str(), "t10k", 7, GetParam());
  auto train = load_mnist(dir.str(), true);
  auto test = load_mnist(dir.str(), false);
  ASSERT_EQ(train.size(), 25);
  ASSERT_EQ(test.size(), 7);
  EXPECT_EQ(train.input_shape(), (std::vector<std::int64_t>{1, 28, 28}));
  EXPECT_EQ(train.num_classes(), 10);
  EXPECT_EQ(train.labels()[13].item<std::int64_t>(), 3);
  // Pixel (i + row) % 256 at sample 13, row 5.
  EXPECT_EQ(train.images()[13][0][5][0].item<int>(), 18);
  EXPECT_EQ(train.images().scalar_type(), torch::kUInt8);
}

INSTANTIATE_TEST_SUITE_P(RawAndGzip, IdxRoundTrip, ::testing::Values(false, true));

TEST(Idx, WrongMagicNamesFile) {
  TempDir dir;
  const std::string path = dir / "x-idx3";
  write_bytes(path, idx_bytes({4}, {1, 2, 3, 4}), false);  // a labels file where images are expected
  auto msg = error_of([&] { read_idx(path, 3); });
  EXPECT_THAT(msg, HasSubstr(path));
  EXPECT_THAT(msg, HasSubstr("wrong magic number"));
}

TEST(Idx, TruncatedRawAndGzip) {
  TempDir dir;
  for (bool gz : {false, true}) {
    const std::string path = dir / (gz ? "t.gz" : "t");
    auto bytes = idx_bytes({3, 2, 2}, std::vector<std::uint8_t>(12, 7));
    bytes.resize(bytes.size() - 5);
    write_bytes(path, bytes, gz);
    auto msg = error_of([&] { read_idx(path, 3); });
    EXPECT_THAT(msg, HasSubstr(path));
    EXPECT_THAT(msg, HasSubstr("truncated"));
    EXPECT_THAT(msg, HasSubstr("found 7"));
  }
}

TEST(Idx, HeaderPromisingMoreThanTheFileIsRefusedBeforeAllocating) {
  // A count of 4e9 images, or sizes whose product overflows 64 bits: an error naming the file,
  // not an attempt to allocate terabytes.
  TempDir dir;
  for (bool gz : {false, true}) {
    for (const auto& sizes : {std::vector<std::uint32_t>{4000000000u, 28, 28},
                              std::vector<std::uint32_t>{0xFFFFFFFFu, 0xFFFFFFFFu, 0xFFFFFFFFu}}) {
      const std::string path = dir / (gz ? "big.gz" : "big");
      write_bytes(path, idx_bytes(sizes, std::vector<std::uint8_t>(100, 1)), gz);
      const auto msg = error_of([&] { read_idx(path, 3); });
      EXPECT_THAT(msg, HasSubstr(path));
      EXPECT_THAT(msg, HasSubstr(gz ? "corrupt header" : "truncated"));
      EXPECT_THAT(msg, ::testing::Not(HasSubstr("allocate")));
    }
  }
}

TEST(Idx, TruncatedGzipStream) {
  TempDir dir;
  const std::string full = dir / "full.gz", cut = dir / "cut.gz";
  std::vector<std::uint8_t> data(5000);
  for (std::size_t i = 0; i < data.size(); ++i) data[i] = static_cast<std::uint8_t>(i * 7919 % 251);
  write_bytes(full, idx_bytes({5000}, data), true);
  const std::string z = dtrain::testing::read_file(full);
  std::ofstream(cut, std::ios::binary).write(z.data(), static_cast<std::streamsize>(z.size() / 2));
  auto msg = error_of([&] { read_idx(cut, 1); });
  EXPECT_THAT(msg, HasSubstr(cut));
  EXPECT_THAT(msg, ::testing::AnyOf(HasSubstr("truncated"), HasSubstr("corrupt")));
}

TEST(Idx, TrailingBytesAreAnError) {
  TempDir dir;
  const std::string path = dir / "long";
  write_bytes(path, idx_bytes({2}, {1, 2, 3}), false);
  EXPECT_THAT(error_of([&] { read_idx(path, 1); }), HasSubstr("longer than its header"));
}

TEST(Idx, LabelOutOfRange) {
  TempDir dir;
  write_mnist(dir.str(), "train", 5, false);
  const std::string labels = dir / "train-labels-idx1-ubyte";
  write_bytes(labels, idx_bytes({5}, {0, 1, 2, 12, 4}), false);
  auto msg = error_of([&] { load_mnist(dir.str(), true); });
  EXPECT_THAT(msg, HasSubstr(labels));
  EXPECT_THAT(msg, HasSubstr("label out of range"));
  EXPECT_THAT(msg, HasSubstr("sample 3 has label 12"));
}

TEST(Idx, CountMismatchNamesBothFiles) {
  TempDir dir;
  write_mnist(dir.str(), "train", 5, true);
  const std::string labels = dir / "train-labels-idx1-ubyte.gz";
  write_bytes(labels, idx_bytes({4}, {0, 1, 2, 3}), true);
  auto msg = error_of([&] { load_mnist(dir.str(), true); });
  EXPECT_THAT(msg, HasSubstr("count mismatch"));
  EXPECT_THAT(msg, HasSubstr(labels));
  EXPECT_THAT(msg, HasSubstr("train-images-idx3-ubyte.gz"));
}

TEST(Idx, MissingFileSaysHowToFix) {
  TempDir dir;
  auto msg = error_of([&] { load_mnist(dir.str(), true, "fashion-mnist"); });
  EXPECT_THAT(msg, HasSubstr("data.root: no file train-images-idx3-ubyte(.gz) in " + dir.str()));
  EXPECT_THAT(msg, HasSubstr("install dataset-fashion-mnist"));
}

TEST(Idx, DebianFashionMnist) {
  if (!std::filesystem::exists(std::string(kFashionMnistRoot) + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  const auto start = std::chrono::steady_clock::now();
  auto train = load_mnist(kFashionMnistRoot, true, "fashion-mnist");
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  auto test = load_mnist(kFashionMnistRoot, false, "fashion-mnist");
  EXPECT_EQ(train.size(), 60000);
  EXPECT_EQ(test.size(), 10000);
  EXPECT_EQ(train.num_classes(), 10);
  EXPECT_EQ(std::get<0>(at::_unique(train.labels())).size(0), 10);
  // Fashion-MNIST's published pixel mean and std (0.2860, 0.3530).
  EXPECT_NEAR(train.stats().mean[0], 0.2860, 1e-3);
  EXPECT_NEAR(train.stats().std[0], 0.3530, 1e-3);
  // Recorded, not asserted: speed is bench/'s to check, never a unit test's.
  RecordProperty("train_load_seconds", std::to_string(seconds));
}
