// Image-folder reading with libpng and libjpeg; see ImageFolder.h.
#include "dtrain/data/ImageFolder.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <filesystem>

namespace dtrain::data {

namespace fs = std::filesystem;
namespace F = torch::nn::functional;

namespace {

std::string lower_extension(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
  return ext;
}

bool is_image(const fs::path& p) {
  const std::string ext = lower_extension(p);
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg";
}

torch::Tensor decode_png(const std::string& path) {
  // The simplified API reports errors through its return value: no setjmp across C++ frames.
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  TORCH_CHECK(png_image_begin_read_from_file(&image, path.c_str()) != 0, path, ": not a readable PNG (",
              image.message, ")");
  // See Note [What an image file may be].
  const png_uint_32 width = image.width, height = image.height;
  if (static_cast<std::int64_t>(width) * height > kMaxImagePixels) {
    png_image_free(&image);
    TORCH_CHECK(false, path, ": the PNG header claims ", width, " x ", height, " pixels, more than the ",
                kMaxImagePixels,
                " an image may have; the file is corrupt or not a "
                "training image");
  }
  image.format = PNG_FORMAT_RGB;
  auto hwc = torch::empty(
      {static_cast<std::int64_t>(image.height), static_cast<std::int64_t>(image.width), 3}, torch::kUInt8);
  const int ok = png_image_finish_read(&image, nullptr, hwc.data_ptr<std::uint8_t>(), 0, nullptr);
  const std::string message = image.message;
  png_image_free(&image);
  TORCH_CHECK(ok != 0, path, ": cannot decode PNG (", message, ")");
  return hwc.permute({2, 0, 1}).contiguous();
}

struct JpegError {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void jpeg_error_exit(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegError*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// libjpeg's default prints warnings (level -1) on stderr and decodes on; a warning means lost or
// corrupt data, so it ends decoding like an error (Note [What an image file may be]). Trace
// messages (level >= 0) stay silent.
void jpeg_emit_message(j_common_ptr cinfo, int msg_level) {
  if (msg_level < 0) jpeg_error_exit(cinfo);
}

// Decodes into `out` (resized to H*W*3); returns false with `err.message` set on failure. Only C
// objects and `out` (alive before setjmp) live in this frame, so the longjmp skips no destructor.
bool decode_jpeg_into(std::FILE* file, std::vector<std::uint8_t>& out, std::int64_t& height,
                      std::int64_t& width, JpegError& err) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  err.mgr.emit_message = jpeg_emit_message;
  if (setjmp(err.jump)) {
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_stdio_src(&cinfo, file);
  jpeg_read_header(&cinfo, TRUE);
  // See Note [What an image file may be].
  if (static_cast<std::int64_t>(cinfo.image_width) * cinfo.image_height > kMaxImagePixels) {
    std::snprintf(
        err.message, sizeof err.message,
        "the header claims %u x %u pixels, more than the %lld an image may have; the file is corrupt "
        "or not a training image",
        static_cast<unsigned>(cinfo.image_width), static_cast<unsigned>(cinfo.image_height),
        static_cast<long long>(kMaxImagePixels));
    jpeg_destroy_decompress(&cinfo);
    return false;
  }
  cinfo.out_color_space = JCS_RGB;
  jpeg_start_decompress(&cinfo);
  height = cinfo.output_height;
  width = cinfo.output_width;
  out.resize(static_cast<std::size_t>(height * width * 3));
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = out.data() + static_cast<std::size_t>(cinfo.output_scanline) * width * 3;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  return true;
}

torch::Tensor decode_jpeg(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  TORCH_CHECK(file != nullptr, path, ": cannot open for reading");
  std::vector<std::uint8_t> pixels;
  std::int64_t height = 0, width = 0;
  JpegError err{};
  const bool ok = decode_jpeg_into(file, pixels, height, width, err);
  std::fclose(file);
  TORCH_CHECK(ok, path, ": cannot decode JPEG (", err.message, ")");
  return torch::from_blob(pixels.data(), {height, width, 3}, torch::kUInt8).permute({2, 0, 1}).contiguous();
}

std::vector<fs::path> list_images(const fs::path& dir) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file() && is_image(entry.path())) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

ImageDataset build(const std::vector<std::pair<fs::path, std::int64_t>>& samples, std::int64_t classes,
                   int image_size, const std::string& name) {
  const auto n = static_cast<std::int64_t>(samples.size());
  auto images = torch::empty({n, 3, image_size, image_size}, torch::kUInt8);
  auto labels = torch::empty({n}, torch::kLong);
  // Decoding dominates loading; images are independent, so spread them over the intra-op threads.
  at::parallel_for(0, n, 8, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      auto chw = decode_image(samples[i].first.string());
      if (chw.size(1) != image_size || chw.size(2) != image_size) {
        auto resized = F::interpolate(chw.unsqueeze(0).to(torch::kFloat),
                                      F::InterpolateFuncOptions()
                                          .size(std::vector<std::int64_t>{image_size, image_size})
                                          .mode(torch::kBilinear)
                                          .align_corners(false)
                                          .antialias(true));
        chw = resized.squeeze(0).round_().clamp_(0, 255).to(torch::kUInt8);
      }
      images[i].copy_(chw);
      labels[i] = samples[i].second;
    }
  });
  return ImageDataset(name, images, labels, classes);
}

void write_png(const std::string& path, const torch::Tensor& hwc, int channels) {
  png_image image{};
  image.version = PNG_IMAGE_VERSION;
  image.width = static_cast<png_uint_32>(hwc.size(1));
  image.height = static_cast<png_uint_32>(hwc.size(0));
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  TORCH_CHECK(png_image_write_to_file(&image, path.c_str(), 0, hwc.data_ptr<std::uint8_t>(), 0, nullptr) != 0,
              path, ": cannot write PNG: ", image.message);
}

// Encodes at quality 95; returns false with `err.message` set on failure. As in decode_jpeg_into,
// only C objects live in this frame.
bool encode_jpeg_into(std::FILE* file, const std::uint8_t* pixels, int height, int width, int channels,
                      JpegError& err) {
  jpeg_compress_struct cinfo;
  cinfo.err = jpeg_std_error(&err.mgr);
  err.mgr.error_exit = jpeg_error_exit;
  if (setjmp(err.jump)) {
    jpeg_destroy_compress(&cinfo);
    return false;
  }
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, file);
  cinfo.image_width = static_cast<JDIMENSION>(width);
  cinfo.image_height = static_cast<JDIMENSION>(height);
  cinfo.input_components = channels;
  cinfo.in_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, 95, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    auto* row =
        const_cast<JSAMPROW>(pixels + static_cast<std::size_t>(cinfo.next_scanline) * width * channels);
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  return true;
}

