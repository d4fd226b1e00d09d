// Fuzz target: a CIFAR binary batch file, read as CIFAR-10 (1 label byte a record) and as CIFAR-100
// (coarse and fine label bytes).
#include <c10/util/Exception.h>

#include "dtrain/data/Cifar.h"
#include "fuzz/FuzzInput.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = dtrain::fuzz::write_scratch("data_batch_1.bin", dtrain::fuzz::as_text(data, size));
  for (const int classes : {10, 100}) {
    try {
      const auto set = dtrain::data::read_cifar_files({path}, classes, "cifar");
      const auto labels = set.labels();
      if (labels.numel() > 0 &&
          (labels.min().item<std::int64_t>() < 0 || labels.max().item<std::int64_t>() >= classes)) {
        dtrain::fuzz::property_failed("a CIFAR label outside [0, classes) was accepted");
      }
    } catch (const c10::Error&) {
      // refused, naming the file (Cifar.h)
    }
  }
  return 0;
}
