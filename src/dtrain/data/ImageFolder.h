// torchvision's ImageFolder layout: one subfolder per class (classes sorted by name), PNG and JPEG
// files decoded with libpng / libjpeg to RGB and resized to a square, held in memory as uint8.
#pragma once

#include "dtrain/data/Dataset.h"

#include <string>
#include <vector>

namespace dtrain::data {

// One decoded image: (3, H, W) uint8 RGB; grey and palette images are expanded, alpha dropped.
torch::Tensor decode_image(const std::string& path);

// Every image under `dir`/<class>/ resized to image_size x image_size; `classes` (sorted folder
// names) fixes the label of each folder so a train and a test folder agree.
ImageDataset read_image_folder(const std::string& dir, const std::vector<std::string>& classes,
                               int image_size, const std::string& name);

// The sorted class folder names under `dir`.
std::vector<std::string> list_classes(const std::string& dir);

// The train or test split under `root`: `root`/train and `root`/test (or val) when they exist;
// otherwise `root` holds the class folders and every 10th image of each class (in name order) is
// the test split.
ImageDataset load_image_folder(const std::string& root, int image_size, bool train);

}  // namespace dtrain::data
