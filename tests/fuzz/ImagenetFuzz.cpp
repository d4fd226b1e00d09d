// Fuzz target: downsampled ImageNet's files: a pickled batch file (our own pickle reader, Pickle.h)
// read as 32x32 and 64x64 images, and the two class-name files (map_clsloc.txt and the
// clsidx-to-labels dict literal) the same bytes could be.
#include <c10/util/Exception.h>

#include "dtrain/data/Imagenet.h"
#include "fuzz/FuzzInput.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dtrain;
  const std::string path = fuzz::write_scratch("train_data_batch_1", fuzz::as_text(data, size));
  for (const int image_size : {32, 64}) {
    try {
      const auto set = data::read_imagenet_files({path}, image_size, "imagenet");
      const auto labels = set.labels();
      if (labels.numel() > 0 && (labels.min().item<std::int64_t>() < 0 ||
                                 labels.max().item<std::int64_t>() >= data::kImagenetClasses)) {
        fuzz::property_failed("an ImageNet label outside [0, 1000) was accepted");
      }
    } catch (const c10::Error&) {
      // refused, naming the file, offset and opcode (Pickle.h)
    }
  }
  try {
    if (data::read_clsidx_labels(path).size() != static_cast<std::size_t>(data::kImagenetClasses)) {
      fuzz::property_failed("read_clsidx_labels returned other than 1000 names");
    }
  } catch (const c10::Error&) {
  }
  try {
    if (data::read_map_clsloc(path).size() != static_cast<std::size_t>(data::kImagenetClasses)) {
      fuzz::property_failed("read_map_clsloc returned other than 1000 entries");
    }
  } catch (const c10::Error&) {
  }
  return 0;
}
