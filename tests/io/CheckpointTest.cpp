// Checkpoints: identical tensors and metadata after a save/load, the atomic store with its
// `latest` marker, crash leftovers ignored, clear errors for a broken marker or file, and the
// state_dict export read back by Python's torch.load.
#include "dtrain/io/Checkpoint.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "dtrain/io/AtomicFile.h"
#include "support/ScratchDir.h"

namespace dtrain::io {
namespace {

Checkpoint make_checkpoint(std::int64_t step) {
  torch::manual_seed(step);
  Checkpoint checkpoint;
  checkpoint.set_tensor("model.fc1.weight", torch::randn({4, 3}));
  checkpoint.set_tensor("model.fc1.bias", torch::randn({4}));
  checkpoint.set_tensor("optim.step", torch::tensor({step}, torch::kInt64));
  checkpoint.set_tensor("rng.cpu", at::detail::getDefaultCPUGenerator().get_state());
  checkpoint.set_metadata(
      {{"step", step}, {"epoch", 2}, {"sampler", {{"position", 640}}}, {"config", "name: x"}});
  return checkpoint;
}

void expect_identical(const Checkpoint& a, const Checkpoint& b) {
  ASSERT_EQ(a.tensors().size(), b.tensors().size());
  for (const auto& [name, tensor] : a.tensors()) {
    ASSERT_TRUE(b.contains(name)) << name;
    EXPECT_EQ(tensor.dtype(), b.tensor(name).dtype()) << name;
    EXPECT_TRUE(torch::equal(tensor, b.tensor(name))) << name;
  }
  EXPECT_EQ(a.metadata(), b.metadata());
}

TEST(Checkpoint, SaveLoadGivesIdenticalTensorsAndMetadata) {
  dtrain::testing::ScratchDir dir;
  const auto original = make_checkpoint(7);
  EXPECT_EQ(original.tensor("rng.cpu").dtype(), torch::kUInt8);
  original.save(dir.path() / "c.ckpt");
  const auto loaded = Checkpoint::load(dir.path() / "c.ckpt");
  expect_identical(original, loaded);
  EXPECT_EQ(loaded.metadata().at("sampler").at("position"), 640);
  EXPECT_THROW(loaded.tensor("nope"), CheckpointError);
}

// What a peer sends an elastic job's newcomer: the file's bytes, without a file.
TEST(Checkpoint, BytesInMemoryRoundTripAndBadBytesAreRefusedNamingTheirSource) {
  const auto original = make_checkpoint(7);
  const auto bytes = original.to_bytes();
  expect_identical(original, Checkpoint::from_bytes(bytes, "the state from rank 2"));
  dtrain::testing::ScratchDir dir;
  original.save(dir.path() / "c.ckpt");
  EXPECT_EQ(std::filesystem::file_size(dir.path() / "c.ckpt"), bytes.size());
  try {
    Checkpoint::from_bytes(bytes.substr(0, bytes.size() / 2), "the state from rank 2");
    FAIL() << "half a checkpoint was read";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("the state from rank 2"), std::string::npos) << e.what();
  }
}

TEST(Checkpoint, StoredTensorsAreCopies) {
  auto t = torch::zeros({3});
  Checkpoint checkpoint;
  checkpoint.set_tensor("t", t);
  t.add_(1);
  EXPECT_EQ(checkpoint.tensor("t").sum().item<float>(), 0.0f);
}

TEST(Checkpoint, ModuleStateRoundTrip) {
  torch::manual_seed(1);
  torch::nn::Sequential a(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
  torch::nn::Sequential b(torch::nn::Linear(3, 4), torch::nn::BatchNorm1d(4));
  a->train();
  a->forward(torch::randn({8, 3}));  // moves the running statistics (buffers) off their initial values
  Checkpoint checkpoint;
  checkpoint.set_module_state("model", *a);
  EXPECT_TRUE(checkpoint.contains("model.0.weight"));
  EXPECT_TRUE(checkpoint.contains("model.1.running_mean"));
  checkpoint.load_module_state("model", *b);
  for (const auto& item : a->named_parameters())
    EXPECT_TRUE(torch::equal(item.value(), b->named_parameters()[item.key()]));
  for (const auto& item : a->named_buffers())
    EXPECT_TRUE(torch::equal(item.value(), b->named_buffers()[item.key()]));
  torch::nn::Sequential wrong(torch::nn::Linear(3, 5), torch::nn::BatchNorm1d(5));
  try {
    checkpoint.load_module_state("model", *wrong);
    FAIL() << "expected a CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("model.0.weight"), std::string::npos) << e.what();
  }
}

// A header that is valid JSON but not what save() writes (fuzzing found one without "names" ending
// the process through nlohmann's exception), or a header tensor that is not flat bytes, is refused
// as corrupt naming the file.
TEST(Checkpoint, MalformedHeadersAreRefusedNamingTheFile) {
  dtrain::testing::ScratchDir dir;
  const auto write = [&](const std::string& name, const at::Tensor& header) {
    torch::serialize::OutputArchive archive;
    archive.write("t0", torch::ones({2}));
    archive.write("header", header);
    archive.save_to((dir.path() / name).string());
    return dir.path() / name;
  };
  const auto bytes = [](const std::string& text) {
    return torch::from_blob(const_cast<char*>(text.data()), {static_cast<std::int64_t>(text.size())},
                            torch::kUInt8)
        .clone();
  };
  const std::string versioned = R"("format": "dtrain.checkpoint", "version": 1)";
  const std::vector<std::pair<at::Tensor, std::string>> cases{
      {bytes("{" + versioned + R"(, "metadata": {}})"), "no list of names, or no metadata"},
      {bytes("{" + versioned + R"(, "names": ["a"]})"), "no list of names, or no metadata"},
      {bytes("{" + versioned + R"(, "names": [7], "metadata": {}})"), "a tensor name that is not a string"},
      {bytes(R"([1, 2])"), "no format and version"},
      {bytes(R"({"format": 3, "version": 1})"), "no format and version"},
      {bytes("{}").to(torch::kFloat), "not a flat byte tensor"},
      {bytes("{").expand({4}), "not a flat byte tensor"},
  };
  int index = 0;
  for (const auto& [header, expected] : cases) {
    const auto path = write("case" + std::to_string(index++) + ".ckpt", header);
    try {
      Checkpoint::load(path);
      ADD_FAILURE() << "case " << index - 1 << " loaded";
    } catch (const CheckpointError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(path.string()), std::string::npos) << what;
      EXPECT_NE(what.find(expected), std::string::npos) << what;
    }
  }
}

TEST(CheckpointStore, LatestMarkerNamesTheNewest) {
  dtrain::testing::ScratchDir dir;
  CheckpointStore store(dir.path());
  EXPECT_FALSE(store.latest_path().has_value());
  EXPECT_FALSE(store.load_latest().has_value());
  store.save(make_checkpoint(100), 100);
  const auto newest = make_checkpoint(200);
  const auto path = store.save(newest, 200);
  EXPECT_EQ(path.filename(), "checkpoint-000000000200.ckpt");
  EXPECT_EQ(store.latest_path(), path);
  std::ifstream marker(dir.path() / "latest");
  std::string name;
  marker >> name;
  EXPECT_EQ(name, "checkpoint-000000000200.ckpt");
  expect_identical(*store.load_latest(), newest);
  // The marker, not the file names, decides: saving an older step again makes it the latest.
  store.save(make_checkpoint(150), 150);
  EXPECT_EQ(store.latest_path()->filename(), "checkpoint-000000000150.ckpt");
}

TEST(CheckpointStore, StaleTemporaryFileIsIgnored) {
  dtrain::testing::ScratchDir dir;
  CheckpointStore store(dir.path());
  store.save(make_checkpoint(1), 1);
  // A crash mid-write leaves a partial temporary file, newer than the marker's checkpoint.
  const auto stale = temporary_path_for(dir.path() / CheckpointStore::file_name(2));
  std::ofstream(stale) << "partial";
  EXPECT_TRUE(is_temporary_file(stale));
  EXPECT_EQ(store.latest_path()->filename(), CheckpointStore::file_name(1));
  // Without a marker (a crash before the first one was written), the newest complete file wins.
  std::filesystem::remove(dir.path() / "latest");
  store.save(make_checkpoint(3), 3);
  std::filesystem::remove(dir.path() / "latest");
  EXPECT_EQ(store.latest_path()->filename(), CheckpointStore::file_name(3));
  expect_identical(*store.load_latest(), make_checkpoint(3));
  // No temporary file is left by a successful save.
  int leftovers = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    leftovers += is_temporary_file(entry.path()) && entry.path() != stale;
  }
  EXPECT_EQ(leftovers, 0);
}

