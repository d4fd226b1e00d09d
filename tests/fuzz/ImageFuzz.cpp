// Fuzz target: one image of an image folder, decoded as the PNG or JPEG its first bytes say it is
// (ImageFolder.h picks the decoder by extension; the other one is tried too, as a misnamed file).
#include <c10/util/Exception.h>

#include <cstring>

#include "dtrain/data/ImageFolder.h"
#include "fuzz/FuzzInput.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const bool png = size >= 4 && std::memcmp(data, "\x89PNG", 4) == 0;
  // The likely decoder first, then the other (a file named .png that holds a JPEG, or the reverse).
  const char* extensions[] = {png ? ".png" : ".jpg", png ? ".jpg" : ".png"};
  for (const char* extension : extensions) {
    const std::string path =
        dtrain::fuzz::write_scratch(std::string("image") + extension, dtrain::fuzz::as_text(data, size));
    try {
      const auto image = dtrain::data::decode_image(path);
      if (image.dim() != 3 || image.size(0) != 3)
        dtrain::fuzz::property_failed("decode_image returned a non-(3, H, W) tensor");
    } catch (const c10::Error&) {
      // refused, naming the file (ImageFolder.cpp)
    }
  }
  return 0;
}
