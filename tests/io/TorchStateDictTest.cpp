// The restricted unpickler of torch.save's state dicts (Note [A restricted unpickler for state dicts]):
// dtrain's own export and Python's torch.save of an OrderedDict read back tensor by tensor, views of
// one storage included; a pickle that names any other global, or a view past its storage, is refused.
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "dtrain/io/Checkpoint.h"
#include "dtrain/io/TorchStateDict.h"
#include "support/ScratchDir.h"

namespace dtrain::io {
namespace {

using namespace std::string_literals;  // pickles hold NUL bytes

std::string text(const std::string& s) {  // BINUNICODE
  std::string out = "X";
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>((s.size() >> (8 * i)) & 0xff));
  return out + s;
}

// torch.save's layout: data.pkl and the storage records under data/.
void write_archive(const std::filesystem::path& path, const std::string& pickle, const std::string& storage) {
  caffe2::serialize::PyTorchStreamWriter writer(path.string());
  writer.writeRecord("data.pkl", pickle.data(), pickle.size());
  if (!storage.empty()) writer.writeRecord("data/0", storage.data(), storage.size());
  writer.writeEndOfFile();
}

// {'w': a float tensor of `size` elements, stride 1, over a storage of 4}, protocol 2, as torch.save
// writes it (an OrderedDict, the hooks an empty OrderedDict).
std::string one_tensor_pickle(int size) {
  return "\x80\x02"s + "ccollections\nOrderedDict\nq\x00)Rq\x01("s + text("w") +
         "ctorch._utils\n_rebuild_tensor_v2\nq\x02(("s + text("storage") + "ctorch\nFloatStorage\nq\x03"s +
         text("0") + text("cpu") + "K\x04tQK\x00K"s + static_cast<char>(size) +
         "\x85K\x01\x85\x89h\x00)Rtq\x04Ru."s;
}

std::string four_floats() {
  const float values[4] = {1.0f, 2.0f, 3.0f, 4.0f};
  return std::string(reinterpret_cast<const char*>(values), sizeof(values));
}

TEST(TorchStateDict, ReadsAnOrderedDictPickledByHand) {
  dtrain::testing::ScratchDir dir;
  const auto file = dir.path() / "pytorch_model.bin";
  write_archive(file, one_tensor_pickle(3), four_floats());
  const auto tensors = read_torch_state_dict(file);
  ASSERT_EQ(tensors.size(), 1u);
  EXPECT_TRUE(torch::equal(tensors.at("w"), torch::tensor({1.0f, 2.0f, 3.0f})));
}

TEST(TorchStateDict, AViewPastItsStorageIsRefused) {
  dtrain::testing::ScratchDir dir;
  const auto file = dir.path() / "pytorch_model.bin";
  write_archive(file, one_tensor_pickle(5), four_floats());
  try {
    read_torch_state_dict(file);
    FAIL() << "read a tensor past its storage";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("past the 4 elements of its storage"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  }
}

TEST(TorchStateDict, APickleCallingAnythingElseIsRefusedAndCallsNothing) {
  dtrain::testing::ScratchDir dir;
  const auto marker = dir.path() / "ran";
  const auto file = dir.path() / "pytorch_model.bin";
  write_archive(file, "\x80\x02"s + "cos\nsystem\nq\x00"s + text("touch " + marker.string()) + "\x85R.", "");
  try {
    read_torch_state_dict(file);
    FAIL() << "a pickle calling os.system was read";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("names global os.system"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(marker));
}

TEST(TorchStateDict, ReadsWhatExportStateDictWrites) {
  dtrain::testing::ScratchDir dir;
  const std::map<std::string, at::Tensor> tensors{{"f", torch::randn({3, 2})},
                                                  {"i", torch::arange(5, torch::kLong)},
                                                  {"h", torch::randn({4}).to(torch::kBFloat16)}};
  export_state_dict(dir.path() / "w.pt", tensors);
  const auto back = read_torch_state_dict(dir.path() / "w.pt");
  ASSERT_EQ(back.size(), tensors.size());
  for (const auto& [name, tensor] : tensors) EXPECT_TRUE(torch::equal(back.at(name), tensor)) << name;
}

// torch.save(module.state_dict()) from Python: an OrderedDict carrying _metadata, tensors that are
// views of one storage (a transpose, a slice), several dtypes.
TEST(TorchStateDict, ReadsPythonTorchSaveOfAnOrderedDict) {
  std::string python;
  for (const std::string p : {"python3", "/usr/bin/python3"}) {
    if (python.empty() && std::system((p + " -c 'import torch' > /dev/null 2>&1").c_str()) == 0) python = p;
  }
  if (python.empty()) GTEST_SKIP() << "no python3 with torch (Debian python3-torch) is installed";
  dtrain::testing::ScratchDir dir;
  const auto file = dir.path() / "pytorch_model.bin";
  const std::string script =
      "import collections, torch\n"
      "a = torch.arange(12.).view(3, 4)\n"
      "d = collections.OrderedDict([('a', a), ('t', a.t()), ('s', a[1:, 2:]), ('l', torch.arange(3)),\n"
      "                             ('h', torch.ones(2, dtype=torch.float16))])\n"
      "d._metadata = collections.OrderedDict([('', {'version': 1})])\n"
      "torch.save(d, '" +
      file.string() + "')\n";
  std::ofstream(dir.path() / "save.py") << script;
  ASSERT_EQ(std::system((python + " " + (dir.path() / "save.py").string()).c_str()), 0);
  const auto tensors = read_torch_state_dict(file);
  const auto a = torch::arange(12, torch::kFloat).view({3, 4});
  ASSERT_EQ(tensors.size(), 5u);
  EXPECT_TRUE(torch::equal(tensors.at("a"), a));
  EXPECT_TRUE(torch::equal(tensors.at("t"), a.t()));
  EXPECT_TRUE(torch::equal(tensors.at("s"), a.slice(0, 1).slice(1, 2)));
  EXPECT_TRUE(torch::equal(tensors.at("l"), torch::arange(3, torch::kLong)));
  EXPECT_TRUE(torch::equal(tensors.at("h"), torch::ones({2}, torch::kHalf)));
}

}  // namespace
}  // namespace dtrain::io
