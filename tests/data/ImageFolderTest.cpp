// The image-folder reader: PNG and JPEG decoding, class folders, resizing, splits.
#include "DataTestUtil.h"
#include "dtrain/data/ImageFolder.h"

#include <zlib.h>

#include <fstream>
#include <iterator>

#include "support/Files.h"

using namespace dtrain::data;
using namespace dtrain::data::testing;
using ::testing::HasSubstr;

namespace {
torch::Tensor gradient_image(int h, int w, int shift) {
  auto rows = torch::arange(h).view({h, 1}).expand({h, w});
  auto cols = torch::arange(w).view({1, w}).expand({h, w});
  return torch::stack(
             {(rows * 4 + shift) % 256, (cols * 4 + shift) % 256, torch::full({h, w}, shift, torch::kLong)})
      .to(torch::kUInt8);
}
}  // namespace

TEST(ImageFolder, PngDecodesExactly) {
  TempDir dir;
  auto img = gradient_image(10, 12, 30);
  write_png(dir / "a.png", img);
  EXPECT_TRUE(torch::equal(decode_image(dir / "a.png"), img));
}

TEST(ImageFolder, JpegDecodesClosely) {
  TempDir dir;
  auto img = gradient_image(16, 24, 60);
  write_jpeg(dir / "a.JPG", img);
  auto back = decode_image(dir / "a.JPG");
  ASSERT_EQ(back.sizes(), img.sizes());
  EXPECT_LT((back.to(torch::kFloat) - img.to(torch::kFloat)).abs().mean().item<float>(), 4.0f);
}

TEST(ImageFolder, CorruptFilesAreNamed) {
  TempDir dir;
  write_bytes(dir / "bad.png", {1, 2, 3, 4}, false);
  write_bytes(dir / "bad.jpg", {0xff, 0xd8, 0xff, 0x00, 9, 9}, false);
  EXPECT_THAT(error_of([&] { decode_image(dir / "bad.png"); }), HasSubstr(dir / "bad.png"));
  EXPECT_THAT(error_of([&] { decode_image(dir / "bad.jpg"); }), HasSubstr(dir / "bad.jpg"));
}

// A header claiming more pixels than kMaxImagePixels is refused naming the file, before the decoder
// allocates (a 10^6 x 10^6 PNG would ask for 3 TB; JPEG's 16-bit sizes for up to 12 GB).
TEST(ImageFolder, HugeHeadersAreRefusedBeforeAllocating) {
  TempDir dir;
  const auto img = gradient_image(8, 8, 10);
  const auto patched = [&](const std::string& name, auto patch) {
    const std::string path = dir / name;
    std::string bytes = dtrain::testing::read_file(path);
    patch(bytes);
    dtrain::testing::write_file(path, bytes);
    return path;
  };
  const auto be32 = [](std::string& b, std::size_t at, std::uint32_t v) {
    for (int i = 0; i < 4; ++i) b[at + i] = static_cast<char>(v >> (24 - 8 * i));
  };
  write_png(dir / "huge.png", img);
  const auto png = patched("huge.png", [&](std::string& b) {
    be32(b, 16, 1000000);  // IHDR width and height, then its CRC over type and data
    be32(b, 20, 1000000);
    be32(b, 29, static_cast<std::uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(b.data() + 12), 17)));
  });
  EXPECT_THAT(error_of([&] { decode_image(png); }),
              HasSubstr(png + ": the PNG header claims 1000000 x 1000000 pixels"));
  write_jpeg(dir / "huge.jpg", img);
  const auto jpg = patched("huge.jpg", [&](std::string& b) {
    const auto sof = b.find("\xff\xc0");  // baseline frame header: length(2) precision(1) height(2) width(2)
    ASSERT_NE(sof, std::string::npos);
    b[sof + 5] = b[sof + 7] = static_cast<char>(0xfd);
    b[sof + 6] = b[sof + 8] = static_cast<char>(0xe8);
  });
  EXPECT_THAT(error_of([&] { decode_image(jpg); }), HasSubstr("claims 65000 x 65000 pixels"));
}

