// Fuzz target: a safetensors file (model.init_from's model.safetensors). The header parser runs on the
// bytes in memory and the reader on them as a file; either refuses with io::CheckpointError (Note [A
// safetensors header is checked whole]) or returns entries that lie within the data, in order, and
// tensors of exactly the bytes the header gives them.
#include <string>

#include "dtrain/io/Checkpoint.h"
#include "dtrain/io/SafeTensors.h"
#include "fuzz/FuzzInput.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dtrain;
  const std::string_view bytes = fuzz::as_text(data, size);
  try {
    std::uint64_t covered = 0;
    for (const auto& entry : io::parse_safetensors(bytes, "input")) {
      if (entry.begin != covered || entry.end < entry.begin || entry.end > size)
        fuzz::property_failed(
            "parse_safetensors accepted entries that overlap, leave a gap or run past the file");
      covered = entry.end;
    }
  } catch (const io::CheckpointError&) {
  }
  const std::string path = fuzz::write_scratch("input.safetensors", bytes);
  try {
    for (const auto& [name, tensor] : io::read_safetensors(path)) {
      if (tensor.nbytes() > size)
        fuzz::property_failed("read_safetensors made a tensor larger than the file");
    }
  } catch (const io::CheckpointError&) {
  }
  return 0;
}