TEST(CheckpointStore, BrokenMarkerTargetsAreClearErrors) {
  dtrain::testing::ScratchDir dir;
  CheckpointStore store(dir.path());
  const auto path = store.save(make_checkpoint(5), 5);
  // Corrupt: same size, one byte flipped.
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(100);
    char c;
    file.get(c);
    file.seekp(100);
    file.put(static_cast<char>(c ^ 0x5A));
  }
  try {
    store.latest_path();
    FAIL() << "expected a CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("corrupt"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
  try {
    store.load_latest();
    FAIL() << "expected a CheckpointError";
  } catch (const CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("checkpoint-000000000005.ckpt"), std::string::npos) << e.what();
  }
  // A file that is not a checkpoint at all.
  std::ofstream(dir.path() / "junk.ckpt") << "not a zip archive";
  EXPECT_THROW(Checkpoint::load(dir.path() / "junk.ckpt"), CheckpointError);
}

TEST(CheckpointStore, KeepLastRemovesOlderCheckpoints) {
  dtrain::testing::ScratchDir dir;
  CheckpointStore store(dir.path(), CheckpointStoreOptions{2});
  for (std::int64_t step : {10, 20, 30}) store.save(make_checkpoint(step), step);
  EXPECT_FALSE(std::filesystem::exists(dir.path() / CheckpointStore::file_name(10)));
  EXPECT_TRUE(std::filesystem::exists(dir.path() / CheckpointStore::file_name(20)));
  EXPECT_TRUE(std::filesystem::exists(dir.path() / CheckpointStore::file_name(30)));
}

