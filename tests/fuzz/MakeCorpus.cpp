// Writes the seed corpora that come from dtrain's own writers (make_corpus.py writes the rest):
// images (write_image's PNG and JPEG, and broken copies), checkpoints (Checkpoint::save, a
// CheckpointStore marker in front of one, export_state_dict) and TensorBoard event files.
// Built on demand: cmake --build build --target dtrain_fuzz_make_corpus, then
// build/tests/fuzz/dtrain_fuzz_make_corpus tests/fuzz/corpus
#include <torch/torch.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>

#include "dtrain/data/ImageFolder.h"
#include "dtrain/io/Checkpoint.h"
#include "dtrain/io/Crc32c.h"
#include "dtrain/io/TensorBoardWriter.h"

namespace fs = std::filesystem;

namespace {

std::string read(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void put(const fs::path& path, const std::string& bytes) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << bytes;
}

void put_be32(std::string& bytes, std::size_t at, std::uint32_t value) {
  for (int i = 0; i < 4; ++i) bytes[at + i] = static_cast<char>(value >> (24 - 8 * i));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  const fs::path corpus = argv[1];
  const fs::path scratch = fs::temp_directory_path() / "dtrain-make-corpus";
  fs::remove_all(scratch);
  fs::create_directories(scratch);

  // Images: a gradient, so JPEG has something to encode, in RGB and grey.
  const auto rgb = (torch::arange(3 * 8 * 8, torch::kInt32) * 5 % 256).to(torch::kUInt8).reshape({3, 8, 8});
  const auto grey = (torch::arange(12 * 10, torch::kInt32) * 2 % 256).to(torch::kUInt8).reshape({1, 12, 10});
  for (const auto& [name, image] : {std::pair{"rgb8x8", rgb}, std::pair{"grey12x10", grey}}) {
    for (const char* ext : {".png", ".jpg"}) {
      const fs::path path = scratch / (std::string(name) + ext);
      dtrain::data::write_image(path.string(), image);
      put(corpus / "image" / path.filename(), read(path));
    }
  }
  const std::string png = read(corpus / "image" / "rgb8x8.png");
  const std::string jpg = read(corpus / "image" / "rgb8x8.jpg");
  put(corpus / "image" / "truncated.png", png.substr(0, png.size() / 2));
  put(corpus / "image" / "truncated.jpg", jpg.substr(0, jpg.size() / 2));
  // A PNG whose header claims 10^6 x 10^6 pixels (IHDR's width and height, CRC redone).
  std::string huge = png;
  put_be32(huge, 16, 1000000);
  put_be32(huge, 20, 1000000);
  put_be32(huge, 29,
           static_cast<std::uint32_t>(::crc32(0, reinterpret_cast<const Bytef*>(huge.data() + 12), 17)));
  put(corpus / "image" / "huge-header.png", huge);

  // Checkpoints.
  dtrain::io::Checkpoint checkpoint;
  checkpoint.set_tensor("model.fc.weight", torch::arange(6, torch::kFloat32).reshape({2, 3}));
  checkpoint.set_tensor("rng", torch::arange(4, torch::kUInt8));
  checkpoint.set_metadata({{"step", 1}, {"epoch", 0}});
  const fs::path ckpt = scratch / "small.ckpt";
  checkpoint.save(ckpt);
  const std::string ckpt_bytes = read(ckpt);
  put(corpus / "checkpoint" / "small.ckpt", ckpt_bytes);
  put(corpus / "checkpoint" / "truncated.ckpt", ckpt_bytes.substr(0, ckpt_bytes.size() / 2));
  char marker[160];
  std::snprintf(marker, sizeof(marker), "checkpoint-000000000001.ckpt %zu %08x\n", ckpt_bytes.size(),
                dtrain::io::crc32c(ckpt_bytes.data(), ckpt_bytes.size()));
  put(corpus / "checkpoint" / "store-marker", marker + ckpt_bytes);
  put(corpus / "checkpoint" / "store-marker-wrong-crc",
      "checkpoint-000000000001.ckpt " + std::to_string(ckpt_bytes.size()) + " 00000000\n" + ckpt_bytes);
  put(corpus / "checkpoint" / "store-marker-escape", "../../etc/passwd 10 00000000\nx");
  dtrain::io::export_state_dict(scratch / "state_dict.pt", checkpoint.tensors());
  put(corpus / "checkpoint" / "state_dict.pt", read(scratch / "state_dict.pt"));

  // TensorBoard: a writer's file, a cut one and one with a flipped data byte.
  fs::path events;
  {
    dtrain::io::TensorBoardWriter writer(scratch);
    writer.write({10, 0, 1700000000.25, {{"train/loss", 0.75}, {"train/lr", 0.01}}});
    writer.write({-3, 1, 1700000002.0, {}});
    events = writer.path();
  }
  std::string event_bytes = read(events);
  // The file_version event's wall time is the clock's; fix it so the corpus does not change.
  event_bytes = dtrain::io::tensorboard::frame_record(
                    dtrain::io::tensorboard::encode_file_version_event(1700000000.0)) +
                event_bytes.substr(event_bytes.find("brain.Event:2") + 13 + 4);
  put(corpus / "tensorboard" / "events", event_bytes);
  put(corpus / "tensorboard" / "truncated", event_bytes.substr(0, event_bytes.size() - 7));
  std::string flipped = event_bytes;
  flipped[flipped.size() / 2] ^= 0x20;
  put(corpus / "tensorboard" / "flipped-byte", flipped);
  // For the round trip half: step, wall time, then (tag length, tag, value) triples.
  std::string record(16, '\0');
  record += std::string(1, 10) + "train/loss" + std::string(8, '\x3f');
  put(corpus / "tensorboard" / "record", record);
  fs::remove_all(scratch);
  std::printf("wrote image, checkpoint and tensorboard seeds under %s\n", corpus.c_str());
  return 0;
}
