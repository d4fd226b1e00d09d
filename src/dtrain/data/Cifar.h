// The CIFAR-10 and CIFAR-100 binary versions: fixed-size records of label byte(s) then a 3x32x32
// image, channel-major. CIFAR-10: data_batch_{1..5}.bin / test_batch.bin, one label byte;
// CIFAR-100: train.bin / test.bin, a coarse and a fine label byte (the fine one is used).
#pragma once

#include "dtrain/data/Dataset.h"

#include <string>
#include <vector>

namespace dtrain::data {

// Reads the records of `files` (in order) into one data set; `classes` is 10 or 100.
ImageDataset read_cifar_files(const std::vector<std::string>& files, int classes, const std::string& name);

// The train or test split under `root` (or `root`/cifar-10-batches-bin, `root`/cifar-100-binary,
// the folders the official archives unpack to).
ImageDataset load_cifar(const std::string& root, int classes, bool train);

}  // namespace dtrain::data
