// Helpers for the data-layer tests: a temporary folder removed at the end of a test, and writers
// for small IDX, CIFAR, PNG and JPEG files.
#pragma once

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <jpeglib.h>
#include <png.h>
#include <torch/torch.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace dtrain::data::testing {

class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("dtrain-data-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
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

// (3, H, W) uint8 RGB image to PNG.
inline void write_png(const std::string& path, const torch::Tensor& chw) {
  auto hwc = chw.permute({1, 2, 0}).contiguous();
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(chw.size(2));
  image.height = static_cast<png_uint_32>(chw.size(1));
  image.format = PNG_FORMAT_RGB;
  ASSERT_NE(png_image_write_to_file(&image, path.c_str(), 0, hwc.data_ptr<std::uint8_t>(), 0, nullptr), 0)
      << image.message;
}

// (3, H, W) uint8 RGB image to JPEG at quality 95.
inline void write_jpeg(const std::string& path, const torch::Tensor& chw) {
  auto hwc = chw.permute({1, 2, 0}).contiguous();
  std::FILE* file = std::fopen(path.c_str(), "wb");
  ASSERT_NE(file, nullptr);
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, file);
  cinfo.image_width = static_cast<JDIMENSION>(chw.size(2));
  cinfo.image_height = static_cast<JDIMENSION>(chw.size(1));
  cinfo.input_components = 3;
  cinfo.in_color_space = JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 95, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row =
        hwc.data_ptr<std::uint8_t>() + static_cast<std::size_t>(cinfo.next_scanline) * chw.size(2) * 3;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::fclose(file);
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