void write_jpeg(const std::string& path, const torch::Tensor& hwc, int channels) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  TORCH_CHECK(file != nullptr, path, ": cannot open for writing");
  JpegError err{};
  const bool ok = encode_jpeg_into(file, hwc.data_ptr<std::uint8_t>(), static_cast<int>(hwc.size(0)),
                                   static_cast<int>(hwc.size(1)), channels, err);
  const bool closed = std::fclose(file) == 0;
  TORCH_CHECK(ok, path, ": cannot write JPEG (", err.message, ")");
  TORCH_CHECK(closed, path, ": cannot write JPEG (close failed)");
}

}  // namespace

void write_image(const std::string& path, const torch::Tensor& chw) {
  TORCH_CHECK(chw.dim() == 3 && (chw.size(0) == 1 || chw.size(0) == 3) && chw.scalar_type() == torch::kUInt8,
              path, ": expected a (1 or 3, H, W) uint8 image, got ", chw.sizes(), " ", chw.scalar_type());
  const auto hwc = chw.permute({1, 2, 0}).contiguous();
  const int channels = static_cast<int>(chw.size(0));
  const std::string ext = lower_extension(path);
  if (ext == ".png") return write_png(path, hwc, channels);
  if (ext == ".jpg" || ext == ".jpeg") return write_jpeg(path, hwc, channels);
  TORCH_CHECK(false, path, ": expected a .png, .jpg or .jpeg file name, found extension '", ext, "'");
}

std::int64_t export_image_folder(const ImageDataset& dataset, const std::string& dir, std::int64_t count,
                                 const std::string& format) {
  TORCH_CHECK(format == "png" || format == "jpg", "image folder export: format '", format,
              "' is not png or jpg");
  const auto& images = dataset.images();
  TORCH_CHECK(images.scalar_type() == torch::kUInt8, "image folder export: data set '", dataset.name(),
              "' holds ", images.scalar_type(), " images; only uint8 pixel data can be written as images");
  const std::int64_t n = count > 0 ? std::min(count, dataset.size()) : dataset.size();
  const auto labels = dataset.labels().contiguous();
  const int width =
      static_cast<int>(std::to_string(std::max<std::int64_t>(1, dataset.num_classes() - 1)).size());
  for (std::int64_t c = 0; c < dataset.num_classes(); ++c) {
    fs::create_directories(fs::path(dir) / fmt::format("{:0{}}", c, width));
  }
  at::parallel_for(0, n, 16, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      const auto label = labels[i].item<std::int64_t>();
      write_image(
          (fs::path(dir) / fmt::format("{:0{}}", label, width) / fmt::format("{}.{}", i, format)).string(),
          images[i]);
    }
  });
  return n;
}

