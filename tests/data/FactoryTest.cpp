// The factory: every data set by name from config::DataConfig, subsets, test normalised with the
// training statistics, clear errors for unknown names and missing files.
#include "DataTestUtil.h"
#include "dtrain/data/Factory.h"
#include "dtrain/data/TextDataset.h"

using namespace dtrain::data;
using namespace dtrain::data::testing;
using dtrain::config::DataConfig;
using ::testing::HasSubstr;

TEST(Factory, SyntheticTrainTestAndLoaders) {
  DataConfig c;
  c.dataset = "synthetic";
  c.synthetic_shape = {3, 8, 8};
  c.synthetic_classes = 4;
  c.synthetic_size = 200;
  c.batch_size = 16;
  c.eval_batch_size = 50;
  auto sets = load_datasets(c);
  EXPECT_EQ(sets.train->size(), 200);
  EXPECT_EQ(sets.test->size(), 40);
  EXPECT_EQ(sets.train->num_classes(), 4);
  EXPECT_EQ(sets.train->input_shape(), (std::vector<std::int64_t>{3, 8, 8}));
  // Same config, same data: every rank loads identical sets.
  EXPECT_TRUE(torch::equal(dynamic_cast<const ImageDataset&>(*sets.train).images(),
                           dynamic_cast<const ImageDataset&>(*load_datasets(c).train).images()));
  EXPECT_EQ(sets.test->stats().mean, sets.train->stats().mean);

  auto shard = partition(0, 2, c, sets.train->labels(), 1);
  auto loader = make_train_loader(sets.train, shard, c, 1);
  EXPECT_EQ(loader->batches_per_epoch(), 100 / 16);
  loader->start_epoch(0);
  auto batch = loader->next();
  ASSERT_TRUE(batch);
  EXPECT_EQ(batch->inputs.sizes(), (std::vector<std::int64_t>{16, 3, 8, 8}));
  EXPECT_EQ(batch->inputs.scalar_type(), torch::kFloat);
  EXPECT_EQ(batch->targets.scalar_type(), torch::kLong);

  // Evaluation parts of two ranks cover the test set once.
  std::int64_t seen = 0;
  for (int r = 0; r < 2; ++r) {
    auto eval = make_eval_loader(sets.test, c, r, 2);
    eval->start_epoch(0);
    while (auto b = eval->next()) seen += b->size();
  }
  EXPECT_EQ(seen, 40);
}

TEST(Factory, SubsetsAndAugmentationOnlyOnTrain) {
  DataConfig c;
  c.dataset = "synthetic";
  c.synthetic_size = 100;
  c.subset_size = 30;
  c.test_subset_size = 7;
  c.horizontal_flip = true;
  c.random_crop_padding = 4;
  auto sets = load_datasets(c);
  EXPECT_EQ(sets.train->size(), 30);
  EXPECT_EQ(sets.test->size(), 7);
  auto idx = torch::arange(30, torch::kLong);
  EXPECT_FALSE(torch::equal(sets.train->get_batch(idx, 1).inputs, sets.train->get_batch(idx, 2).inputs));
  EXPECT_TRUE(
      torch::equal(sets.train_plain->get_batch(idx, 1).inputs, sets.train_plain->get_batch(idx, 2).inputs));
  auto t = torch::arange(7, torch::kLong);
  EXPECT_TRUE(torch::equal(sets.test->get_batch(t, 1).inputs, sets.test->get_batch(t, 2).inputs));
}

TEST(Factory, MnistFromRoot) {
  TempDir dir;
  write_mnist(dir.str(), "train", 40, true);
  write_mnist(dir.str(), "t10k", 10, false);
  DataConfig c;
  c.dataset = "mnist";
  c.root = dir.str();
  auto sets = load_datasets(c);
  EXPECT_EQ(sets.train->size(), 40);
  EXPECT_EQ(sets.test->size(), 10);
}

