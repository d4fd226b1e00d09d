// Helpers for the data-layer tests: a temporary folder removed at the end of a test, and writers
// for small IDX, CIFAR, PNG and JPEG files.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "dtrain/data/ImageFolder.h"
#include "support/ScratchDir.h"

namespace dtrain::data::testing {

// A ScratchDir that hands out its paths as strings, the form the data layer's readers and these
// writers take.
class TempDir {
 public:
  std::string str() const { return dir_.string(); }
  std::string operator/(const std::string& name) const { return (dir_ / name).string(); }

 private:
  dtrain::testing::ScratchDir dir_;
};

inline void write_bytes(const std::string& path, const std::vector<std::uint8_t>& bytes, bool gzip) {
  if (gzip) {
    gzFile f = gzopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
    gzclose(f);
  } else {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
}

// IDX bytes: magic 0,0,8,ndim; big-endian sizes; data.
inline std::vector<std::uint8_t> idx_bytes(const std::vector<std::uint32_t>& sizes,
                                           const std::vector<std::uint8_t>& data) {
  std::vector<std::uint8_t> out{0, 0, 0x08, static_cast<std::uint8_t>(sizes.size())};
  for (auto s : sizes) {
    for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<std::uint8_t>(s >> shift));
  }
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

// An MNIST-layout folder: `n` 28x28 images whose pixels are (i + row) % 256, labels i % 10.
inline void write_mnist(const std::string& dir, const std::string& prefix, std::uint32_t n, bool gzip) {
  std::vector<std::uint8_t> pixels, labels;
  for (std::uint32_t i = 0; i < n; ++i) {
    for (int p = 0; p < 28 * 28; ++p) pixels.push_back(static_cast<std::uint8_t>((i + p / 28) % 256));
    labels.push_back(static_cast<std::uint8_t>(i % 10));
  }
  const std::string ext = gzip ? ".gz" : "";
  write_bytes(dir + "/" + prefix + "-images-idx3-ubyte" + ext, idx_bytes({n, 28, 28}, pixels), gzip);
  write_bytes(dir + "/" + prefix + "-labels-idx1-ubyte" + ext, idx_bytes({n}, labels), gzip);
}

// (3, H, W) uint8 RGB image to PNG / JPEG (quality 95), through the library's writer.
inline void write_png(const std::string& path, const torch::Tensor& chw) {
  dtrain::data::write_image(path, chw);
}
inline void write_jpeg(const std::string& path, const torch::Tensor& chw) {
  dtrain::data::write_image(path, chw);
}

// Runs `f` and returns the message it throws ("" if it does not throw).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace dtrain::data::testing
