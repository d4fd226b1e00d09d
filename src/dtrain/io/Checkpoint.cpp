// Checkpoint files, the atomic CheckpointStore and the Python-readable state_dict export.
//
// Note [Checkpoint file layout]: a torch::serialize archive holding "header", a uint8 tensor of
// JSON {"format": "dtrain.checkpoint", "version": 1, "names": [...], "metadata": {...}}, and tensors
// "t0", "t1", ... in the order of "names". Tensor names stay out of archive keys because archive
// keys may not contain the dots of module paths.
#include "dtrain/io/Checkpoint.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/csrc/jit/serialization/pickler.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <iterator>
#include <sstream>

#include "dtrain/io/AtomicFile.h"
#include "dtrain/io/Crc32c.h"
#include "dtrain/util/ArchiveCode.h"

namespace dtrain::io {
namespace {

constexpr const char* kFormat = "dtrain.checkpoint";
constexpr int kVersion = 1;
constexpr const char* kMarker = "latest";

// A LibTorch error's first line, for a one-line message: c10::Error::what() carries the C++
// stack frames that say nothing to a user ("frame #0: c10::Error::Error(...)").
std::string first_line(const std::exception& e) {
  const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
  std::string text = c10_error ? c10_error->what_without_backtrace() : e.what();
  text = text.substr(0, text.find('\n'));
  return text.size() > 200 ? text.substr(0, 200) + "..." : text;
}

std::string join_names(const std::map<std::string, at::Tensor>& tensors) {
  std::string out;
  for (const auto& [name, tensor] : tensors) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "none" : out;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError("cannot open " + path.string());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

at::Tensor bytes_tensor(const std::string& text) {
  auto tensor = torch::empty({static_cast<std::int64_t>(text.size())}, torch::kUInt8);
  std::memcpy(tensor.data_ptr(), text.data(), text.size());
  return tensor;
}

// checkpoint-<12 digits>.ckpt -> step; nullopt for any other name.
std::optional<std::int64_t> step_of(const std::string& name) {
  const std::string prefix = "checkpoint-", suffix = ".ckpt";
  if (name.size() != prefix.size() + 12 + suffix.size() || name.rfind(prefix, 0) != 0 ||
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0) {
    return std::nullopt;
  }
  const std::string digits = name.substr(prefix.size(), 12);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(digits);
}

}  // namespace

void Checkpoint::set_tensor(const std::string& name, const at::Tensor& tensor) {
  TORCH_CHECK(tensor.defined(), "checkpoint tensor \"", name, "\" is undefined; store only defined tensors");
  tensors_[name] = tensor.detach().to(torch::kCPU).contiguous().clone();
}

const at::Tensor& Checkpoint::tensor(const std::string& name) const {
  const auto it = tensors_.find(name);
  if (it == tensors_.end()) {
    throw CheckpointError("checkpoint has no tensor \"" + name + "\"; it has: " + join_names(tensors_));
  }
  return it->second;
}

void Checkpoint::set_metadata(const nlohmann::json& metadata) {
  metadata_json_ = metadata.dump();
}

nlohmann::json Checkpoint::metadata() const {
  return nlohmann::json::parse(metadata_json_);
}

void Checkpoint::set_module_state(const std::string& prefix, const torch::nn::Module& module) {
  for (const auto& item : module.named_parameters(/*recurse=*/true))
    set_tensor(prefix + "." + item.key(), item.value());
  for (const auto& item : module.named_buffers(/*recurse=*/true))
    set_tensor(prefix + "." + item.key(), item.value());
}

void Checkpoint::load_module_state(const std::string& prefix, torch::nn::Module& module) const {
  torch::NoGradGuard no_grad;
  auto load = [&](const std::string& name, at::Tensor& target) {
    const auto key = prefix + "." + name;
    const auto it = tensors_.find(key);
    if (it == tensors_.end()) {
      throw CheckpointError(
          "checkpoint has no tensor \"" + key +
          "\" for the module; was it saved from a different model? It has: " + join_names(tensors_));
    }
    if (it->second.sizes() != target.sizes()) {
      std::ostringstream message;
      message << "checkpoint tensor \"" << key << "\" has shape " << it->second.sizes()
              << " but the module expects " << target.sizes()
              << "; the checkpoint was saved from a different model configuration";
      throw CheckpointError(message.str());
    }
    target.copy_(it->second);
  };
  for (auto& item : module.named_parameters(/*recurse=*/true)) load(item.key(), item.value());
  for (auto& item : module.named_buffers(/*recurse=*/true)) load(item.key(), item.value());
}

void Checkpoint::write(const ByteSink& sink) const {
  nlohmann::json header = {{"format", kFormat}, {"version", kVersion}, {"names", nlohmann::json::array()}};
  header["metadata"] = nlohmann::json::parse(metadata_json_);
  torch::serialize::OutputArchive archive;
  std::size_t index = 0;
  for (const auto& [name, tensor] : tensors_) {
    header["names"].push_back(name);
    archive.write("t" + std::to_string(index++), tensor);
  }
  archive.write("header", bytes_tensor(header.dump()));
  // The sink never fails mid-stream (see Note [Failed writes]), so torch's writer always finishes.
  archive.save_to([&](const void* data, std::size_t size) -> std::size_t {
    sink(data, size);
    return size;
  });
}

void Checkpoint::save(const std::filesystem::path& path) const {
  stream_file_atomic(path, [&](const ByteSink& sink) { write(sink); });
}

Checkpoint Checkpoint::read(std::istream& in, const std::string& what) {
  torch::serialize::InputArchive archive;
  nlohmann::json header;
  try {
    util::load_archive_without_code(archive, in, what);
  } catch (const std::invalid_argument& e) {
    throw CheckpointError(e.what());
  } catch (const std::exception& e) {
    throw CheckpointError(what + " cannot be read (" + first_line(e) +
                          "); it is truncated, corrupt or not a dtrain checkpoint");
  }
  try {
    at::Tensor header_bytes;
    archive.read("header", header_bytes);
    // A corrupt file may give the header another dtype or strides (an expanded tensor's numel
    // exceeds its bytes): only a flat byte tensor is read as text.
    if (header_bytes.scalar_type() != torch::kUInt8 || header_bytes.dim() != 1 ||
        !header_bytes.is_contiguous()) {
      throw std::runtime_error("its header is not a flat byte tensor");
    }
    header = nlohmann::json::parse(std::string(static_cast<const char*>(header_bytes.data_ptr()),
                                               static_cast<std::size_t>(header_bytes.numel())));
  } catch (const std::exception& e) {
    throw CheckpointError(what + " cannot be read (" + first_line(e) +
                          "); it is truncated, corrupt or not a dtrain checkpoint");
  }
  // A header that parses but is not what save() writes (a key missing or of another type, found
  // by fuzzing: nlohmann's at() threw out of load) is corrupt, not another format.
  const auto malformed = [&](const std::string& problem) {
    return CheckpointError(what + " has a malformed header (" + problem +
                           "); it is corrupt or not a dtrain checkpoint");
  };
  if (!header.is_object() || !header.contains("format") || !header["format"].is_string() ||
      !header.contains("version") || !header["version"].is_number_integer()) {
    throw malformed("no format and version");
  }
  if (header.value("format", "") != kFormat || header.value("version", 0) != kVersion) {
    throw CheckpointError(what + " has format " + header.value("format", "?") + " version " +
                          std::to_string(header.value("version", 0)) + "; this dtrain reads " + kFormat +
                          " version " + std::to_string(kVersion));
  }
  if (!header.contains("names") || !header["names"].is_array() || !header.contains("metadata") ||
      !header["metadata"].is_object()) {
    throw malformed("no list of names, or no metadata");
  }
  for (const auto& name : header["names"]) {
    if (!name.is_string()) throw malformed("a tensor name that is not a string");
  }
  Checkpoint checkpoint;
  const auto& names = header.at("names");
  for (std::size_t i = 0; i < names.size(); ++i) {
    at::Tensor tensor;
    try {
      archive.read("t" + std::to_string(i), tensor);
    } catch (const std::exception& e) {
      throw CheckpointError(what + " lacks tensor \"" + names[i].get<std::string>() +
                            "\"; the file is corrupt");
    }
    checkpoint.tensors_[names[i].get<std::string>()] = tensor;
  }
  checkpoint.metadata_json_ = header.at("metadata").dump();
  return checkpoint;
}

Checkpoint Checkpoint::load(const std::filesystem::path& path) {
  if (!std::filesystem::is_regular_file(path)) {
    throw CheckpointError("checkpoint " + path.string() + " does not exist");
  }
  std::ifstream in(path, std::ios::binary);
  return read(in, "checkpoint " + path.string());
}

std::string Checkpoint::to_bytes() const {
  std::string bytes;
  write([&](const void* data, std::size_t size) { bytes.append(static_cast<const char*>(data), size); });
  return bytes;
}

Checkpoint Checkpoint::from_bytes(const std::string& bytes, const std::string& what) {
  std::istringstream in(bytes, std::ios::binary);
  return read(in, what);
}

CheckpointStore::CheckpointStore(std::filesystem::path dir, CheckpointStoreOptions options)
    : dir_(std::move(dir)), options_(options) {
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  if (error) {
    throw CheckpointError("cannot create the checkpoint folder " + dir_.string() + ": " + error.message());
  }
}

std::string CheckpointStore::file_name(std::int64_t step) {
  TORCH_CHECK(step >= 0 && step < 1000000000000LL, "checkpoint step must be in [0, 10^12), got ", step);
  char name[64];
  std::snprintf(name, sizeof(name), "checkpoint-%012lld.ckpt", static_cast<long long>(step));
  return name;
}

std::filesystem::path CheckpointStore::save(const Checkpoint& checkpoint, std::int64_t step) {
  const auto path = dir_ / file_name(step);
  const auto written = stream_file_atomic(path, [&](const ByteSink& sink) { checkpoint.write(sink); });
  // The marker names the file with its size and checksum, so a loader can tell it is intact.
  char marker[160];
  std::snprintf(marker, sizeof(marker), "%s %llu %08x\n", path.filename().c_str(),
                static_cast<unsigned long long>(written.bytes), written.crc32c);
  write_file_atomic(dir_ / kMarker, marker);
  if (options_.keep_last > 0) {
    std::vector<std::pair<std::int64_t, std::filesystem::path>> existing;
    for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
      if (const auto s = step_of(entry.path().filename().string())) existing.emplace_back(*s, entry.path());
    }
    std::sort(existing.begin(), existing.end(),
              [](const auto& a, const auto& b) { return a.first > b.first; });
    for (std::size_t i = static_cast<std::size_t>(options_.keep_last); i < existing.size(); ++i) {
      if (existing[i].second != path) std::filesystem::remove(existing[i].second);
    }
  }
  return path;
}

std::optional<std::filesystem::path> CheckpointStore::latest_path() const {
  const auto marker_path = dir_ / kMarker;
  if (std::filesystem::exists(marker_path)) {
    std::istringstream marker(read_file(marker_path));
    std::string name;
    std::size_t size = 0;
    std::string crc_text;
    if (!(marker >> name >> size >> crc_text) || name.find('/') != std::string::npos) {
      throw CheckpointError(
          "checkpoint marker " + marker_path.string() +
          " is malformed (expected \"<file> <bytes> <crc32c>\"); delete it to fall back to the "
          "newest checkpoint file");
    }
    const auto path = dir_ / name;
    if (!std::filesystem::is_regular_file(path)) {
      throw CheckpointError(
          "checkpoint marker " + marker_path.string() + " names " + name +
          ", which does not exist; restore the file or delete the marker to fall back to the "
          "newest checkpoint file");
    }
    const std::string bytes = read_file(path);
    char crc[16];
    std::snprintf(crc, sizeof(crc), "%08x", crc32c(bytes.data(), bytes.size()));
    if (bytes.size() != size || crc_text != crc) {
      throw CheckpointError("checkpoint " + path.string() + " is corrupt: the marker records " +
                            std::to_string(size) + " bytes with CRC32C " + crc_text + ", the file has " +
                            std::to_string(bytes.size()) + " bytes with CRC32C " + crc +
                            "; delete it and the marker to resume from an older one");
    }
    return path;
  }
  // No marker: a crash before the first marker, or a folder filled by hand. Renamed files are
  // complete; temporary ones never match the checkpoint name pattern.
  std::optional<std::pair<std::int64_t, std::filesystem::path>> newest;
  if (!std::filesystem::is_directory(dir_)) return std::nullopt;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    if (is_temporary_file(entry.path())) continue;
    const auto s = step_of(entry.path().filename().string());
    if (s && (!newest || *s > newest->first)) newest.emplace(*s, entry.path());
  }
  if (!newest) return std::nullopt;
  return newest->second;
}