TEST(Factory, EmptySplitIsAnErrorNamingIt) {
  // Well-formed files holding no samples: an error, not a run that evaluates nothing as zeros.
  for (const bool empty_train : {true, false}) {
    TempDir dir;
    write_mnist(dir.str(), "train", empty_train ? 0 : 20, false);
    write_mnist(dir.str(), "t10k", empty_train ? 5 : 0, false);
    DataConfig c;
    c.dataset = "mnist";
    c.root = dir.str();
    const auto msg = error_of([&] { load_datasets(c); });
    EXPECT_THAT(msg, HasSubstr(empty_train ? "the training set mnist/train has no samples"
                                           : "the test set mnist/test has no samples"));
    EXPECT_THAT(msg, HasSubstr(dir.str()));
  }
}

TEST(Factory, UnknownNameListsKnownOnes) {
  DataConfig c;
  c.dataset = "imagenet";
  EXPECT_THAT(
      error_of([&] { load_datasets(c); }),
      HasSubstr("data.dataset: unknown data set 'imagenet'; expected one of: fashion-mnist, mnist, cifar10, "
                "cifar100, imagenet32, imagenet64, image-folder, dogsvscats, synthetic, text"));
}

TEST(Factory, MissingMnistSaysWhereItLookedAndHowToGetIt) {
  DataConfig c;
  c.dataset = "MNIST";
  c.root = "/nonexistent/mnist";
  const auto msg = error_of([&] { load_datasets(c); });
  EXPECT_THAT(
      msg, HasSubstr("data.root: no file train-images-idx3-ubyte(.gz) in /nonexistent/mnist; set data.root "
                     "to the folder that holds the mnist files (train-images-idx3-ubyte.gz"));
  EXPECT_THAT(msg, HasSubstr("torchvision's MNIST download leaves them in <its root>/MNIST/raw"));
  EXPECT_THAT(msg, HasSubstr("--dataset FashionMNIST"));
}

