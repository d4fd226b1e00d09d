// The synthetic classification set; see Synthetic.h.
#include "dtrain/data/Synthetic.h"

#include "dtrain/data/Random.h"

namespace dtrain::data {

ImageDataset make_synthetic(const SyntheticOptions& options, const std::string& name) {
  TORCH_CHECK(
      options.shape.size() == 3 && options.shape[0] > 0 && options.shape[1] > 0 && options.shape[2] > 0,
      "data.synthetic_shape: expected three positive sizes [C, H, W], found ",
      c10::IntArrayRef(options.shape));
  TORCH_CHECK(options.classes >= 1, "data.synthetic_classes: expected >= 1, found ", options.classes);
  TORCH_CHECK(options.size >= 1, "data.synthetic_size: expected >= 1, found ", options.size);
  auto proto_gen = make_generator(derive_seed(options.seed, {0x5eed}));
  std::vector<std::int64_t> proto_shape{options.classes};
  proto_shape.insert(proto_shape.end(), options.shape.begin(), options.shape.end());
  auto prototypes = torch::randn(proto_shape, proto_gen);

  auto gen = make_generator(derive_seed(options.seed, {0x5a3b1e, options.stream}));
  // Balanced classes in a random order.
  auto labels = torch::arange(options.size, torch::kLong).remainder(options.classes);
  labels = labels.index_select(0, torch::randperm(options.size, gen, torch::kLong));
  std::vector<std::int64_t> shape{options.size};
  shape.insert(shape.end(), options.shape.begin(), options.shape.end());
  auto images = prototypes.index_select(0, labels) + options.noise * torch::randn(shape, gen);
  return ImageDataset(name, images, labels, options.classes);
}

SentenceDataset make_synthetic_tokens(const SyntheticOptions& options, std::int64_t vocab,
                                      const std::string& name) {
  TORCH_CHECK(options.shape.size() == 1 && options.shape[0] > 0,
              "data.synthetic_shape: token sequences (data.synthetic_vocab > 0) take one positive size [T], "
              "found ",
              c10::IntArrayRef(options.shape));
  TORCH_CHECK(vocab >= 2, "data.synthetic_vocab: expected >= 2 (id 0 is padding), found ", vocab);
  TORCH_CHECK(options.classes >= 1, "data.synthetic_classes: expected >= 1, found ", options.classes);
  TORCH_CHECK(options.size >= 1, "data.synthetic_size: expected >= 1, found ", options.size);
  const auto t = options.shape[0];
  auto proto_gen = make_generator(derive_seed(options.seed, {0x5eed, 0x70c}));
  auto prototypes = torch::randint(1, vocab, {options.classes, t}, proto_gen, torch::kLong);
  auto gen = make_generator(derive_seed(options.seed, {0x70c5, options.stream}));
  auto labels = torch::arange(options.size, torch::kLong).remainder(options.classes);
  labels = labels.index_select(0, torch::randperm(options.size, gen, torch::kLong));
  auto ids = prototypes.index_select(0, labels);
  const auto noise = torch::randint(1, vocab, {options.size, t}, gen, torch::kLong);
  ids = torch::where(torch::rand({options.size, t}, gen).lt(0.3), noise, ids);
  const auto lengths = torch::randint((t + 1) / 2, t + 1, {options.size, 1}, gen, torch::kLong);
  ids = ids.masked_fill(torch::arange(t, torch::kLong).unsqueeze(0).ge(lengths), 0);
  return SentenceDataset(name, ids.to(torch::kInt), labels, options.classes, vocab, /*pad_id=*/0);
}

}  // namespace dtrain::data
