// Reading safetensors files (Hugging Face's model.safetensors): an 8-byte little-endian header
// length, a JSON header {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
// {text: text}}, then the tensors' bytes, offsets counted from the end of the header.
//
// Note [A safetensors header is checked whole]
// Nothing in the header is trusted before it is checked against the file, as the format's own
// reader does: the header's length (at most 100 MB, within the file), each tensor's dtype (one of
// those below), shape (non-negative sizes whose element count times the dtype's size is its byte
// count, without overflow) and offsets (begin <= end, within the data); and the tensors together
// cover the data exactly, in order, without overlap or gap. A file that fails is refused naming the
// file and the tensor. Only then is any tensor allocated.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain::io {

// The largest header read (the format's own reader's limit).
inline constexpr std::uint64_t kSafeTensorsMaxHeader = 100'000'000;

struct SafeTensorsEntry {
  std::string name;
  c10::ScalarType dtype = c10::ScalarType::Float;
  std::vector<std::int64_t> shape;
  std::uint64_t begin = 0;  // byte offsets into the data, which starts after the header
  std::uint64_t end = 0;
};

// The entries of the safetensors file whose bytes are `bytes` (the whole file), sorted by offset,
// every one checked (Note [A safetensors header is checked whole]). `file` names it in errors.
// Throws io::CheckpointError.
std::vector<SafeTensorsEntry> parse_safetensors(std::string_view bytes, const std::string& file);

// Every tensor of the file at `path` by name (CPU, the file's dtypes). Throws io::CheckpointError.
std::map<std::string, at::Tensor> read_safetensors(const std::filesystem::path& path);

// Writes `tensors` as a safetensors file (atomically), with the header's keys in name order.
// Supported dtypes: those read above.
void write_safetensors(const std::filesystem::path& path, const std::map<std::string, at::Tensor>& tensors);

}  // namespace dtrain::io
