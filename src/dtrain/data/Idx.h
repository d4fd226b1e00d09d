// The IDX format of MNIST and Fashion-MNIST (big-endian header: 0, 0, type, ndim, then ndim
// uint32 sizes, then the data), read raw or gzip-compressed through zlib in large chunks.
#pragma once

#include "dtrain/data/Dataset.h"

#include <string>

namespace dtrain::data {

// Debian's dataset-fashion-mnist install.
inline constexpr const char* kFashionMnistRoot = "/usr/share/datasets/fashion-mnist";

// An IDX file of unsigned bytes (type 0x08) with `expected_dims` dimensions, as a uint8 tensor of
// the sizes in its header. Throws, naming the file, on a wrong magic number, a truncated or
// over-long file, or a non-byte element type.
torch::Tensor read_idx(const std::string& path, int expected_dims);

// `<root>/<stem>.gz` if it exists, else `<root>/<stem>`; throws naming both when neither does.
std::string find_idx_file(const std::string& root, const std::string& stem, const std::string& dataset);

// The train (`train` = true: train-*) or test (t10k-*) split of an MNIST-layout folder: images
// (N, 1, 28, 28) uint8, labels in [0, 10). `dataset` names the data set in messages.
ImageDataset load_mnist(const std::string& root, bool train, const std::string& dataset = "mnist");

}  // namespace dtrain::data
