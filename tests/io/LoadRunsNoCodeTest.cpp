// Loading a checkpoint or a state_dict runs no code from the file (Note [Loading runs no code]):
// a TorchScript archive whose class defines __setstate__ (which torch::jit::load would run, as
// the reference below shows) is refused naming the file, and a pickle whose GLOBAL/REDUCE would
// call os.system is refused and calls nothing.
#include <caffe2/serialize/inline_container.h>
#include <gtest/gtest.h>
#include <torch/script.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "dtrain/io/Checkpoint.h"
#include "support/ScratchDir.h"

namespace dtrain::io {
namespace {

// A TorchScript module like a checkpoint (a "header" buffer), plus a __setstate__ that fails an
// assertion: when loading runs it, the error says so.
void write_archive_with_code(const std::filesystem::path& path) {
  torch::jit::Module module("__torch__.Checkpoint");
  module.register_buffer("header", torch::zeros({2}, torch::kUInt8));
  module.register_attribute("flag", c10::IntType::get(), 0);
  module.define(R"(
def __getstate__(self) -> int:
    return self.flag

def __setstate__(self, state: int) -> None:
    self.flag = state
    assert state == 12345, "code from the file ran"
)");
  module.save(path.string());
}

TEST(LoadRunsNoCode, CheckpointWithTorchScriptCodeIsRefusedNamingTheFile) {
  dtrain::testing::ScratchDir dir;
  const auto path = dir.path() / "crafted.ckpt";
  write_archive_with_code(path);
  // The reference: LibTorch's own loader runs the file's __setstate__.
  try {
    torch::jit::load(path.string());
    ADD_FAILURE() << "torch::jit::load did not run the file's __setstate__; the crafted file proves nothing";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("code from the file ran"), std::string::npos) << e.what();
  }
  try {
    Checkpoint::load(path);
    ADD_FAILURE() << "a checkpoint with code was loaded";
  } catch (const CheckpointError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path.string()), std::string::npos) << what;
    EXPECT_NE(what.find("holds TorchScript code"), std::string::npos) << what;
    EXPECT_NE(what.find("code/__torch__.py defines def "), std::string::npos) << what;
    EXPECT_EQ(what.find("code from the file ran"), std::string::npos) << what;
  }
}

TEST(LoadRunsNoCode, CheckpointsDtrainWritesStillLoad) {
  dtrain::testing::ScratchDir dir;
  Checkpoint checkpoint;
  checkpoint.set_tensor("model.w", torch::arange(6).reshape({2, 3}).to(torch::kFloat));
  checkpoint.save(dir.path() / "good.ckpt");
  EXPECT_TRUE(torch::equal(Checkpoint::load(dir.path() / "good.ckpt").tensor("model.w"),
                           checkpoint.tensor("model.w")));
}

// pickle protocol 0: os.system("touch MARKER"), the classic malicious pickle.
std::string system_pickle(const std::filesystem::path& marker) {
  return "cos\nsystem\n(S'touch " + marker.string() + "'\ntR.";
}

TEST(LoadRunsNoCode, PickleCallingOsSystemIsRefused) {
  dtrain::testing::ScratchDir dir;
  const auto marker = dir.path() / "ran";
  // As a bare pickle and inside torch.save's zip layout (archive/data.pkl).
  const auto bare = dir.path() / "bare.pt";
  std::ofstream(bare, std::ios::binary) << system_pickle(marker);
  const auto zipped = dir.path() / "zipped.pt";
  {
    const std::string pickle = system_pickle(marker);
    caffe2::serialize::PyTorchStreamWriter writer(zipped.string());
    writer.writeRecord("data.pkl", pickle.data(), pickle.size());
    writer.writeEndOfFile();
  }
  for (const auto& file : {bare, zipped}) {
    try {
      import_state_dict(file);
      ADD_FAILURE() << file << " was loaded";
    } catch (const CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(file.string()), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(marker)) << "loading " << file << " ran os.system";
  }
}

}  // namespace
}  // namespace dtrain::io
