// A program's own data sets: read once through get(i) into the in-memory layout; see UserDataset.h.
#include "dtrain/data/UserDataset.h"

#include <c10/util/irange.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <stdexcept>
#include <utility>

#include "dtrain/data/Dataset.h"
#include "dtrain/data/Factory.h"

namespace dtrain::data {
namespace {

std::string shape_of(const torch::Tensor& t) {
  return fmt::format("[{}]", fmt::join(t.sizes(), ", "));
}

// The samples of one split as one (N, ...) tensor and (N) labels; refuses, naming the sample, the
// first one that disagrees with sample 0 or the class count.
std::pair<torch::Tensor, torch::Tensor> read_examples(const ExampleDataset& set, const std::string& where,
                                                      std::int64_t classes) {
  const std::int64_t n = set.size();
  if (n <= 0) throw std::invalid_argument(fmt::format("{}: has no samples (size() is {})", where, n));
  const auto example0 = set.get(0);
  const auto& first = example0.input;
  if (!first.defined() || (first.scalar_type() != torch::kFloat && first.scalar_type() != torch::kUInt8)) {
    throw std::invalid_argument(
        fmt::format("{}: sample 0's input is {}; inputs must be float32, or uint8 pixel values", where,
                    first.defined() ? std::string(c10::toString(first.scalar_type())) : "undefined"));
  }
  std::vector<std::int64_t> shape{n};
  shape.insert(shape.end(), first.sizes().begin(), first.sizes().end());
  auto inputs = torch::empty(shape, first.options().device(torch::kCPU));
  auto labels = torch::empty({n}, torch::kLong);
  auto* label = labels.data_ptr<std::int64_t>();
  for (const auto i : c10::irange(n)) {
    const auto example = i == 0 ? example0 : set.get(i);
    if (!example.input.defined() || example.input.sizes() != first.sizes() ||
        example.input.scalar_type() != first.scalar_type()) {
      throw std::invalid_argument(fmt::format(
          "{}: sample {} has input {} {}, but sample 0 has {} {}; every sample needs one shape and type",
          where, i, example.input.defined() ? shape_of(example.input) : "undefined",
          example.input.defined() ? c10::toString(example.input.scalar_type()) : "", shape_of(first),
          c10::toString(first.scalar_type())));
    }
    if (example.label < 0 || example.label >= classes) {
      throw std::invalid_argument(fmt::format("{}: sample {} has label {}, outside [0, {}) (its classes)",
                                              where, i, example.label, classes));
    }
    inputs[i].copy_(example.input);
    label[i] = example.label;
  }
  return {inputs, labels};
}

// The (N, C, H, W) layout normalisation works in: images as they are, a feature vector (D) as D
// channels of one pixel, anything else as one channel of all its values.
torch::Tensor as_images(const torch::Tensor& inputs) {
  const auto n = inputs.size(0);
  if (inputs.dim() == 4) return inputs;
  if (inputs.dim() == 2) return inputs.reshape({n, inputs.size(1), 1, 1});
  return inputs.reshape({n, 1, inputs.numel() / std::max<std::int64_t>(n, 1), 1});
}

// An image data set's batches in the samples' own shape.
class ShapedDataset final : public Dataset {
 public:
  ShapedDataset(std::shared_ptr<const Dataset> images, std::vector<std::int64_t> shape)
      : images_(std::move(images)), shape_(std::move(shape)) {}
  const std::string& name() const override { return images_->name(); }
  std::int64_t size() const override { return images_->size(); }
  std::vector<std::int64_t> input_shape() const override { return shape_; }
  std::int64_t num_classes() const override { return images_->num_classes(); }
  const torch::Tensor& labels() const override { return images_->labels(); }
  ChannelStats stats() const override { return images_->stats(); }
  Batch get_batch(const torch::Tensor& indices, std::uint64_t augment_seed) const override {
    auto batch = images_->get_batch(indices, augment_seed);
    std::vector<std::int64_t> shape{batch.inputs.size(0)};
    shape.insert(shape.end(), shape_.begin(), shape_.end());
    batch.inputs = batch.inputs.reshape(shape);
    return batch;
  }

 private:
  std::shared_ptr<const Dataset> images_;
  std::vector<std::int64_t> shape_;
};

DataSets load_examples(const std::string& name, const ExampleLoader& load, const config::DataConfig& data) {
  const auto splits = load(data);
  if (!splits.train || !splits.test)
    throw std::invalid_argument(
        fmt::format("data set {}: its loader gave no {} set", name, splits.train ? "test" : "training"));
  if (splits.classes < 1)
    throw std::invalid_argument(fmt::format("data set {}: its loader gave {} classes", name, splits.classes));
  auto [train_inputs, train_labels] =
      read_examples(*splits.train, "data set " + name + ", training set", splits.classes);
  auto [test_inputs, test_labels] =
      read_examples(*splits.test, "data set " + name + ", test set", splits.classes);
  if (test_inputs.sizes().slice(1) != train_inputs.sizes().slice(1)) {
    throw std::invalid_argument(fmt::format("data set {}: test samples have input {}, training samples {}",
                                            name, shape_of(test_inputs[0]), shape_of(train_inputs[0])));
  }
  const auto sample_shape = train_inputs.sizes().slice(1).vec();
  if (sample_shape.size() != 3 && (data.random_crop_padding > 0 || data.horizontal_flip)) {
    throw std::invalid_argument(
        fmt::format("data.{}: crops and flips images (C, H, W), but data set {} has samples of shape [{}]",
                    data.random_crop_padding > 0 ? "random_crop_padding" : "horizontal_flip", name,
                    fmt::join(sample_shape, ", ")));
  }
  auto sets = detail::finish_images(
      ImageDataset(name + "/train", as_images(train_inputs), train_labels, splits.classes),
      ImageDataset(name + "/test", as_images(test_inputs), test_labels, splits.classes), data, data.root);
  if (sample_shape.size() != 3) {
    sets.train = std::make_shared<ShapedDataset>(sets.train, sample_shape);
    sets.train_plain = std::make_shared<ShapedDataset>(sets.train_plain, sample_shape);
    sets.test = std::make_shared<ShapedDataset>(sets.test, sample_shape);
  }
  sets.class_names = splits.class_names;
  return sets;
}

}  // namespace

bool register_dataset(config::Choice choice, ExampleLoader load) {
  if (!load) throw std::logic_error("register_dataset(" + choice.name + "): the loader is empty");
  const auto name = choice.name;
  return detail::add_dataset(
      std::move(choice), [name, load = std::move(load)](const config::DataConfig& data, const std::string&) {
        return load_examples(name, load, data);
      });
}

}  // namespace dtrain::data
