// Downsampled ImageNet reading; see Imagenet.h.
//
// Note [ImageNet class numbering]
// The batch files number the classes 1..1000 as the ILSVRC devkit's map_clsloc.txt does
// (Imagenet32_Scripts/utils.py get_label_dict: "n02119789 1 kit_fox"), which is not the numbering
// of imagenet1000_clsidx_to_labels.txt (Keras/Caffe: 0 = n01440764 tench, the WordNet ids sorted).
// The distributed-optimizer study named classes with the latter, which misnames them; the two numberings
// meet through the WordNet ids in map_clsloc.txt. So the names come from map_clsloc.txt, taking the longer
// names of imagenet1000_clsidx_to_labels.txt when both are present; that file alone is refused,
// with what to add, rather than reporting wrong names.
#include "dtrain/data/Imagenet.h"

#include "dtrain/data/Pickle.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace dtrain::data {

namespace {

namespace fs = std::filesystem;
using Kind = PickleValue::Kind;

std::string shape_text(const std::vector<std::int64_t>& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + (shape.size() == 1 ? ",)" : ")");
}

// One batch file, parsed: where its images are in the file, and its labels (0-based).
struct BatchFile {
  std::string path;
  PickleBytes images;
  std::int64_t count = 0;
  std::vector<std::int64_t> labels;
};

std::vector<std::int64_t> read_labels(const std::string& path, const PickleValue& labels) {
  std::vector<std::int64_t> out;
  if (labels.kind == Kind::list) {
    out.reserve(labels.items.size());
    for (std::size_t i = 0; i < labels.items.size(); ++i) {
      const auto& v = *labels.items[i];
      TORCH_CHECK(v.kind == Kind::integer, path, ": 'labels' item ", i, " is a ", kind_name(v),
                  ", not an int");
      out.push_back(v.integer);
    }
    return out;
  }
  // Re-exports sometimes keep the labels as a numpy integer array.
  const std::int64_t item = labels.item_size();
  TORCH_CHECK(labels.kind == Kind::array && labels.shape.size() == 1 && item > 0 &&
                  (labels.dtype->text[0] == 'i' || labels.dtype->text[0] == 'u') &&
                  (item == 1 || item == 2 || item == 4 || item == 8) && labels.dtype->byte_order != '>',
              path, ": 'labels' is a ", kind_name(labels),
              labels.kind == Kind::array ? " of " + labels.dtype->text + " " + shape_text(labels.shape) : "",
              ", expected a list of ints (or a 1-D little-endian integer array)");
  std::vector<std::uint8_t> raw(static_cast<std::size_t>(labels.bytes.size));
  read_pickle_bytes(path, labels.bytes, raw.data());
  const bool is_signed = labels.dtype->text[0] == 'i';
  for (std::int64_t i = 0; i < labels.shape[0]; ++i) {
    std::uint64_t v = 0;
    for (std::int64_t b = 0; b < item; ++b)
      v |= std::uint64_t{raw[static_cast<std::size_t>(i * item + b)]} << (8 * b);
    if (is_signed && item < 8 && ((v >> (8 * item - 1)) & 1)) v |= ~std::uint64_t{0} << (8 * item);
    out.push_back(static_cast<std::int64_t>(v));
  }
  return out;
}

BatchFile parse_batch(const std::string& path, int image_size) {
  const std::int64_t row = 3LL * image_size * image_size;
  const std::string dataset = "imagenet" + std::to_string(image_size);
  const auto root = read_pickle(path);
  TORCH_CHECK(root->kind == Kind::dict, path, ": the pickle holds a ", kind_name(*root),
              ", expected a dict with 'data' and 'labels' (a downsampled ImageNet batch file)");
  const PickleValue* data = root->find("data");
  const PickleValue* labels = root->find("labels");
  TORCH_CHECK(data && labels, path, ": the pickled dict has no '", data ? "labels" : "data",
              "' entry; not a downsampled ImageNet batch file");

  TORCH_CHECK(data->kind == Kind::array, path, ": 'data' is a ", kind_name(*data),
              ", expected a numpy uint8 array");
  TORCH_CHECK(data->dtype->text == "u1", path, ": 'data' has dtype ", data->dtype->text,
              ", expected uint8 (u1) pixel values");
  if (data->shape.size() != 2 || data->shape[1] != row) {
    std::string hint;
    if (data->shape.size() == 2) {
      for (const int other : {32, 64}) {
        if (other != image_size && data->shape[1] == 3LL * other * other) {
          hint = "; these are " + std::to_string(other) + "x" + std::to_string(other) +
                 " images: set data.dataset to imagenet" + std::to_string(other);
        }
      }
    }
    TORCH_CHECK(false, path, ": 'data' has shape ", shape_text(data->shape), ", expected (N, ", row, ") for ",
                dataset, " (3x", image_size, "x", image_size, " images, channel-planar)", hint);
  }
  TORCH_CHECK(
      !data->fortran_order || data->shape[0] <= 1, path,
      ": 'data' is stored in Fortran (column-major) order; expected C order, as numpy writes by default");

  BatchFile batch;
  batch.path = path;
  batch.images = data->bytes;
  batch.count = data->shape[0];
  batch.labels = read_labels(path, *labels);
  TORCH_CHECK(static_cast<std::int64_t>(batch.labels.size()) == batch.count, path, ": 'labels' holds ",
              batch.labels.size(), " labels for ", batch.count, " images");
  for (std::size_t i = 0; i < batch.labels.size(); ++i) {
    const auto label = batch.labels[i];
    TORCH_CHECK(label >= 1 && label <= kImagenetClasses, path, ": label out of range: image ", i,
                " has label ", label, ", expected 1..", kImagenetClasses,
                " (the files number classes from 1)");
    batch.labels[i] = label - 1;
  }
  // The training batches carry the per-pixel mean of the training set; dtrain normalises per
  // channel from the images as for every data set, so it is only checked for shape.
  if (const PickleValue* mean = root->find("mean")) {
    TORCH_CHECK(mean->kind == Kind::array && (mean->dtype->text == "f8" || mean->dtype->text == "f4"), path,
                ": 'mean' is a ", kind_name(*mean),
                mean->kind == Kind::array ? " of " + mean->dtype->text : "", ", expected a float array");
    std::int64_t elements = 1;
    for (const auto d : mean->shape) elements *= d;
    TORCH_CHECK(elements == row, path, ": 'mean' has shape ", shape_text(mean->shape), ", expected (", row,
                ",) for ", dataset);
  }
  return batch;
}

// Where the file `name` is: under `root`, or in one of its folders named Imagenet<S>_* (the
// published zip files unpack to Imagenet32_train/, Imagenet32_val/, Imagenet64_train_part1/, ...).
std::string find_batch_file(const std::string& root, int image_size, const std::string& name) {
  if (fs::is_regular_file(fs::path(root) / name)) return (fs::path(root) / name).string();
  const std::string prefix = "imagenet" + std::to_string(image_size);
  std::vector<fs::path> folders;
  std::error_code ec;
  if (fs::is_directory(root, ec)) {
    for (const auto& entry : fs::directory_iterator(root, ec)) {
      std::string folder = entry.path().filename().string();
      std::transform(folder.begin(), folder.end(), folder.begin(),
                     [](unsigned char c) { return std::tolower(c); });
      if (entry.is_directory() && folder.rfind(prefix, 0) == 0) folders.push_back(entry.path());
    }
  }
  std::sort(folders.begin(), folders.end());
  for (const auto& folder : folders) {
    if (fs::is_regular_file(folder / name)) return (folder / name).string();
  }
  const std::string size = std::to_string(image_size);
  TORCH_CHECK(false, "data.root: no file ", name, " in ", root.empty() ? "\"\"" : root,
              " (nor in its Imagenet", size, "_* folders); imagenet", size,
              " reads train_data_batch_1..10 and val_data of Imagenet", size, "x", size,
              " (https://patrykchrabaszcz.github.io/Imagenet32/: Imagenet", size, "_train*.zip and Imagenet",
              size, "_val.zip, unpacked) under data.root; dtrain downloads nothing");
}

// A Python string literal, single- or double-quoted, with backslash escapes.
bool parse_python_string(const std::string& text, std::size_t& at, std::string& out) {
  if (at >= text.size() || (text[at] != '\'' && text[at] != '"')) return false;
  const char quote = text[at++];
  out.clear();
  while (at < text.size() && text[at] != quote) {
    if (text[at] == '\n') return false;
    if (text[at] == '\\' && at + 1 < text.size()) {
      ++at;
      out.push_back(text[at] == 'n' ? '\n' : text[at] == 't' ? '\t' : text[at]);
    } else {
      out.push_back(text[at]);
    }
    ++at;
  }
  if (at >= text.size()) return false;
  ++at;
  return true;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in, path, ": cannot open for reading");
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

ImageDataset read_imagenet_files(const std::vector<std::string>& files, int image_size,
                                 const std::string& name) {
  TORCH_INTERNAL_ASSERT(image_size == 32 || image_size == 64);
  std::vector<BatchFile> batches;
  std::int64_t total = 0;
  for (const auto& path : files) {
    batches.push_back(parse_batch(path, image_size));
    total += batches.back().count;
  }
  // The images go straight from each file into their place in one tensor: a training set of
  // Imagenet64 is 15.7 GB, and holding it twice to concatenate would be too much.
  auto images = torch::empty({total, 3, image_size, image_size}, torch::kUInt8);
  auto labels = torch::empty({total}, torch::kLong);
  auto* image_out = images.data_ptr<std::uint8_t>();
  auto* label_out = labels.data_ptr<std::int64_t>();
  const std::int64_t row = 3LL * image_size * image_size;
  std::int64_t at = 0;
  for (const auto& batch : batches) {
    read_pickle_bytes(batch.path, batch.images, image_out + at * row);
    std::copy(batch.labels.begin(), batch.labels.end(), label_out + at);
    at += batch.count;
  }
  return ImageDataset(name, images, labels, kImagenetClasses);
}

ImageDataset load_imagenet(const std::string& root, int image_size, bool train) {
  std::vector<std::string> files;
  if (train) {
    for (int i = 1; i <= 10; ++i)
      files.push_back(find_batch_file(root, image_size, "train_data_batch_" + std::to_string(i)));
  } else {
    files.push_back(find_batch_file(root, image_size, "val_data"));
  }
  return read_imagenet_files(files, image_size,
                             "imagenet" + std::to_string(image_size) + (train ? "/train" : "/val"));
}

std::vector<std::string> read_clsidx_labels(const std::string& path) {
  const std::string text = read_text_file(path);
  std::size_t at = 0;
  const auto line_of = [&](std::size_t pos) {
    return 1 + std::count(text.begin(), text.begin() + pos, '\n');
  };
  const auto fail = [&](const std::string& what) {
    TORCH_CHECK(false, path, ":", line_of(std::min(at, text.size())), ": ", what,
                "; expected a Python dict literal {0: 'tench, Tinca tinca', 1: ..., 999: ...}");
  };
  const auto skip_space = [&] {
    while (at < text.size() && std::isspace(static_cast<unsigned char>(text[at]))) ++at;
  };
  std::vector<std::string> names(kImagenetClasses);
  std::vector<bool> seen(kImagenetClasses, false);
  skip_space();
  if (at >= text.size() || text[at] != '{') fail("no opening '{'");
  ++at;
  while (true) {
    skip_space();
    if (at < text.size() && text[at] == '}') break;
    std::int64_t key = 0;
    const std::size_t digits = at;
    while (at < text.size() && std::isdigit(static_cast<unsigned char>(text[at])) && at - digits < 6)
      key = key * 10 + (text[at++] - '0');
    if (at == digits) fail("a class number expected");
    if (key >= kImagenetClasses) fail("class number " + std::to_string(key) + " outside 0..999");
    if (seen[static_cast<std::size_t>(key)]) fail("class " + std::to_string(key) + " twice");
    skip_space();
    if (at >= text.size() || text[at] != ':') fail("':' expected after the class number");
    ++at;
    skip_space();
    if (!parse_python_string(text, at, names[static_cast<std::size_t>(key)]))
      fail("a quoted class name expected");
    seen[static_cast<std::size_t>(key)] = true;
    skip_space();
    if (at < text.size() && text[at] == ',') ++at;
  }
  ++at;
  skip_space();
  if (at != text.size()) fail("text after the closing '}'");
  const auto missing = std::find(seen.begin(), seen.end(), false);
  if (missing != seen.end()) fail("no name for class " + std::to_string(missing - seen.begin()));
  return names;
}

std::vector<ClslocEntry> read_map_clsloc(const std::string& path) {
  std::ifstream in(path);
  TORCH_CHECK(in, path, ": cannot open for reading");
  std::vector<ClslocEntry> entries(kImagenetClasses);
  std::vector<bool> seen(kImagenetClasses, false);
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::istringstream fields(line);
    std::string wnid, name;
    std::int64_t index = 0;
    if (!(fields >> wnid)) continue;  // blank line
    TORCH_CHECK(fields >> index >> name, path, ":", number,
                ": expected \"wnid index name\" (n02119789 1 kit_fox), found \"", line, "\"");
    TORCH_CHECK(index >= 1 && index <= kImagenetClasses && !seen[static_cast<std::size_t>(index - 1)], path,
                ":", number, ": class index ", index, " outside 1..1000 or given twice");
    std::replace(name.begin(), name.end(), '_', ' ');
    entries[static_cast<std::size_t>(index - 1)] = {wnid, name};
    seen[static_cast<std::size_t>(index - 1)] = true;
  }
  const auto missing = std::find(seen.begin(), seen.end(), false);
  TORCH_CHECK(missing == seen.end(), path, ": no line for class index ", missing - seen.begin() + 1,
              "; expected 1000 lines \"wnid index name\"");
  return entries;
}

