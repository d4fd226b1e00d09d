// The safetensors reader and writer (SafeTensors.h); every check of the header is in parse_safetensors.
#include "dtrain/io/SafeTensors.h"

#include <fmt/format.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>

#include "dtrain/io/AtomicFile.h"
#include "dtrain/io/Checkpoint.h"

namespace dtrain::io {

namespace {

using nlohmann::json;

struct DtypeName {
  const char* name;
  c10::ScalarType type;
};

// The format's dtypes that LibTorch holds.
constexpr std::array<DtypeName, 10> kDtypes{{{"F64", c10::ScalarType::Double},
                                             {"F32", c10::ScalarType::Float},
                                             {"F16", c10::ScalarType::Half},
                                             {"BF16", c10::ScalarType::BFloat16},
                                             {"I64", c10::ScalarType::Long},
                                             {"I32", c10::ScalarType::Int},
                                             {"I16", c10::ScalarType::Short},
                                             {"I8", c10::ScalarType::Char},
                                             {"U8", c10::ScalarType::Byte},
                                             {"BOOL", c10::ScalarType::Bool}}};

[[noreturn]] void refuse(const std::string& file, const std::string& what) {
  throw CheckpointError("safetensors file " + file + ": " + what);
}

std::uint64_t little_endian_u64(std::string_view bytes) {
  std::uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(bytes[i]);
  return value;
}

// The header as JSON: an object of objects, no key twice, nothing nested deeper than an entry's
// fields (the lists of shape and data_offsets).
json header_json(std::string_view text, const std::string& file) {
  std::set<std::string> names;
  const auto check = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > 3) refuse(file, "the header nests deeper than name -> {field: [numbers]}");
    if (event == json::parse_event_t::key && depth == 1 && !names.insert(parsed.get<std::string>()).second) {
      refuse(file, fmt::format("tensor '{}' is named twice in the header", parsed.get<std::string>()));
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text.begin(), text.end(), check);
  } catch (const json::exception& e) {
    refuse(file, std::string("the header is not JSON (") + e.what() + ")");
  }
  if (!header.is_object()) refuse(file, "the header is not a JSON object of tensors");
  return header;
}

std::uint64_t unsigned_field(const json& value, const std::string& file, const std::string& what) {
  if (!value.is_number_unsigned()) refuse(file, what + " is not a non-negative integer");
  return value.get<std::uint64_t>();
}

SafeTensorsEntry entry_of(const std::string& name, const json& fields, std::uint64_t data_size,
                          const std::string& file) {
  const auto where = "tensor '" + name + "'";
  if (!fields.is_object()) refuse(file, where + " is not an object {dtype, shape, data_offsets}");
  for (const auto& key : {"dtype", "shape", "data_offsets"}) {
    if (!fields.contains(key)) refuse(file, fmt::format("{} has no {}", where, key));
  }
  SafeTensorsEntry entry;
  entry.name = name;
  const auto& dtype = fields["dtype"];
  const auto known = std::find_if(kDtypes.begin(), kDtypes.end(), [&](const DtypeName& d) {
    return dtype.is_string() && dtype.get<std::string>() == d.name;
  });
  if (known == kDtypes.end()) {
    refuse(file,
           fmt::format("{} has dtype {}, expected one of F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL",
                       where, dtype.dump()));
  }
  entry.dtype = known->type;
  const auto& shape = fields["shape"];
  const auto& offsets = fields["data_offsets"];
  if (!shape.is_array()) refuse(file, where + ": shape is not a list of sizes");
  if (!offsets.is_array() || offsets.size() != 2) refuse(file, where + ": data_offsets is not [begin, end]");
  // numel * itemsize, refused on overflow: no product past the data's size can be right anyway.
  std::uint64_t bytes = c10::elementSize(entry.dtype);
  for (const auto& size : shape) {
    const auto s = unsigned_field(size, file, where + ": a size of its shape");
    if (s > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) ||
        (s != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / s)) {
      refuse(file, fmt::format("{}: shape {} holds more bytes than any file", where, shape.dump()));
    }
    bytes *= s;
    entry.shape.push_back(static_cast<std::int64_t>(s));
  }
  entry.begin = unsigned_field(offsets[0], file, where + ": data_offsets[0]");
  entry.end = unsigned_field(offsets[1], file, where + ": data_offsets[1]");
  if (entry.begin > entry.end) {
    refuse(file,
           fmt::format("{}: data_offsets [{}, {}] end before they begin", where, entry.begin, entry.end));
  }
  if (entry.end > data_size) {
    refuse(file, fmt::format("{}: data_offsets [{}, {}] run past the end of the data ({} bytes)", where,
                             entry.begin, entry.end, data_size));
  }
  if (entry.end - entry.begin != bytes) {
    refuse(file,
           fmt::format("{}: dtype {} and shape {} make {} bytes, data_offsets [{}, {}] hold {}", where,
                       known->name, shape.dump(), bytes, entry.begin, entry.end, entry.end - entry.begin));
  }
  return entry;
}

}  // namespace

