// A data set of one's own, in torch::data's shape (size() and get(i)), registered under a name so
// that data.dataset selects it wherever a configuration is read: the trainer, and the train,
// experiment and bench throughput commands of a program running dtrain's command line. dtrain
// reads every sample once with get(i) into one tensor (the in-memory layout of every data set it
// trains on), so that partitions, per-epoch shuffling, augmentation and evaluation work on it as on
// the built-in sets.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/config/Options.h"
#include "dtrain/config/RunConfig.h"

namespace dtrain::data {

// One sample: the model's input for it, and its class.
struct Example {
  // float32 (used as is) or uint8 (pixel values, scaled to [0, 1]), of one shape for every sample:
  // (C, H, W) images get per-channel normalisation and the image augmentations; (D) feature
  // vectors per-feature normalisation; any other shape one mean and deviation over all values.
  torch::Tensor input;
  std::int64_t label = 0;  // in [0, classes)
};

class ExampleDataset {
 public:
  virtual ~ExampleDataset() = default;
  virtual std::int64_t size() const = 0;
  // Sample `index`, in [0, size()). Called once per sample, in order, when the run starts.
  virtual Example get(std::int64_t index) const = 0;
};

// What a registered data set gives for a run's data.* options.
struct ExampleSplits {
  std::shared_ptr<const ExampleDataset> train;
  std::shared_ptr<const ExampleDataset> test;  // evaluated at data.test_subset_size, eval_every_*
  std::int64_t classes = 0;                    // the model's outputs; every label is below it
  std::vector<std::string> class_names{};      // by label, for reports; empty for none
};

// Gets the splits from the run's data.* options (data.root: "" unless the configuration sets it).
using ExampleLoader = std::function<ExampleSplits(const config::DataConfig& data)>;

// Registers a data set of one's own under choice.name (choice.help for `--help`, and any aliases).
// Call it before any configuration is parsed: in main(), or at static initialisation through
// DTRAIN_REGISTER_DATASET. Returns true; throws std::logic_error when the name or an alias is taken.
// Samples whose inputs differ in shape or type, or labels outside [0, classes), are refused when
// the run reads them, with one line naming the data set, the split and the sample.
bool register_dataset(config::Choice choice, ExampleLoader load);

// At namespace scope in any source file of the program:
//   DTRAIN_REGISTER_DATASET(mydata, {"mydata", "my samples"}, [](const auto& data) {...});
#define DTRAIN_REGISTER_DATASET(id, ...) \
  [[maybe_unused]] static const bool dtrain_dataset_##id = ::dtrain::data::register_dataset(__VA_ARGS__)

}  // namespace dtrain::data
