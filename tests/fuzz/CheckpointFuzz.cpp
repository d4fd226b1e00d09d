// Fuzz target: checkpoint readers. The input is loaded as a checkpoint file (Checkpoint::load), as
// a state_dict (import_state_dict: LibTorch's pickle_load behind util::check_archive), as a
// pytorch_model.bin (read_torch_state_dict: dtrain's restricted unpickler); and, split
// at its first newline, as a CheckpointStore's `latest` marker (the first line) naming
// checkpoint-000000000001.ckpt (the rest). Before util::check_archive (Note [Checking an archive
// before LibTorch reads it]) LibTorch's unpickler allocated what a pickle's length field said, up
// to 4 GB for a file of a few bytes, before refusing it, and this target left import_state_dict out.
#include <filesystem>
#include <string>

#include "dtrain/io/Checkpoint.h"
#include "dtrain/io/TorchStateDict.h"
#include "fuzz/FuzzInput.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dtrain;
  const std::string_view bytes = fuzz::as_text(data, size);
  const std::string path = fuzz::write_scratch("input.ckpt", bytes);
  try {
    io::Checkpoint::load(path);
  } catch (const io::CheckpointError&) {
  }
  try {
    io::import_state_dict(path);
  } catch (const io::CheckpointError&) {
  }
  try {
    io::read_torch_state_dict(path);
  } catch (const io::CheckpointError&) {
  }
  const auto newline = bytes.find('\n');
  if (newline == std::string_view::npos) return 0;
  const auto store_dir = fuzz::scratch_dir() / "store";
  std::filesystem::create_directories(store_dir);
  fuzz::write_scratch("store/latest", bytes.substr(0, newline + 1));
  fuzz::write_scratch("store/checkpoint-000000000001.ckpt", bytes.substr(newline + 1));
  try {
    io::CheckpointStore(store_dir).load_latest();
  } catch (const io::CheckpointError&) {
  }
  return 0;
}