TEST(ImageFolder, TrainTestLayoutResizedWithSortedClasses) {
  TempDir dir;
  for (const std::string split : {"train", "test"}) {
    for (const std::string cls : {"dog", "cat"}) {
      std::filesystem::create_directories(dir / (split + "/" + cls));
      const int n = split == "train" ? 3 : 1;
      for (int i = 0; i < n; ++i) {
        const int shift = cls == "cat" ? 0 : 200;
        const std::string stem = dir / (split + "/" + cls + "/" + std::to_string(i));
        if (i % 2 == 0) {
          write_png(stem + ".png", gradient_image(20 + i, 30, shift));
        } else {
          write_jpeg(stem + ".jpeg", gradient_image(40, 20, shift));
        }
      }
    }
  }
  write_bytes(dir / "train/cat/notes.txt", {1}, false);  // ignored: not an image
  auto train = load_image_folder(dir.str(), 8, true);
  auto test = load_image_folder(dir.str(), 8, false);
  ASSERT_EQ(train.size(), 6);
  ASSERT_EQ(test.size(), 2);
  EXPECT_EQ(train.input_shape(), (std::vector<std::int64_t>{3, 8, 8}));
  EXPECT_EQ(train.num_classes(), 2);
  // "cat" sorts first: class 0, blue channel 0; "dog" class 1, blue channel 200.
  auto labels = train.labels();
  auto blue = train.images().select(1, 2).to(torch::kFloat).mean({1, 2});
  for (int i = 0; i < 6; ++i) {
    EXPECT_NEAR(blue[i].item<float>(), labels[i].item<std::int64_t>() == 0 ? 0.0f : 200.0f, 3.0f);
  }
}

TEST(ImageFolder, FlatLayoutHoldsOutEveryTenth) {
  TempDir dir;
  for (const std::string cls : {"a", "b"}) {
    std::filesystem::create_directories(dir / cls);
    for (int i = 0; i < 10; ++i)
      write_png(dir / (cls + "/" + std::to_string(i) + ".png"), gradient_image(4, 4, i));
  }
  EXPECT_EQ(load_image_folder(dir.str(), 4, true).size(), 18);
  EXPECT_EQ(load_image_folder(dir.str(), 4, false).size(), 2);
}

TEST(ImageFolder, ExportedSetReadsBackExactly) {
  TempDir dir;
  torch::manual_seed(3);
  const auto images = torch::randint(0, 256, {12, 1, 9, 9}, torch::kLong).to(torch::kUInt8);
  const auto labels = torch::arange(12, torch::kLong).remainder(3);
  const ImageDataset set("grey", images, labels, 3);
  EXPECT_EQ(export_image_folder(set, dir / "out", 10, "png"), 10);
  EXPECT_TRUE(std::filesystem::exists(dir / "out/2/5.png"));
  const auto back = read_image_folder(dir / "out", {"0", "1", "2"}, 9, "back");
  ASSERT_EQ(back.size(), 10);
  // Files are read class by class; every exported image is found, grey expanded to RGB.
  for (std::int64_t i = 0; i < back.size(); ++i) {
    const auto rgb = back.images()[i];
    EXPECT_TRUE(torch::equal(rgb[0], rgb[2]));
    bool found = false;
    for (std::int64_t j = 0; j < 10 && !found; ++j) {
      found = labels[j].item<std::int64_t>() == back.labels()[i].item<std::int64_t>() &&
              torch::equal(images[j][0], rgb[0]);
    }
    EXPECT_TRUE(found) << "image " << i;
  }
  EXPECT_THAT(error_of([&] { export_image_folder(set, dir / "bad", 1, "gif"); }), HasSubstr("gif"));
  EXPECT_THAT(error_of([&] { write_image(dir / "x.bmp", images[0]); }), HasSubstr("x.bmp"));
  const ImageDataset floats("floats", torch::rand({2, 1, 4, 4}), torch::zeros({2}, torch::kLong), 1);
  EXPECT_THAT(error_of([&] { export_image_folder(floats, dir / "f", 0, "png"); }), HasSubstr("uint8"));
}

TEST(ImageFolder, ClassFoldersAreTrainAndTestOrValOrTheRootItself) {
  TempDir dir;
  std::filesystem::create_directories(dir / "flat/a");
  EXPECT_EQ(class_folders(dir / "flat"), (std::vector<std::string>{dir / "flat"}));
  std::filesystem::create_directories(dir / "split/train/a");
  EXPECT_EQ(class_folders(dir / "split"), (std::vector<std::string>{dir / "split/train"}));
  std::filesystem::create_directories(dir / "split/val/a");
  EXPECT_EQ(class_folders(dir / "split"), (std::vector<std::string>{dir / "split/train", dir / "split/val"}));
  std::filesystem::create_directories(dir / "split/test/a");  // test/ is read before val/
  EXPECT_EQ(class_folders(dir / "split"),
            (std::vector<std::string>{dir / "split/train", dir / "split/test"}));
}
