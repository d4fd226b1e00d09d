// Fuzz target: an IDX file (MNIST's format), raw or gzip-compressed, read as the 1-dimensional
// labels and the 3-dimensional images of the MNIST layout.
#include <c10/util/Exception.h>

#include "dtrain/data/Idx.h"
#include "fuzz/FuzzInput.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = dtrain::fuzz::write_scratch("input-idx-ubyte", dtrain::fuzz::as_text(data, size));
  for (const int dims : {1, 3}) {
    try {
      const auto tensor = dtrain::data::read_idx(path, dims);
      if (tensor.dim() != dims)
        dtrain::fuzz::property_failed("read_idx returned the wrong number of dimensions");
    } catch (const c10::Error&) {
      // refused, naming the file (Idx.h)
    }
  }
  return 0;
}