std::vector<SafeTensorsEntry> parse_safetensors(std::string_view bytes, const std::string& file) {
  if (bytes.size() < 8)
    refuse(file, fmt::format("{} bytes, too short for the header's length", bytes.size()));
  const std::uint64_t header_size = little_endian_u64(bytes);
  if (header_size > kSafeTensorsMaxHeader) {
    refuse(file, fmt::format("the header claims {} bytes, more than the {} read", header_size,
                             kSafeTensorsMaxHeader));
  }
  if (header_size > bytes.size() - 8) {
    refuse(file, fmt::format("the header claims {} bytes, the file holds {} after the length", header_size,
                             bytes.size() - 8));
  }
  const auto header = header_json(bytes.substr(8, header_size), file);
  const std::uint64_t data_size = bytes.size() - 8 - header_size;
  std::vector<SafeTensorsEntry> entries;
  for (const auto& [name, fields] : header.items()) {
    if (name == "__metadata__") {
      if (!fields.is_object()) refuse(file, "__metadata__ is not an object of texts");
      for (const auto& [key, value] : fields.items()) {
        if (!value.is_string()) refuse(file, "__metadata__ '" + key + "' is not a text");
      }
      continue;
    }
    entries.push_back(entry_of(name, fields, data_size, file));
  }
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  std::uint64_t covered = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const auto& e = entries[i];
    if (e.begin < covered) {
      refuse(file,
             fmt::format("tensor '{}' (bytes {}..{}) overlaps tensor '{}' (bytes {}..{})", e.name, e.begin,
                         e.end, entries[i - 1].name, entries[i - 1].begin, entries[i - 1].end));
    }
    if (e.begin > covered) {
      refuse(file, fmt::format("bytes {}..{} of the data, before tensor '{}', belong to no tensor", covered,
                               e.begin, e.name));
    }
    covered = e.end;
  }
  if (covered != data_size) {
    refuse(file, fmt::format("bytes {}..{} of the data, after the last tensor, belong to no tensor", covered,
                             data_size));
  }
  return entries;
}

std::map<std::string, at::Tensor> read_safetensors(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw CheckpointError("safetensors file " + path.string() + " cannot be opened");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string bytes = std::move(buffer).str();
  const auto entries = parse_safetensors(bytes, path.string());
  static_assert(sizeof(std::uint64_t) == 8);
  const std::uint64_t data_start = 8 + little_endian_u64(bytes);
  std::map<std::string, at::Tensor> tensors;
  for (const auto& e : entries) {
    auto tensor = torch::empty(e.shape, torch::TensorOptions().dtype(e.dtype));
    // The format is little-endian, as every host LibTorch builds for.
    if (e.end > e.begin) std::memcpy(tensor.data_ptr(), bytes.data() + data_start + e.begin, e.end - e.begin);
    tensors[e.name] = tensor;
  }
  return tensors;
}

void write_safetensors(const std::filesystem::path& path, const std::map<std::string, at::Tensor>& tensors) {
  json header = json::object();
  std::string data;
  for (const auto& [name, tensor] : tensors) {
    const auto contiguous = tensor.detach().to(torch::kCPU).contiguous();
    const auto known = std::find_if(kDtypes.begin(), kDtypes.end(),
                                    [&](const DtypeName& d) { return d.type == contiguous.scalar_type(); });
    TORCH_CHECK(known != kDtypes.end(), "write_safetensors: tensor ", name, " has dtype ",
                contiguous.scalar_type(), ", which safetensors files do not hold here");
    const auto begin = data.size();
    data.append(static_cast<const char*>(contiguous.data_ptr()), contiguous.nbytes());
    header[name] = {
        {"dtype", known->name}, {"shape", contiguous.sizes().vec()}, {"data_offsets", {begin, data.size()}}};
  }
  const std::string text = header.dump();
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((text.size() >> (8 * i)) & 0xff);
  write_file_atomic(path, bytes + text + data);
}

}  // namespace dtrain::io
