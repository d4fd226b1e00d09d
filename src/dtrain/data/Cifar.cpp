// CIFAR binary reading; see Cifar.h.
#include "dtrain/data/Cifar.h"

#include <cstring>
#include <filesystem>
#include <fstream>

namespace dtrain::data {

namespace {
constexpr std::int64_t kImageBytes = 3 * 32 * 32;
}

ImageDataset read_cifar_files(const std::vector<std::string>& files, int classes, const std::string& name) {
  TORCH_INTERNAL_ASSERT(classes == 10 || classes == 100);
  const std::int64_t label_bytes = classes == 10 ? 1 : 2;
  const std::int64_t record = label_bytes + kImageBytes;

  std::vector<std::int64_t> counts;
  std::int64_t total = 0;
  for (const auto& path : files) {
    std::error_code ec;
    const auto bytes = static_cast<std::int64_t>(std::filesystem::file_size(path, ec));
    TORCH_CHECK(!ec, path, ": cannot read its size (", ec.message(), ")");
    TORCH_CHECK(bytes % record == 0, path, ": truncated or not a CIFAR-", classes, " binary file: ", bytes,
                " bytes is not a whole number of ", record, "-byte records (", label_bytes,
                " label byte(s) + 3x32x32 image)");
    TORCH_CHECK(bytes > 0, path, ": empty: a CIFAR-", classes, " binary file holds ", record,
                "-byte records and this one holds none");
    counts.push_back(bytes / record);
    total += counts.back();
  }

  auto images = torch::empty({total, 3, 32, 32}, torch::kUInt8);
  auto labels = torch::empty({total}, torch::kLong);
  auto* image_out = images.data_ptr<std::uint8_t>();
  auto* label_out = labels.data_ptr<std::int64_t>();
  std::vector<char> buffer;
  std::int64_t at = 0;
  for (std::size_t f = 0; f < files.size(); ++f) {
    const auto& path = files[f];
    std::ifstream in(path, std::ios::binary);
    TORCH_CHECK(in, path, ": cannot open for reading");
    buffer.resize(static_cast<std::size_t>(counts[f] * record));
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    TORCH_CHECK(in.gcount() == static_cast<std::streamsize>(buffer.size()), path,
                ": truncated while reading");
    for (std::int64_t i = 0; i < counts[f]; ++i, ++at) {
      const auto* rec = reinterpret_cast<const std::uint8_t*>(buffer.data() + i * record);
      const std::int64_t label = rec[label_bytes - 1];
      TORCH_CHECK(label < classes, path, ": label out of range: record ", i, " has label ", label,
                  ", expected 0..", classes - 1, "; is this a CIFAR-", classes == 10 ? 100 : 10, " file?");
      label_out[at] = label;
      std::memcpy(image_out + at * kImageBytes, rec + label_bytes, kImageBytes);
    }
  }
  return ImageDataset(name, images, labels, classes);
}

ImageDataset load_cifar(const std::string& root, int classes, bool train) {
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  if (classes == 10) {
    if (train) {
      for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
    } else {
      names.push_back("test_batch.bin");
    }
  } else {
    names.push_back(train ? "train.bin" : "test.bin");
  }
  const std::string unpacked = classes == 10 ? "cifar-10-batches-bin" : "cifar-100-binary";
  fs::path dir = root;
  if (!fs::is_regular_file(dir / names.front()) && fs::is_regular_file(dir / unpacked / names.front())) {
    dir /= unpacked;
  }
  std::vector<std::string> files;
  for (const auto& n : names) {
    TORCH_CHECK(fs::is_regular_file(dir / n), "data.root: no file ", n, " in ", root.empty() ? "\"\"" : root,
                " (nor in ", (fs::path(root) / unpacked).string(),
                "); set data.root to the folder of the CIFAR-", classes, " binary version");
    files.push_back((dir / n).string());
  }
  const std::string name = std::string(classes == 10 ? "cifar10" : "cifar100") + (train ? "/train" : "/test");
  return read_cifar_files(files, classes, name);
}

}  // namespace dtrain::data