std::map<std::string, at::Tensor> sample_state_dict() {
  torch::manual_seed(3);
  return {{"fc.weight", torch::randn({2, 3})},
          {"fc.bias", torch::arange(2, torch::kFloat32)},
          {"bn.num_batches_tracked", torch::tensor(7, torch::kInt64)}};
}

TEST(StateDictExport, RoundTripInCpp) {
  dtrain::testing::ScratchDir dir;
  const auto tensors = sample_state_dict();
  export_state_dict(dir.path() / "w.pt", tensors);
  const auto back = import_state_dict(dir.path() / "w.pt");
  ASSERT_EQ(back.size(), tensors.size());
  for (const auto& [name, tensor] : tensors) EXPECT_TRUE(torch::equal(back.at(name), tensor)) << name;
}

// The first interpreter that imports torch: a pyenv or venv python3 on PATH may lack Debian's
// python3-torch, which lives with /usr/bin/python3.
std::string python_with_torch() {
  for (const std::string python : {"python3", "/usr/bin/python3"}) {
    if (std::system((python + " -c 'import torch' > /dev/null 2>&1").c_str()) == 0) return python;
  }
  return "";
}

// weights_only=True: PyTorch 2.6's default (Note [A state dict that torch.load reads with weights_only]).
TEST(StateDictExport, PythonTorchLoadReadsADict) {
  const std::string python = python_with_torch();
  if (python.empty()) GTEST_SKIP() << "no python3 with torch (Debian python3-torch) is installed";
  dtrain::testing::ScratchDir dir;
  const auto path = dir.path() / "w.pt";
  export_state_dict(path, sample_state_dict());
  const auto out = dir.path() / "out.txt";
  const std::string command =
      python + " -c \"import torch; d = torch.load('" + path.string() +
      "', weights_only=True); print(type(d).__name__, sorted(d.keys()), round(float(d['fc.bias'][1]), "
      "3), int(d['bn.num_batches_tracked']))\" > " +
      out.string() + " 2>&1";
  ASSERT_EQ(std::system(command.c_str()), 0) << std::ifstream(out).rdbuf();
  std::ifstream in(out);
  std::string line;
  std::getline(in, line);
  EXPECT_EQ(line, "dict ['bn.num_batches_tracked', 'fc.bias', 'fc.weight'] 1.0 7");
}

}  // namespace
}  // namespace dtrain::io
