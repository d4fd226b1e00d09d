// IDX reading through zlib; see Idx.h.
#include "dtrain/data/Idx.h"

#include <zlib.h>

#include <array>
#include <filesystem>
#include <memory>

namespace dtrain::data {

namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads up to `n` bytes; returns how many were read (fewer only at the end of the data).
std::int64_t read_fully(gzFile f, std::uint8_t* out, std::int64_t n, const std::string& path) {
  constexpr std::int64_t kChunk = std::int64_t{1} << 26;  // zlib takes unsigned lengths
  std::int64_t done = 0;
  while (done < n) {
    const auto want = static_cast<unsigned>(std::min(kChunk, n - done));
    const int got = gzread(f, out + done, want);
    if (got < 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      TORCH_CHECK(false, path, ": cannot decompress (", msg, "); the file is corrupt or truncated");
    }
    if (got == 0) break;
    done += got;
  }
  return done;
}

std::uint32_t big_endian(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

}  // namespace

torch::Tensor read_idx(const std::string& path, int expected_dims) {
  TORCH_INTERNAL_ASSERT(expected_dims >= 1 && expected_dims <= 4);
  GzFile file(gzopen(path.c_str(), "rb"));
  TORCH_CHECK(file, path, ": cannot open for reading");
  gzbuffer(file.get(), 1u << 20);

  std::array<std::uint8_t, 4> magic{};
  const std::uint32_t expected_magic = 0x0800u | static_cast<std::uint32_t>(expected_dims);
  TORCH_CHECK(read_fully(file.get(), magic.data(), 4, path) == 4, path,
              ": truncated: the file ends inside the 4-byte IDX magic number");
  const std::uint32_t found_magic = big_endian(magic.data());
  TORCH_CHECK(magic[0] == 0 && magic[1] == 0 && magic[2] == 0x08 && magic[3] == expected_dims, path,
              ": wrong magic number: expected 0x", std::hex, expected_magic, " (IDX unsigned bytes, ",
              std::dec, expected_dims, " dimensions), found 0x", std::hex, found_magic, std::dec,
              "; is this the right file (images vs labels) and an IDX file at all?");

  std::vector<std::uint8_t> header(4 * static_cast<std::size_t>(expected_dims));
  TORCH_CHECK(read_fully(file.get(), header.data(), static_cast<std::int64_t>(header.size()), path) ==
                  static_cast<std::int64_t>(header.size()),
              path, ": truncated: the file ends inside the IDX header");
  // What the header promises must fit in the file before anything is allocated: a raw file holds
  // exactly its size less the header; deflate expands at most 1032-fold.
  std::error_code ec;
  const auto file_bytes = static_cast<std::int64_t>(std::filesystem::file_size(path, ec));
  TORCH_CHECK(!ec, path, ": cannot read its size (", ec.message(), ")");
  const std::int64_t header_bytes = 4 + static_cast<std::int64_t>(header.size());
  const bool raw = gzdirect(file.get()) == 1;
  const std::int64_t at_most = raw ? file_bytes - header_bytes : file_bytes * 1032 + (1 << 16);
  std::vector<std::int64_t> sizes;
  for (int d = 0; d < expected_dims; ++d) sizes.push_back(big_endian(header.data() + 4 * d));
  std::int64_t count = 1;
  bool too_big = false;
  for (const auto size : sizes) {
    too_big = too_big || (size > 0 && count > at_most / size);
    if (!too_big) count *= size;
  }
  if (too_big && raw) {
    TORCH_CHECK(false, path, ": truncated: the header promises more than ", at_most, " bytes of data (",
                c10::IntArrayRef(sizes), "), found ", at_most);
  }
  TORCH_CHECK(!too_big, path, ": corrupt header: its sizes ", c10::IntArrayRef(sizes),
              " promise more data than a ", file_bytes, "-byte compressed file can hold");

  auto data = torch::empty(sizes, torch::kUInt8);
  const std::int64_t got = read_fully(file.get(), data.data_ptr<std::uint8_t>(), count, path);
  TORCH_CHECK(got == count, path, ": truncated: the header promises ", count, " bytes of data (",
              c10::IntArrayRef(sizes), "), found ", got);
  std::uint8_t extra = 0;
  TORCH_CHECK(read_fully(file.get(), &extra, 1, path) == 0, path, ": longer than its header says: more than ",
              count, " bytes of data follow the header; the header or the file is wrong");
  return data;
}

std::string find_idx_file(const std::string& root, const std::string& stem, const std::string& dataset) {
  namespace fs = std::filesystem;
  for (const std::string& name : {stem + ".gz", stem}) {
    const fs::path p = fs::path(root) / name;
    if (fs::is_regular_file(p)) return p.string();
  }
  std::string hint = "set data.root to the folder that holds the " + dataset + " files";
  if (dataset == "fashion-mnist") hint = "set data.root or install dataset-fashion-mnist";
  if (dataset == "mnist") {
    // Debian packages no MNIST, and dtrain downloads nothing.
    hint +=
        " (train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz, "
        "t10k-labels-idx1-ubyte.gz: torchvision's MNIST download leaves them in <its root>/MNIST/raw), or "
        "train on Fashion-MNIST from Debian's dataset-fashion-mnist (data.dataset=fashion-mnist, --dataset "
        "FashionMNIST)";
  }
  TORCH_CHECK(false, "data.root: no file ", stem, "(.gz) in ", root.empty() ? std::string("\"\"") : root,
              "; ", hint);
}

ImageDataset load_mnist(const std::string& root, bool train, const std::string& dataset) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path = find_idx_file(root, prefix + "-images-idx3-ubyte", dataset);
  const std::string labels_path = find_idx_file(root, prefix + "-labels-idx1-ubyte", dataset);
  auto images = read_idx(images_path, 3);
  auto labels = read_idx(labels_path, 1);
  TORCH_CHECK(images.size(0) == labels.size(0), "count mismatch: ", images_path, " holds ", images.size(0),
              " images but ", labels_path, " holds ", labels.size(0),
              " labels; the two files must come from the same split");
  constexpr std::int64_t kClasses = 10;
  if (labels.numel() > 0) {
    const auto max = labels.max().item<std::int64_t>();
    if (max >= kClasses) {
      const auto at = labels.ge(kClasses).nonzero()[0][0].item<std::int64_t>();
      TORCH_CHECK(false, labels_path, ": label out of range: sample ", at, " has label ",
                  labels[at].item<std::int64_t>(), ", expected 0..", kClasses - 1);
    }
  }
  return ImageDataset(dataset + (train ? "/train" : "/test"), images.unsqueeze(1), labels.to(torch::kLong),
                      kClasses);
}

}  // namespace dtrain::data
