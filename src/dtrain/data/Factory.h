// From config::DataConfig to data: the train and test sets of the named data set (subsets,
// normalisation and augmentation applied), and the loaders a training run uses.
#pragma once

#include "dtrain/config/RunConfig.h"
#include "dtrain/data/Dataset.h"
#include "dtrain/data/Loader.h"
#include "dtrain/data/Partition.h"

#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace dtrain::data {

struct DataSets {
  std::shared_ptr<const Dataset> train;  // augmented as configured
  std::shared_ptr<const Dataset>
      train_plain;  // the same samples without augmentation: kfold validation, train accuracy
  std::shared_ptr<const Dataset> test;   // normalised with the training set's statistics
  std::vector<std::string> class_names;  // by label; empty when the data set names none
};

// Where a data set is looked for when data.root is empty ("" when it has no default).
std::string default_root(const std::string& dataset);

DataSets load_datasets(const config::DataConfig& data);

// The names of the data set's classes, by label (0 first), for reports: fixed for cifar10, mnist
// and fashion-mnist; from map_clsloc.txt / imagenet1000_clsidx_to_labels.txt under data.root for
// imagenet32/64 (Note [ImageNet class numbering]); the folder names of an image folder's train/.
// Empty when the data set has none. Reads no images.
std::vector<std::string> class_names(const config::DataConfig& data);

// data.loader_threads for a worker that trains on a GPU (`for_gpu`) or the CPU: -1 (auto) is 2 on
// a GPU and 0 on the CPU; any other value is itself.
int loader_threads(const config::DataConfig& data, bool for_gpu);

// How a training loader samples (data.batch_size, data.drop_last, data.equalize).
SamplerOptions train_sampler_options(const config::DataConfig& data);

// This rank's training batches: its shard, reshuffled every epoch from `seed`, the same number of
// batches on every rank. `for_gpu`: made in pinned memory, for a worker that trains on a GPU.
std::unique_ptr<Loader> make_train_loader(std::shared_ptr<const Dataset> train, const Shard& shard,
                                          const config::DataConfig& data, std::uint64_t seed,
                                          bool for_gpu = false);

// Evaluation batches of `indices` (empty = the whole set) in order, every world-th sample from
// `rank`, so the ranks' parts are disjoint and together cover `indices`.
std::unique_ptr<Loader> make_eval_loader(std::shared_ptr<const Dataset> dataset,
                                         const config::DataConfig& data, int rank, int world,
                                         const torch::Tensor& indices = {}, bool for_gpu = false);

namespace detail {

// How a data set's train and test sets are read from the run's data.* options and its root.
using DatasetLoad = std::function<DataSets(const config::DataConfig& data, const std::string& root)>;
// Adds a data set to those data.dataset names (register_dataset's way in; UserDataset.h).
bool add_dataset(config::Choice choice, DatasetLoad load);
// The subsets, the test set's normalisation by the training set's statistics and the transforms of
// data.*, applied to an image data set's two splits; refuses an empty split naming `root`.
DataSets finish_images(ImageDataset train, ImageDataset test, const config::DataConfig& data,
                       const std::string& root);

}  // namespace detail

}  // namespace dtrain::data
