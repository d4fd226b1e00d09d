// Checkpoints: named tensors (model and optimizer state, random state as a byte tensor) plus a JSON
// metadata blob (step, epoch, sampler position, scheduler, config) in one file; a CheckpointStore
// that writes them atomically with a `latest` marker written last; and a state_dict export that
// Python's torch.load reads.
#pragma once

#include <ATen/core/Tensor.h>
#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "dtrain/io/AtomicFile.h"

namespace torch::nn {
class Module;
}

namespace dtrain::io {

// A checkpoint file is missing, truncated, corrupt or does not match what loads it.
class CheckpointError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Checkpoint {
 public:
  // Stores a detached CPU copy, so later in-place updates of `tensor` do not leak in.
  void set_tensor(const std::string& name, const at::Tensor& tensor);
  bool contains(const std::string& name) const { return tensors_.count(name) > 0; }
  // Throws CheckpointError listing the names present when `name` is not.
  const at::Tensor& tensor(const std::string& name) const;
  const std::map<std::string, at::Tensor>& tensors() const { return tensors_; }

  void set_metadata(const nlohmann::json& metadata);
  nlohmann::json metadata() const;  // an empty object until set

  // Parameters and buffers of `module` as "<prefix>.<name>" (e.g. "model.fc1.weight").
  void set_module_state(const std::string& prefix, const torch::nn::Module& module);
  // Copies them back in place; throws CheckpointError naming any missing or mis-shaped entry.
  void load_module_state(const std::string& prefix, torch::nn::Module& module) const;

  // The file's bytes (a torch::serialize::OutputArchive), streamed to `sink`.
  void write(const ByteSink& sink) const;
  // Atomically replaces `path` with the file (io/AtomicFile.h); throws std::runtime_error naming
  // the path and the system error when it cannot be written, leaving no temporary file.
  void save(const std::filesystem::path& path) const;
  // Throws CheckpointError when the file is missing or not a dtrain checkpoint.
  static Checkpoint load(const std::filesystem::path& path);
  // The file's bytes in memory, and a checkpoint from them (what a peer sends: Note [Recovering
  // from a peer] in train/PeerRecovery.h); from_bytes throws CheckpointError naming `what`.
  std::string to_bytes() const;
  static Checkpoint from_bytes(const std::string& bytes, const std::string& what);

 private:
  // Reads what write() wrote from `in`; errors name `what` ("checkpoint <path>").
  static Checkpoint read(std::istream& in, const std::string& what);

  std::map<std::string, at::Tensor> tensors_;
  std::string metadata_json_ = "{}";
};

struct CheckpointStoreOptions {
  int keep_last = 0;  // checkpoints kept after each save, newest first; 0 = keep all
};

// A folder of checkpoint-<step, 12 digits>.ckpt files and a `latest` marker. Each checkpoint is
// written to a temporary file, fsynced and renamed; then the marker, naming it with its size and
// CRC32C, is replaced the same way. A crash at any point leaves the previous checkpoint loadable.
class CheckpointStore {
 public:
  explicit CheckpointStore(std::filesystem::path dir, CheckpointStoreOptions options = {});

  static std::string file_name(std::int64_t step);

  // Returns the checkpoint's path.
  std::filesystem::path save(const Checkpoint& checkpoint, std::int64_t step);

  // The checkpoint the marker names, or, with no marker, the highest-step complete checkpoint file;
  // nullopt when there is none. Temporary files left by a crash are ignored. Throws CheckpointError
  // when the marker names a missing file or one whose size or checksum does not match.
  std::optional<std::filesystem::path> latest_path() const;
  std::optional<Checkpoint> load_latest() const;

  // Removes the temporary files a writer killed mid-write left in the folder (see
  // io::remove_stale_temporaries); a run calls it when it starts. Returns the paths removed.
  std::vector<std::filesystem::path> remove_stale_temporaries() const;

  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
  CheckpointStoreOptions options_;
};

// Writes `tensors` with torch::pickle_save as a dict, the format of Python's torch.save:
// torch.load(path) returns {name: tensor}. Written atomically.
void export_state_dict(const std::filesystem::path& path, const std::map<std::string, at::Tensor>& tensors);
// Reads such a file (also one written by Python's torch.save of a dict of tensors).
std::map<std::string, at::Tensor> import_state_dict(const std::filesystem::path& path);

}  // namespace dtrain::io
