// torchvision's ImageFolder layout: one subfolder per class (classes sorted by name), PNG and JPEG
// files decoded with libpng / libjpeg to RGB and resized to a square, held in memory as uint8.
#pragma once

#include "dtrain/data/Dataset.h"

#include <string>
#include <vector>

namespace dtrain::data {

// The most pixels an image may have (10^4 x 10^4, 300 MB decoded): a header claiming more is refused
// before anything is allocated, since a corrupt or hostile file can claim 10^6 x 10^6.
inline constexpr std::int64_t kMaxImagePixels = 100'000'000;

// One decoded image: (3, H, W) uint8 RGB; grey and palette images are expanded, alpha dropped.
// Throws naming the path when the file is not a PNG or JPEG, is corrupt, or exceeds kMaxImagePixels.
torch::Tensor decode_image(const std::string& path);

// Writes a (C, H, W) uint8 image, C = 1 (grey) or 3 (RGB), as PNG (lossless) or JPEG (quality
// 95) by the path's extension. Throws naming the path when it cannot be written.
void write_image(const std::string& path, const torch::Tensor& chw);

// Writes the first `count` samples (all when count <= 0) of an in-memory image set as an image
// folder: `dir`/<class index, zero-padded>/<sample index>.<format> with format "png" or "jpg".
// Returns the number of images written.
std::int64_t export_image_folder(const ImageDataset& dataset, const std::string& dir, std::int64_t count,
                                 const std::string& format);

// Every image under `dir`/<class>/ resized to image_size x image_size; `classes` (sorted folder
// names) fixes the label of each folder so a train and a test folder agree.
ImageDataset read_image_folder(const std::string& dir, const std::vector<std::string>& classes,
                               int image_size, const std::string& name);

// The sorted class folder names under `dir`.
std::vector<std::string> list_classes(const std::string& dir);

// The folders whose subfolders are the classes: `root`/train and `root`/test (or val) when they
// exist, otherwise `root` itself.
std::vector<std::string> class_folders(const std::string& root);

// The train or test split under `root`: `root`/train and `root`/test (or val) when they exist;
// otherwise `root` holds the class folders and every 10th image of each class (in name order) is
// the test split.
ImageDataset load_image_folder(const std::string& root, int image_size, bool train);

}  // namespace dtrain::data