TEST(Factory, DefaultRootsMatchNamesWithoutRegardToCase) {
  EXPECT_EQ(default_root("FashionMNIST"), "/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(default_root("MNIST"), "/usr/share/datasets/mnist");
  EXPECT_EQ(default_root("DogsVsCats"), "/usr/share/datasets/dogsvscats");
  EXPECT_EQ(default_root("synthetic"), "");
}

// train/ and test/ of class folders, each holding `per_class` PNGs of 12x10 pixels, the pixel
// value telling the class apart (cat 40, dog 140, others 200).
void write_class_folders(const TempDir& dir, const std::vector<std::string>& classes, int per_class) {
  for (const std::string split : {"train", "test"}) {
    for (std::size_t c = 0; c < classes.size(); ++c) {
      std::filesystem::create_directories(dir / (split + "/" + classes[c]));
      for (int i = 0; i < per_class; ++i) {
        write_png(dir / (split + "/" + classes[c] + "/" + std::to_string(i) + ".png"),
                  torch::full({3, 12, 10},
                              classes[c] == "cat"   ? 40
                              : classes[c] == "dog" ? 140
                                                    : 200,
                              torch::kUInt8));
      }
    }
  }
}

TEST(Factory, DogsVsCatsIsATwoClassImageFolderCatThenDog) {
  TempDir dir;
  write_class_folders(dir, {"dog", "cat"}, 3);
  DataConfig c;
  c.dataset = "DogsVsCats";
  c.root = dir.str();
  c.image_size = 8;
  c.normalize = false;
  const auto sets = load_datasets(c);
  EXPECT_EQ(sets.train->size(), 6);
  EXPECT_EQ(sets.test->size(), 6);
  EXPECT_EQ(sets.train->num_classes(), 2);
  EXPECT_EQ(sets.train->input_shape(), (std::vector<std::int64_t>{3, 8, 8}));
  // Labels by sorted class name: cat 0 (pixels 40), dog 1 (pixels 140).
  const auto& images = dynamic_cast<const ImageDataset&>(*sets.train_plain);
  for (std::int64_t i = 0; i < images.size(); ++i) {
    const auto label = images.labels()[i].item<std::int64_t>();
    EXPECT_EQ(images.images()[i].to(torch::kInt).max().item<int>(), label == 0 ? 40 : 140) << i;
  }
}

TEST(Factory, DogsVsCatsRefusesOtherClassesAndSaysWhereToLookWithoutRoot) {
  for (const std::vector<std::string>& classes :
       {std::vector<std::string>{"cat", "dog", "bird"}, std::vector<std::string>{"cats", "dogs"},
        std::vector<std::string>{"dog"}}) {
    TempDir dir;
    write_class_folders(dir, classes, 1);
    DataConfig c;
    c.dataset = "dogsvscats";
    c.root = dir.str();
    const auto msg = error_of([&] { load_datasets(c); });
    EXPECT_THAT(msg, HasSubstr("data.root: dataset dogsvscats has exactly two classes, cat and dog, but " +
                               (dir / "train") + " has the class folders "));
    EXPECT_THAT(msg, HasSubstr(classes.back()));
  }
  DataConfig c;
  c.dataset = "dogsvscats";
  c.root = "/nonexistent/dogsvscats";
  EXPECT_THAT(
      error_of([&] { load_datasets(c); }),
      HasSubstr("data.root: /nonexistent/dogsvscats is not a folder; dataset dogsvscats reads train/cat, "
                "train/dog, test/cat and test/dog"));
}

TEST(Factory, MissingRootSaysHowToFix) {
  DataConfig c;
  c.dataset = "fashion-mnist";
  c.root = "/nonexistent/x";
  EXPECT_THAT(
      error_of([&] { load_datasets(c); }),
      HasSubstr("data.root: no file train-images-idx3-ubyte(.gz) in /nonexistent/x; set data.root or install "
                "dataset-fashion-mnist"));
}

TEST(Factory, DefaultRootIsDebiansFashionMnist) {
  EXPECT_EQ(default_root("fashion-mnist"), "/usr/share/datasets/fashion-mnist");
  if (!std::filesystem::exists("/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed";
  }
  DataConfig c;
  c.test_subset_size = 500;
  auto sets = load_datasets(c);
  EXPECT_EQ(sets.train->size(), 60000);
  EXPECT_EQ(sets.test->size(), 500);
  EXPECT_EQ(sets.train->num_classes(), 10);
}

TEST(Text, WindowsAndNextTokenTargets) {
  TempDir dir;
  std::string text;
  for (int i = 0; i < 50; ++i) text += "hello world. ";
  std::ofstream(dir / "t.txt") << text;
  DataConfig c;
  c.dataset = "text";
  c.text_path = dir / "t.txt";
  c.seq_len = 8;
  auto sets = load_datasets(c);
  const auto& train = dynamic_cast<const TextDataset&>(*sets.train);
  EXPECT_EQ(train.vocab_size(), 9);  // " .dehlorw"
  EXPECT_EQ(train.num_classes(), 9);
  EXPECT_EQ(train.input_shape(), (std::vector<std::int64_t>{8}));
  EXPECT_EQ(train.size(), (static_cast<std::int64_t>(text.size()) - 65 - 1) / 8);
  auto b = train.get_batch(torch::tensor({0, 2}, torch::kLong), 0);
  EXPECT_EQ(b.inputs.sizes(), (std::vector<std::int64_t>{2, 8}));
  EXPECT_EQ(train.decode(b.inputs[0]), "hello wo");
  EXPECT_EQ(train.decode(b.targets[0]), "ello wor");
  EXPECT_EQ(train.decode(b.inputs[1]), text.substr(16, 8));
  EXPECT_THAT(error_of([&] {
                DataConfig d = c;
                d.text_path = "";
                load_datasets(d);
              }),
              HasSubstr("data.text_path: empty"));
}
