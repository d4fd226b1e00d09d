// safetensors: files written here byte by byte read back tensor by tensor; the writer's files read
// back equal; and every malformed header (Note [A safetensors header is checked whole]) is refused
// naming the file and the tensor.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "dtrain/io/Checkpoint.h"
#include "dtrain/io/SafeTensors.h"
#include "support/ScratchDir.h"

namespace dtrain::io {
namespace {

std::string length_prefix(std::uint64_t n) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out;
}

// A file of `header` (JSON text) and `data_bytes` bytes of data (0, 1, 2, ...).
std::string file_bytes(const std::string& header, std::size_t data_bytes) {
  std::string data(data_bytes, '\0');
  for (std::size_t i = 0; i < data_bytes; ++i) data[i] = static_cast<char>(i);
  return length_prefix(header.size()) + header + data;
}

std::filesystem::path write(const dtrain::testing::ScratchDir& dir, const std::string& name,
                            const std::string& bytes) {
  const auto path = dir.path() / name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(SafeTensors, ReadsAFileWrittenByHand) {
  dtrain::testing::ScratchDir dir;
  // Two float32 values 1.5 and -2, then an int64 7; metadata and trailing spaces in the header, as
  // the format's own writer pads it.
  std::string data(16, '\0');
  const float w[2] = {1.5f, -2.0f};
  const std::int64_t b = 7;
  std::memcpy(data.data(), w, 8);
  std::memcpy(data.data() + 8, &b, 8);
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]},)"
      R"("n":{"dtype":"I64","shape":[],"data_offsets":[8,16]}}    )";
  const auto path = write(dir, "model.safetensors", length_prefix(header.size()) + header + data);
  const auto tensors = read_safetensors(path);
  ASSERT_EQ(tensors.size(), 2u);
  EXPECT_TRUE(torch::equal(tensors.at("w"), torch::tensor({{1.5f, -2.0f}})));
  EXPECT_EQ(tensors.at("n").dim(), 0);
  EXPECT_EQ(tensors.at("n").item<std::int64_t>(), 7);
}

TEST(SafeTensors, WriterRoundTripsEveryDtype) {
  dtrain::testing::ScratchDir dir;
  torch::manual_seed(0);
  const std::map<std::string, at::Tensor> tensors{{"f32", torch::randn({3, 4})},
                                                  {"f64", torch::randn({5}, torch::kDouble)},
                                                  {"bf16", torch::randn({2, 2}).to(torch::kBFloat16)},
                                                  {"f16", torch::randn({2}).to(torch::kHalf)},
                                                  {"i64", torch::arange(6, torch::kLong).view({2, 3})},
                                                  {"bool", torch::tensor({true, false, true})},
                                                  {"empty", torch::zeros({0, 3})},
                                                  {"u8", torch::arange(4, torch::kByte)}};
  const auto path = dir.path() / "all.safetensors";
  write_safetensors(path, tensors);
  const auto back = read_safetensors(path);
  ASSERT_EQ(back.size(), tensors.size());
  for (const auto& [name, tensor] : tensors) {
    EXPECT_EQ(back.at(name).scalar_type(), tensor.scalar_type()) << name;
    EXPECT_TRUE(torch::equal(back.at(name), tensor)) << name;
  }
}

struct Malformed {
  const char* case_name;
  std::string bytes;
  std::vector<std::string> said;  // what the refusal must name, besides the file
};

std::vector<Malformed> malformed_files() {
  const std::string w8 = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  return {
      {"TooShort", "\x05\x00\x00", {"too short"}},
      {"HeaderOverTheLimit", length_prefix(200'000'000) + "{}", {"200000000", "more than the 100000000"}},
      {"HeaderPastTheEnd", length_prefix(64) + "{}", {"claims 64 bytes"}},
      {"NotJson", file_bytes("{\"w\": [", 0), {"not JSON"}},
      {"NotAnObject", file_bytes("[1, 2]", 0), {"not a JSON object"}},
      {"EntryNotAnObject", file_bytes(R"({"w": 3})", 0), {"tensor 'w'", "not an object"}},
      {"MissingField",
       file_bytes(R"({"w":{"dtype":"F32","data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "no shape"}},
      {"UnknownDtype",
       file_bytes(R"({"w":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", 2),
       {"tensor 'w'", "F8_E4M3"}},
      {"NegativeSize",
       file_bytes(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "non-negative"}},
      {"OverflowingShape",
       file_bytes(R"({"w":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "more bytes than any file"}},
      {"OffsetsPastTheEnd",
       file_bytes("{" + w8 + "}", 4),
       {"tensor 'w'", "run past the end of the data (4 bytes)"}},
      {"OffsetsBackwards",
       file_bytes(R"({"w":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
       {"tensor 'w'", "end before they begin"}},
      {"ShapeNotTheByteCount",
       file_bytes(R"({"w":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", 8),
       {"tensor 'w'", "make 16 bytes", "hold 8"}},
      {"Overlapping",
       file_bytes("{" + w8 + R"(,"v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
       {"tensor 'v'", "overlaps tensor 'w'"}},
      {"Gap",
       file_bytes(R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
       {"before tensor 'w'", "belong to no tensor"}},
      {"TrailingBytes", file_bytes("{" + w8 + "}", 12), {"bytes 8..12", "after the last tensor"}},
      {"NamedTwice", file_bytes("{" + w8 + "," + w8 + "}", 8), {"tensor 'w' is named twice"}},
      {"MetadataNotText", file_bytes(R"({"__metadata__":{"a":1}})", 0), {"__metadata__ 'a'"}},
      {"TooDeep",
       file_bytes(R"({"w":{"dtype":"F32","shape":[[2]],"data_offsets":[0,8]}})", 8),
       {"nests deeper"}},
  };
}

class SafeTensorsMalformed : public ::testing::TestWithParam<Malformed> {};

TEST_P(SafeTensorsMalformed, IsRefusedNamingTheFileAndTheTensor) {
  dtrain::testing::ScratchDir dir;
  const auto path = write(dir, std::string(GetParam().case_name) + ".safetensors", GetParam().bytes);
  try {
    read_safetensors(path);
    FAIL() << "read a malformed file";
  } catch (const CheckpointError& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    for (const auto& said : GetParam().said) EXPECT_NE(message.find(said), std::string::npos) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(EveryCase, SafeTensorsMalformed, ::testing::ValuesIn(malformed_files()),
                         [](const auto& info) { return std::string(info.param.case_name); });

TEST(SafeTensors, MissingFileIsRefusedByName) {
  EXPECT_THROW(read_safetensors("/nonexistent/model.safetensors"), CheckpointError);
}

}  // namespace
}  // namespace dtrain::io
