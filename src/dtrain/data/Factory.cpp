// The data-set factory and loader helpers; see Factory.h.
#include "dtrain/data/Factory.h"

#include "dtrain/data/Cifar.h"
#include "dtrain/data/Idx.h"
#include "dtrain/data/ImageFolder.h"
#include "dtrain/data/Imagenet.h"
#include "dtrain/data/SentenceDataset.h"
#include "dtrain/data/Synthetic.h"
#include "dtrain/data/TextDataset.h"

#include <c10/util/StringUtil.h>

#include <filesystem>
#include <functional>
#include <vector>

#include "dtrain/config/Registry.h"
#include "dtrain/config/Schema.h"

namespace dtrain::data {

namespace {

// Catalyst dAD's dogsvscats is an image folder whose classes are cat (label 0) and dog (label 1), in
// train/ and test/ alike; anything else is another data set, which image-folder reads.
void require_cats_and_dogs(const std::string& root) {
  TORCH_CHECK(std::filesystem::is_directory(root), "data.root: ", root.empty() ? "\"\"" : root,
              " is not a folder; dataset dogsvscats reads train/cat, train/dog, test/cat and test/dog "
              "(PNG or JPEG images) under data.root (docs/training.md, \"dogsvscats\")");
  const std::vector<std::string> cats_and_dogs{"cat", "dog"};
  for (const auto& dir : class_folders(root)) {
    const auto classes = list_classes(dir);
    TORCH_CHECK(classes == cats_and_dogs,
                "data.root: dataset dogsvscats has exactly two classes, cat and dog, but ", dir,
                " has the class folders ", c10::Join(", ", classes),
                "; make it cat/ and dog/, or use dataset image-folder for other classes");
  }
}

// An empty split would train on nothing, or report an evaluation of no samples as zeros. (Text
// sets refuse a file too short for both splits themselves.)
void require_samples(const Dataset& set, const char* split, const config::DataConfig& data,
                     const std::string& root) {
  TORCH_CHECK(set.size() > 0, "data: the ", split, " set ", set.name(), " has no samples (data.dataset ",
              data.dataset, ", from ", root.empty() ? "\"\"" : root, "); check the files there");
}

}  // namespace

DataSets detail::finish_images(ImageDataset train, ImageDataset test, const config::DataConfig& data,
                               const std::string& root) {
  require_samples(train, "training", data, root);
  require_samples(test, "test", data, root);
  TORCH_CHECK(data.subset_size >= 0, "data.subset_size: expected >= 0, found ", data.subset_size);
  TORCH_CHECK(data.test_subset_size >= 0, "data.test_subset_size: expected >= 0, found ",
              data.test_subset_size);
  if (data.subset_size > 0) train = train.head(data.subset_size);
  if (data.test_subset_size > 0) test = test.head(data.test_subset_size);
  test.set_stats(train.stats());
  ImageTransformOptions plain;
  plain.normalize = data.normalize;
  ImageTransformOptions augmented = plain;
  augmented.random_crop_padding = data.random_crop_padding;
  augmented.horizontal_flip = data.horizontal_flip;
  test.set_transform(plain);
  ImageDataset train_plain = train;
  train_plain.set_transform(plain);
  train.set_transform(augmented);
  DataSets out;
  out.train = std::make_shared<ImageDataset>(std::move(train));
  out.train_plain = std::make_shared<ImageDataset>(std::move(train_plain));
  out.test = std::make_shared<ImageDataset>(std::move(test));
  return out;
}

namespace {

using detail::finish_images;

DataSets load_idx(const config::DataConfig& data, const std::string& root, const std::string& name) {
  // Train before test (argument order is unspecified), so a missing root names the train file.
  auto train = load_mnist(root, true, name);
  return finish_images(std::move(train), load_mnist(root, false, name), data, root);
}

DataSets load_cifar_set(const config::DataConfig& data, const std::string& root, int classes) {
  auto train = load_cifar(root, classes, true);
  return finish_images(std::move(train), load_cifar(root, classes, false), data, root);
}

// The class names first: a labels file that cannot name these classes is refused before the
// (large) batch files are read.
DataSets load_imagenet_set(const config::DataConfig& data, const std::string& root, int size) {
  auto names = load_imagenet_class_names(root, size);
  auto train = load_imagenet(root, size, true);
  auto sets = finish_images(std::move(train), load_imagenet(root, size, false), data, root);
  sets.class_names = std::move(names);
  return sets;
}

DataSets load_folder(const config::DataConfig& data, const std::string& root) {
  auto train = load_image_folder(root, data.image_size, true);
  return finish_images(std::move(train), load_image_folder(root, data.image_size, false), data, root);
}

DataSets load_synthetic(const config::DataConfig& data, const std::string& root) {
  SyntheticOptions o;
  o.shape = data.synthetic_shape;
  o.classes = data.synthetic_classes;
  o.size = data.synthetic_size;
  if (data.synthetic_vocab > 0) {
    // data.subset_size and test_subset_size cap the sets' sizes.
    if (data.subset_size > 0) o.size = std::min(o.size, data.subset_size);
    auto train =
        std::make_shared<SentenceDataset>(make_synthetic_tokens(o, data.synthetic_vocab, "synthetic/train"));
    o.stream = 1;
    o.size = std::max<std::int64_t>(1, data.synthetic_size / 5);
    if (data.test_subset_size > 0) o.size = std::min(o.size, data.test_subset_size);
    auto test =
        std::make_shared<SentenceDataset>(make_synthetic_tokens(o, data.synthetic_vocab, "synthetic/test"));
    return DataSets{train, train, test, {}};
  }
  auto train = make_synthetic(o, "synthetic/train");
  o.stream = 1;
  o.size = std::max<std::int64_t>(1, data.synthetic_size / 5);
  auto test = make_synthetic(o, "synthetic/test");
  return finish_images(std::move(train), std::move(test), data, root);
}

DataSets language_model_sets(const TextSplit& split, const config::DataConfig& data) {
  TORCH_CHECK(data.subset_size >= 0 && data.test_subset_size >= 0,
              "data.subset_size / data.test_subset_size: expected >= 0");
  std::shared_ptr<const Dataset> train = data.subset_size > 0 ? split.train->head(data.subset_size)
                                                              : std::shared_ptr<const Dataset>(split.train);
  std::shared_ptr<const Dataset> test = data.test_subset_size > 0
                                            ? split.test->head(data.test_subset_size)
                                            : std::shared_ptr<const Dataset>(split.test);
  return DataSets{train, train, test, {}};
}

DataSets load_text_set(const config::DataConfig& data, const std::string&) {
  return language_model_sets(load_text(data.text_path, data.seq_len), data);
}

DataSets load_wikitext_set(const config::DataConfig& data, const std::string& root) {
  return language_model_sets(load_word_corpus(root, data.seq_len), data);
}

DataSets load_sentence_set(const config::DataConfig& data, const std::string&) {
  auto splits = load_sentences(data);
  require_samples(*splits.train.set, "training", data, data.root);
  require_samples(*splits.test.set, "test", data, data.root);
  auto train = data.subset_size > 0 ? splits.train.set->head(data.subset_size) : splits.train.set;
  auto test = data.test_subset_size > 0 ? splits.test.set->head(data.test_subset_size) : splits.test.set;
  return DataSets{train, train, test, std::move(splits.class_names)};
}

using Names = std::vector<std::string>;

struct DatasetEntry {
  config::Choice choice;
  std::string default_root;  // where it is looked for when data.root is empty; "" for none
  // Its train and test sets from `root` (with their class names where it reads them anyway).
  detail::DatasetLoad load;
  // Its class names by label, from `root` where they are files; null when it names none.
  std::function<Names(const std::string& root)> class_names;
};

Names image_folder_names(const std::string& root) {
  return list_classes(class_folders(root).front());
}

// Every data set, written once: its name (matched without regard to case), its help line, where it
// is by default, how it loads and how its classes are named. config/ validates data.dataset against
// this list.
std::vector<DatasetEntry> builtin_datasets() {
  return {
      {{"fashion-mnist",
        "Fashion-MNIST, IDX files (Debian's dataset-fashion-mnist by default)",
        {"FashionMNIST"}},
       kFashionMnistRoot,
       [](const config::DataConfig& d, const std::string& r) { return load_idx(d, r, "fashion-mnist"); },
       [](const std::string&) {
         return Names{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                      "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
       }},
      {{"mnist", "MNIST, IDX files (.gz or raw) under data.root", {"MNIST"}},
       "/usr/share/datasets/mnist",
       [](const config::DataConfig& d, const std::string& r) { return load_idx(d, r, "mnist"); },
       [](const std::string&) { return Names{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}; }},
      {{"cifar10", "CIFAR-10, the binary version (data_batch_*.bin, test_batch.bin)"},
       "",
       [](const config::DataConfig& d, const std::string& r) { return load_cifar_set(d, r, 10); },
       [](const std::string&) {
         return Names{"airplane", "automobile", "bird",  "cat",  "deer",
                      "dog",      "frog",       "horse", "ship", "truck"};
       }},
      {{"cifar100", "CIFAR-100, the binary version (train.bin, test.bin)"},
       "",
       [](const config::DataConfig& d, const std::string& r) { return load_cifar_set(d, r, 100); },
       nullptr},
      {{"imagenet32",
        "downsampled ImageNet 32x32 (Chrabaszcz et al. 2017): the pickled train_data_batch_1..10 and "
        "val_data "
        "under data.root (default /usr/share/datasets/imagenet32)",
        {"Imagenet32"}},
       "/usr/share/datasets/imagenet32",
       [](const config::DataConfig& d, const std::string& r) { return load_imagenet_set(d, r, 32); },
       [](const std::string& r) { return load_imagenet_class_names(r, 32); }},
      {{"imagenet64",
        "downsampled ImageNet 64x64: the pickled train_data_batch_1..10 and val_data under data.root "
        "(default /usr/share/datasets/imagenet64)",
        {"Imagenet64"}},
       "/usr/share/datasets/imagenet64",
       [](const config::DataConfig& d, const std::string& r) { return load_imagenet_set(d, r, 64); },
       [](const std::string& r) { return load_imagenet_class_names(r, 64); }},
      {{"image-folder", "one folder per class of PNG/JPEG images (train/ and test/ under data.root)"},
       "",
       load_folder,
       image_folder_names},
      {{"dogsvscats",
        "Catalyst dAD's cats and dogs: an image folder of exactly two classes, train/{cat,dog} and "
        "test/{cat,dog} under data.root (default /usr/share/datasets/dogsvscats)",
        {"dogs-vs-cats"}},
       "/usr/share/datasets/dogsvscats",
       [](const config::DataConfig& d, const std::string& r) {
         require_cats_and_dogs(r);
         return load_folder(d, r);
       },
       image_folder_names},
      {{"synthetic", "random images of data.synthetic_shape in data.synthetic_classes classes"},
       "",
       load_synthetic,
       nullptr},
      {{"text", "a character-level language-model corpus (data.text_path)"}, "", load_text_set, nullptr},
      {{"wikitext",
        "a word-level language-model corpus in WikiText's layout: wiki.train.tokens and wiki.test.tokens "
        "under "
        "data.root"},
       "",
       load_wikitext_set,
       nullptr},
      {{"sentences",
        "labelled sentences for a classifier over tokens: GLUE's CoLA or SST-2 TSV, text<TAB>label or JSON "
        "lines (train and dev files under data.root), tokenized by the SentencePiece model data.tokenizer",
        {"glue"}},
       "",
       load_sentence_set,
       nullptr},
  };
}

// The built-in data sets, registered on first use, then a program's own (register_dataset), which
// may register at static initialisation before this file does.
std::vector<DatasetEntry>& dataset_table() {
  static std::vector<DatasetEntry> table = [] {
    auto sets = builtin_datasets();
    for (const auto& entry : sets) config::register_choice(config::kDatasetKey, entry.choice);
    return sets;
  }();
  return table;
}

[[maybe_unused]] const bool kDatasetsRegistered = !dataset_table().empty();

// The table's entry for data.dataset (any registered spelling), or null.
const DatasetEntry* find_dataset(const std::string& dataset) {
  const auto name = config::registered_choices(config::kDatasetKey).resolve(dataset).value_or(dataset);
  for (const auto& entry : dataset_table()) {
    if (entry.choice.name == name) return &entry;
  }
  return nullptr;
}

std::string root_of(const config::DataConfig& data, const DatasetEntry& entry) {
  return data.root.empty() ? entry.default_root : data.root;
}

}  // namespace

bool detail::add_dataset(config::Choice choice, DatasetLoad load) {
  auto& table = dataset_table();
  config::register_choice(config::kDatasetKey, choice);
  table.push_back({std::move(choice), "", std::move(load), nullptr});
  return true;
}

std::string default_root(const std::string& dataset) {
  const auto* entry = find_dataset(dataset);
  return entry ? entry->default_root : "";
}

DataSets load_datasets(const config::DataConfig& data) {
  const auto* entry = find_dataset(data.dataset);
  TORCH_CHECK(entry, "data.dataset: unknown data set '", data.dataset,
              "'; expected one of: ", config::registered_choices(config::kDatasetKey).list());
  const auto root = root_of(data, *entry);
  auto sets = entry->load(data, root);
  if (sets.class_names.empty() && entry->class_names) sets.class_names = entry->class_names(root);
  return sets;
}

std::vector<std::string> class_names(const config::DataConfig& data) {
  const auto* entry = find_dataset(data.dataset);
  if (!entry || !entry->class_names) return {};
  return entry->class_names(root_of(data, *entry));
}

int loader_threads(const config::DataConfig& data, bool for_gpu) {
  if (data.loader_threads >= 0) return data.loader_threads;
  return for_gpu ? 2 : 0;
}

namespace {

// data.equalize as the sampler's mode; join: each rank its own share, the trainer keeping the ranks
// in step (parallel: Note [Join]).
Equalize equalize_of(config::Equalize equalize) {
  switch (equalize) {
    case config::Equalize::Pad:
      return Equalize::pad;
    case config::Equalize::Drop:
      return Equalize::drop;
    case config::Equalize::Join:
      return Equalize::none;
  }
  throw std::logic_error("data.equalize: a value with no sampler mode");
}

}  // namespace

SamplerOptions train_sampler_options(const config::DataConfig& data) {
  SamplerOptions o;
  o.batch_size = data.batch_size;
  o.shuffle = true;
  o.drop_last = data.drop_last;
  o.equalize = equalize_of(data.equalize);
  return o;
}

std::unique_ptr<Loader> make_train_loader(std::shared_ptr<const Dataset> train, const Shard& shard,
                                          const config::DataConfig& data, std::uint64_t seed, bool for_gpu) {
  return std::make_unique<Loader>(std::move(train),
                                  DistributedSampler(shard, train_sampler_options(data), seed),
                                  LoaderOptions{loader_threads(data, for_gpu), data.prefetch, for_gpu});
}

std::unique_ptr<Loader> make_eval_loader(std::shared_ptr<const Dataset> dataset,
                                         const config::DataConfig& data, int rank, int world,
                                         const torch::Tensor& indices, bool for_gpu) {
  TORCH_CHECK(world >= 1 && rank >= 0 && rank < world, "make_eval_loader: rank ", rank, " outside 0..",
              world - 1);
  auto all = indices.defined() && indices.numel() > 0 ? indices.to(torch::kLong)
                                                      : torch::arange(dataset->size(), torch::kLong);
  Shard shard;
  shard.rank = rank;
  shard.world = world;
  shard.indices = all.index_select(0, torch::arange(rank, all.size(0), world, torch::kLong));
  shard.held_out = torch::empty({0}, torch::kLong);
  for (int r = 0; r < world; ++r) shard.rank_sizes.push_back((all.size(0) - r + world - 1) / world);
  SamplerOptions o;
  o.batch_size = data.eval_batch_size;
  o.shuffle = false;
  o.drop_last = false;
  o.equalize = Equalize::none;
  return std::make_unique<Loader>(std::move(dataset), DistributedSampler(std::move(shard), o, 0),
                                  LoaderOptions{loader_threads(data, for_gpu), data.prefetch, for_gpu});
}

}  // namespace dtrain::data

DTRAIN_LINK_ANCHOR(dtrain_datasets_registry);