std::vector<std::filesystem::path> CheckpointStore::remove_stale_temporaries() const {
  return io::remove_stale_temporaries(dir_);
}

std::optional<Checkpoint> CheckpointStore::load_latest() const {
  const auto path = latest_path();
  if (!path) return std::nullopt;
  return Checkpoint::load(*path);
}

// Note [A state dict that torch.load reads with weights_only]
// torch::pickle_save tags every dict with its key and value types through a call of
// torch.jit._pickle.restore_type_tag, which PyTorch 2.6's torch.load refuses by default
// (weights_only=True: "Unsupported global"; seen against torch 2.11). Python's own
// torch.save writes a plain dict, so this writes what pickle_save writes with the tags left out:
// the same zip archive ("data.pkl" and one record per tensor). torch::pickle_load still reads it,
// as a dict of IValue to IValue.
void export_state_dict(const std::filesystem::path& path, const std::map<std::string, at::Tensor>& tensors) {
  c10::Dict<std::string, at::Tensor> dict;
  for (const auto& [name, tensor] : tensors) dict.insert(name, tensor.detach().to(torch::kCPU).contiguous());
  std::vector<char> pickled;
  torch::jit::Pickler pickler(
      [&](const char* data, size_t size) { pickled.insert(pickled.end(), data, data + size); },
      /*tensor_table=*/nullptr, /*type_renamer=*/nullptr, /*memoized_class_types=*/nullptr,
      /*get_tensor_id=*/nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(c10::IValue(dict));
  pickler.stop();
  std::string bytes;
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  torch::jit::writeArchiveAndTensors("data", pickled.data(), pickled.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
  write_file_atomic(path, bytes);
}

std::map<std::string, at::Tensor> import_state_dict(const std::filesystem::path& path) {
  const std::string bytes = read_file(path);
  c10::IValue value;
  try {
    std::istringstream archive(bytes);
    util::check_archive(archive);  // Note [Checking an archive before LibTorch reads it]
    value = torch::pickle_load(std::vector<char>(bytes.begin(), bytes.end()));
  } catch (const std::exception& e) {
    throw CheckpointError(path.string() + " is not a torch.save file (" + first_line(e) + ")");
  }
  if (!value.isGenericDict()) {
    throw CheckpointError(path.string() + " holds a " + value.tagKind() +
                          ", expected a dict of name -> tensor (a state_dict)");
  }
  std::map<std::string, at::Tensor> result;
  for (const auto& entry : value.toGenericDict()) {
    if (!entry.key().isString() || !entry.value().isTensor()) {
      throw CheckpointError(path.string() + " holds a dict whose entries are not name -> tensor");
    }
    result[entry.key().toStringRef()] = entry.value().toTensor();
  }
  return result;
}

}  // namespace dtrain::io