torch::Tensor decode_image(const std::string& path) {
  const std::string ext = lower_extension(path);
  if (ext == ".png") return decode_png(path);
  if (ext == ".jpg" || ext == ".jpeg") return decode_jpeg(path);
  TORCH_CHECK(false, path, ": expected a .png, .jpg or .jpeg file, found extension '", ext, "'");
}

std::vector<std::string> list_classes(const std::string& dir) {
  TORCH_CHECK(fs::is_directory(dir), "data.root: ", dir,
              " is not a folder; expected one subfolder per class");
  std::vector<std::string> classes;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_directory()) classes.push_back(entry.path().filename().string());
  }
  std::sort(classes.begin(), classes.end());
  TORCH_CHECK(!classes.empty(), "data.root: no class subfolders in ", dir,
              "; expected one subfolder per class holding .png/.jpg images");
  return classes;
}

// A class folder's images; an empty one is refused naming it: it names a class the data would never
// show, and the labels would count classes that are not there (torchvision's ImageFolder refuses it).
std::vector<fs::path> class_images(const fs::path& class_dir) {
  auto files = list_images(class_dir);
  TORCH_CHECK(!files.empty(), "data.root: the class folder ", class_dir.string(),
              " holds no .png/.jpg images; add its images or remove the folder (each subfolder is a class)");
  return files;
}

ImageDataset read_image_folder(const std::string& dir, const std::vector<std::string>& classes,
                               int image_size, const std::string& name) {
  TORCH_CHECK(image_size > 0, "data.image_size: expected > 0, found ", image_size);
  std::vector<std::pair<fs::path, std::int64_t>> samples;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    const fs::path class_dir = fs::path(dir) / classes[c];
    if (!fs::is_directory(class_dir)) continue;
    for (auto& file : class_images(class_dir)) samples.emplace_back(file, static_cast<std::int64_t>(c));
  }
  TORCH_CHECK(!samples.empty(), "data.root: no .png/.jpg images in the class folders of ", dir);
  return build(samples, static_cast<std::int64_t>(classes.size()), image_size, name);
}

std::vector<std::string> class_folders(const std::string& root) {
  const fs::path base(root);
  if (!fs::is_directory(base / "train")) return {root};
  std::vector<std::string> out{(base / "train").string()};
  for (const char* test : {"test", "val"}) {
    if (fs::is_directory(base / test)) return {out[0], (base / test).string()};
  }
  return out;
}

ImageDataset load_image_folder(const std::string& root, int image_size, bool train) {
  TORCH_CHECK(!root.empty(),
              "data.root: empty; set it to a folder with one subfolder per class "
              "(or train/ and test/ folders of class subfolders) for dataset image-folder");
  const fs::path base(root);
  const std::string split = train ? "train" : "test";
  if (fs::is_directory(base / "train")) {
    const auto classes = list_classes((base / "train").string());
    fs::path dir = base / "train";
    if (!train) {
      dir = fs::is_directory(base / "test") ? base / "test" : base / "val";
      TORCH_CHECK(fs::is_directory(dir), "data.root: ", root, " has train/ but neither test/ nor val/");
    }
    return read_image_folder(dir.string(), classes, image_size, "image-folder/" + split);
  }
  const auto classes = list_classes(root);
  std::vector<std::pair<fs::path, std::int64_t>> samples;
  for (std::size_t c = 0; c < classes.size(); ++c) {
    const auto files = class_images(base / classes[c]);
    for (std::size_t i = 0; i < files.size(); ++i) {
      const bool held_out = i % 10 == 9;
      if (held_out != train) samples.emplace_back(files[i], static_cast<std::int64_t>(c));
    }
  }
  TORCH_CHECK(!samples.empty(), "data.root: no .png/.jpg images for the ", split,
              " split in the class folders of ", root,
              " (every 10th image of a class is held out for testing)");
  return build(samples, static_cast<std::int64_t>(classes.size()), image_size, "image-folder/" + split);
}

}  // namespace dtrain::data
