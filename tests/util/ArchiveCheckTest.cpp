// Note [Checking an archive before LibTorch reads it]: a dtrain checkpoint and a state_dict pass;
// each number LibTorch 1.13 trusts (a pickle's length field, a storage's element count, a zip
// record's size and place) is refused, naming it, when it claims more than the file holds; and the
// pickle walker knows every opcode's argument.
#include "dtrain/util/ArchiveCheck.h"
#include "dtrain/util/ArchiveCode.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>

#include "dtrain/io/Checkpoint.h"
#include "support/Files.h"
#include "support/ScratchDir.h"

namespace dtrain::util {
namespace {

using dtrain::testing::read_file;
using dtrain::testing::write_file;

// A checkpoint as dtrain writes it: t0 is six floats (24 bytes in record data/0).
std::string checkpoint_bytes(const std::filesystem::path& dir) {
  io::Checkpoint checkpoint;
  checkpoint.set_tensor("model.w", torch::arange(6).reshape({2, 3}).to(torch::kFloat));
  checkpoint.save(dir / "good.ckpt");
  return read_file(dir / "good.ckpt");
}

// Replaces the one occurrence of `from` in `bytes` by `to` (same length).
std::string patched(std::string bytes, const std::string& from, const std::string& to) {
  EXPECT_EQ(from.size(), to.size());
  const auto at = bytes.find(from);
  EXPECT_NE(at, std::string::npos) << "the archive's layout changed: update the test";
  EXPECT_EQ(bytes.find(from, at + 1), std::string::npos);
  if (at != std::string::npos) bytes.replace(at, from.size(), to);
  return bytes;
}

// The central-directory entry of the record whose name ends with `suffix`: its offset in `bytes`.
std::size_t directory_entry(const std::string& bytes, const std::string& suffix) {
  for (auto at = bytes.find("PK\x01\x02"); at != std::string::npos; at = bytes.find("PK\x01\x02", at + 1)) {
    const auto name_length =
        static_cast<unsigned char>(bytes[at + 28]) | static_cast<unsigned char>(bytes[at + 29]) << 8;
    const std::string name = bytes.substr(at + 46, name_length);
    if (name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
      return at;
  }
  ADD_FAILURE() << "no record ends with " << suffix;
  return 0;
}

void put_le32(std::string& bytes, std::size_t at, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>((value >> (8 * i)) & 0xFF);
}

std::string refusal(const std::string& bytes) {
  std::istringstream in(bytes);
  try {
    check_archive(in);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

std::string pickle_refusal(const std::string& pickle, const std::map<std::string, ZipRecord>& records = {}) {
  try {
    archive_detail::check_pickle("data.pkl", pickle, "data/", records);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

TEST(ArchiveCheck, CheckpointsAndStateDictsDtrainWritesPass) {
  dtrain::testing::ScratchDir dir;
  const std::string bytes = checkpoint_bytes(dir.path());
  std::istringstream in(bytes);
  const auto records = zip_records(in);
  ASSERT_TRUE(records.count("data.pkl"));
  ASSERT_TRUE(records.count("data/0"));
  EXPECT_EQ(records.at("data/0").size, 24U);
  EXPECT_EQ(records.at("data/0").method, 0);
  EXPECT_EQ(refusal(bytes), "");
  io::export_state_dict(dir.path() / "state.pt", {{"w", torch::ones({3, 5})}, {"b", torch::zeros({0})}});
  EXPECT_EQ(refusal(read_file(dir.path() / "state.pt")), "");
  EXPECT_TRUE(torch::equal(io::import_state_dict(dir.path() / "state.pt").at("w"), torch::ones({3, 5})));
}

// The fuzzer's finding: a string's 4-byte length of 2^31 + 3 made LibTorch allocate 2 GB first.
TEST(ArchiveCheck, APickleLengthBeyondTheRecordIsRefusedBeforeLibTorchReadsIt) {
  dtrain::testing::ScratchDir dir;
  const std::string bytes = patched(checkpoint_bytes(dir.path()), std::string("X\x02\x00\x00\x00t0", 7),
                                    std::string("X\x03\x00\x00\x80t0", 7));
  EXPECT_NE(refusal(bytes).find("data.pkl: opcode 0x58 at byte "), std::string::npos) << refusal(bytes);
  EXPECT_NE(refusal(bytes).find(" claims 2147483651 bytes; "), std::string::npos) << refusal(bytes);
  write_file(dir.path() / "bad.ckpt", bytes);
  try {
    io::Checkpoint::load(dir.path() / "bad.ckpt");
    ADD_FAILURE() << "a checkpoint whose pickle claims 2 GB was loaded";
  } catch (const io::CheckpointError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find((dir.path() / "bad.ckpt").string()), std::string::npos) << what;
    EXPECT_NE(what.find("claims 2147483651 bytes"), std::string::npos) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
  }
}

// A storage claiming 60 floats over a 24-byte record: LibTorch makes the 240-byte storage over
// the 24 bytes (the reference below loads it), so reading the tensor would run past the buffer.
TEST(ArchiveCheck, AStorageLargerThanItsRecordIsRefused) {
  dtrain::testing::ScratchDir dir;
  const std::string bytes = patched(checkpoint_bytes(dir.path()), std::string("cpuq\x06K\x06t", 8),
                                    std::string("cpuq\x06K\x3ct", 8));
  {
    std::istringstream in(bytes);
    torch::serialize::InputArchive archive;
    EXPECT_NO_THROW(archive.load_from(in)) << "LibTorch checks the count itself now; the check is redundant";
  }
  EXPECT_NE(refusal(bytes).find("gives storage data/0 60 elements of 4 bytes; its record holds 24 bytes"),
            std::string::npos)
      << refusal(bytes);
}

TEST(ArchiveCheck, ZipRecordsThatClaimMoreThanTheFileAreRefused) {
  dtrain::testing::ScratchDir dir;
  const std::string good = checkpoint_bytes(dir.path());
  const auto entry = directory_entry(good, "data/0");
  {  // deflated, claiming 2 GB from 24 bytes
    std::string bytes = good;
    bytes[entry + 10] = 8;
    put_le32(bytes, entry + 24, 0x7FFFFFFF);
    EXPECT_NE(refusal(bytes).find("data/0 claims 2147483647 bytes from 24 stored"), std::string::npos)
        << refusal(bytes);
  }
  {  // stored, with sizes that disagree
    std::string bytes = good;
    put_le32(bytes, entry + 24, 1000);
    EXPECT_NE(refusal(bytes).find("data/0 claims 1000 bytes from 24 stored"), std::string::npos)
        << refusal(bytes);
  }
  {  // a local header beyond the end
    std::string bytes = good;
    put_le32(bytes, entry + 42, 0x7FFFFFF0);
    EXPECT_NE(refusal(bytes).find("data/0 lies outside the file"), std::string::npos) << refusal(bytes);
  }
  {  // another compression method
    std::string bytes = good;
    bytes[entry + 10] = 12;
    EXPECT_NE(refusal(bytes).find("compression method 12"), std::string::npos) << refusal(bytes);
  }
  EXPECT_NE(refusal("not a zip at all, just text that is long enough").find("not a zip archive"),
            std::string::npos);
  EXPECT_NE(refusal(good.substr(0, good.size() - 30)).find("zip"), std::string::npos);
}

TEST(ArchiveCheck, PickleWalkerKnowsEveryOpcodesArgument) {
  // Every length-prefixed opcode, each claiming one byte more than there is.
  for (const std::string& op :
       {std::string("X\x05\x00\x00\x00", 5), std::string("\x8c\x05", 2),
        std::string("\x8d\x05\x00\x00\x00\x00\x00\x00\x00", 9), std::string("B\x05\x00\x00\x00", 5),
        std::string("C\x05", 2), std::string("T\x05\x00\x00\x00", 5), std::string("U\x05", 2),
        std::string("\x8e\x05\x00\x00\x00\x00\x00\x00\x00", 9),
        std::string("\x96\x05\x00\x00\x00\x00\x00\x00\x00", 9), std::string("\x8a\x05", 2),
        std::string("\x8b\x05\x00\x00\x00", 5)}) {
    EXPECT_NE(pickle_refusal("\x80\x02" + op + "abc.").find("claims 5 bytes; 4 remain"), std::string::npos)
        << pickle_refusal("\x80\x02" + op + "abc.");
    EXPECT_EQ(pickle_refusal("\x80\x02" + op + "abcde."), "") << pickle_refusal("\x80\x02" + op + "abcde.");
  }
  EXPECT_NE(pickle_refusal(std::string("\x80\x02\x8b\xff\xff\xff\xff.", 8)).find("negative length"),
            std::string::npos);
  EXPECT_NE(pickle_refusal("\x80\x02N").find("without STOP"), std::string::npos);
  EXPECT_NE(pickle_refusal("\x80\x02h\x07.").find("reads memo 7 before it is set"), std::string::npos);
  EXPECT_NE(pickle_refusal("\x80\x02t.").find("needs a MARK"), std::string::npos);
  EXPECT_NE(pickle_refusal("\x80\x02\xff.").find("opcode 0xff at byte 2 is not a pickle opcode"),
            std::string::npos)
      << pickle_refusal("\x80\x02\xff.");
  EXPECT_NE(pickle_refusal("\x80\x02"
                           "cos\nsystem")
                .find("has no end of line"),
            std::string::npos);
  // Protocol 0 text opcodes, memo, marks and the stack: a well-formed pickle passes.
  EXPECT_EQ(pickle_refusal("(I1\nF2.5\nS'x'\nVy\np0\ng0\nl(dp1\n0cos\nsystem\n(tR0(N1."), "");
  // A persistent id, as torch.save writes it, checked against the record: 6 floats in 24 bytes.
  const std::map<std::string, ZipRecord> records{{"data/0", ZipRecord{0, 24, 24, 0}}};
  const std::string storage = std::string("\x80\x02(X\x07\x00\x00\x00", 8) + "storage" +
                              "ctorch\nFloatStorage\n" + std::string("X\x01\x00\x00\x00", 5) + "0" +
                              std::string("X\x03\x00\x00\x00", 5) + "cpu";
  EXPECT_EQ(pickle_refusal(storage + "K\x06tQ.", records), "")
      << pickle_refusal(storage + "K\x06tQ.", records);
  EXPECT_NE(pickle_refusal(storage + "K\x07tQ.", records).find("7 elements of 4 bytes; its record holds 24"),
            std::string::npos);
  EXPECT_NE(pickle_refusal(storage + "\x8a\x01\xfftQ.", records).find("negative element count"),
            std::string::npos);
  EXPECT_EQ(pickle_refusal(storage + std::string("K\x00tQ.", 5), {}), "");  // no elements: no record read
  EXPECT_NE(pickle_refusal(storage + "K\x01tQ.", {}).find("data/0, which is missing"), std::string::npos);
}

// Note [One pickle decoder]: two million nested tuples in a 2 MB pickle are walked and freed
// without recursion.
TEST(ArchiveCheck, ADeeplyNestedPickleIsWalked) {
  EXPECT_EQ(pickle_refusal("\x80\x02)" + std::string(2000000, '\x85') + "."), "");
  EXPECT_NE(pickle_refusal("\x80\x02)" + std::string(2000000, '\x85')).find("without STOP"),
            std::string::npos);
}

// Note [Loading runs no code]: LibTorch compiles a checkpoint's code/ source while loading, and its
// compiler crashed (SEGV) on a checkpoint whose `__buffers__` the fuzzer mutated into a class
// constant (tests/fuzz/corpus/checkpoint/class-constant-segv); only OutputArchive's declarations pass.
TEST(ArchiveCode, CodeBeyondOutputArchivesDeclarationsIsRefusedBeforeLibTorchCompilesIt) {
  dtrain::testing::ScratchDir dir;
  const std::string bytes = patched(checkpoint_bytes(dir.path()), "  __buffers__ = [", "  __bufgers__ = [");
  write_file(dir.path() / "constant.ckpt", bytes);
  try {
    io::Checkpoint::load(dir.path() / "constant.ckpt");
    ADD_FAILURE() << "a checkpoint whose code declares a class constant was loaded";
  } catch (const io::CheckpointError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("code/__torch__.py line 3 is not a declaration LibTorch's OutputArchive writes (  "
                        "__bufgers__ = [])"),
              std::string::npos)
        << what;
  }
  // What OutputArchive writes passes: tensors, buffers, attributes of several types, a nested archive.
  torch::serialize::OutputArchive archive;
  torch::serialize::OutputArchive nested;
  archive.write("w", torch::ones({2}));
  archive.write("b", torch::zeros({1}), /*is_buffer=*/true);
  archive.write("name", c10::IValue(std::string("x")));
  archive.write("count", c10::IValue(std::int64_t{3}));
  nested.write("rate", c10::IValue(2.5));
  nested.write("v", torch::ones({3}));
  archive.write("nested", nested);
  std::ostringstream out;
  archive.save_to(out);
  std::istringstream in(out.str());
  torch::serialize::InputArchive loaded;
  EXPECT_NO_THROW(load_archive_without_code(loaded, in, "the archive"));
  c10::IValue count;
  loaded.read("count", count);
  EXPECT_EQ(count.toInt(), 3);
  for (const std::string line :
       {"class M(Module):", "  __parameters__ = [\"a\", \"b\", ]", "  __buffers__ = []", "  t0 : Tensor",
        "  sub : __torch__.___torch_mangle_0.Module", "  xs : List[Tensor]", "", "  __annotations__ = []",
        "  __annotations__[\"0\"] = __torch__.___torch_mangle_2.Module"}) {
    EXPECT_TRUE(archive_detail::is_declaration(line)) << line;
  }
  for (const std::string line :
       {"class M(Other):", "  x = 1", "  __buffers__ = [\"a\"]", "  __buffers__ = [\"a\\\"\", ]", "import os",
        "  t0 : Tensor = torch.ones(1)", "  @staticmethod", "  x : (1)", "  __annotations__[\"0\"] = f()",
        "  __annotations__ = [1]"}) {
    EXPECT_FALSE(archive_detail::is_declaration(line)) << line;
  }
}

}  // namespace
}  // namespace dtrain::util
