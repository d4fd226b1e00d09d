// Downsampled ImageNet (Chrabaszcz et al. 2017), 32x32 and 64x64: the published pickled batch
// files train_data_batch_1..10 and val_data (Note [Downsampled ImageNet pickles]), read without
// Python; and the class names of the 1000 classes for reports.
#pragma once

#include "dtrain/data/Dataset.h"

#include <string>
#include <vector>

namespace dtrain::data {

inline constexpr int kImagenetClasses = 1000;

// Reads the batch files `files` (in order) of `image_size` x `image_size` images into one data
// set; labels 1..1000 in the files become 0..999.
ImageDataset read_imagenet_files(const std::vector<std::string>& files, int image_size,
                                 const std::string& name);

// The train (train_data_batch_1..10) or validation (val_data) split under `root`, or under its
// folders Imagenet<S>_train*, Imagenet<S>_val (what the published zip files unpack to).
ImageDataset load_imagenet(const std::string& root, int image_size, bool train);

// The names of the 1000 classes in the batch files' numbering (label 0 first), from `root`:
// map_clsloc.txt (ILSVRC devkit: "wnid index name", the numbering the batch files use) and/or
// imagenet1000_clsidx_to_labels.txt (a Python dict literal {0: 'tench, Tinca tinca', ...}, in
// the sorted-WordNet-id numbering); see Note [ImageNet class numbering]. Empty when neither file
// is there.
std::vector<std::string> load_imagenet_class_names(const std::string& root, int image_size);

// The two files on their own: 1000 names indexed by the file's own class numbers (0-based).
std::vector<std::string> read_clsidx_labels(const std::string& path);
struct ClslocEntry {
  std::string wnid;
  std::string name;
};
std::vector<ClslocEntry> read_map_clsloc(const std::string& path);

}  // namespace dtrain::data