std::vector<std::string> load_imagenet_class_names(const std::string& root, int image_size) {
  // The names are looked for where the batch files are: under root or its Imagenet<S>_* folders.
  const auto find = [&](const std::string& name) -> std::string {
    try {
      return find_batch_file(root, image_size, name);
    } catch (const c10::Error&) {
      return "";
    }
  };
  const std::string clsloc = find("map_clsloc.txt");
  const std::string clsidx = find("imagenet1000_clsidx_to_labels.txt");
  if (clsloc.empty()) {
    TORCH_CHECK(clsidx.empty(), clsidx,
                ": numbers the classes in sorted WordNet-id order, but the downsampled ImageNet files number "
                "them as the ILSVRC devkit's map_clsloc.txt does; put map_clsloc.txt (devkit, or "
                "PatrykChrabaszcz/Imagenet32_Scripts) beside it to name classes correctly, or remove it");
    return {};
  }
  const auto entries = read_map_clsloc(clsloc);
  std::vector<std::string> names;
  for (const auto& e : entries) names.push_back(e.name);
  if (clsidx.empty()) return names;
  // See Note [ImageNet class numbering]: clsidx numbers classes by their sorted WordNet ids.
  std::vector<std::string> wnids;
  for (const auto& e : entries) wnids.push_back(e.wnid);
  std::vector<std::string> sorted = wnids;
  std::sort(sorted.begin(), sorted.end());
  TORCH_CHECK(std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(), clsloc,
              ": a WordNet id occurs twice");
  const auto long_names = read_clsidx_labels(clsidx);
  for (std::size_t i = 0; i < wnids.size(); ++i) {
    const auto rank = std::lower_bound(sorted.begin(), sorted.end(), wnids[i]) - sorted.begin();
    names[i] = long_names[static_cast<std::size_t>(rank)];
  }
  return names;
}

}  // namespace dtrain::data
