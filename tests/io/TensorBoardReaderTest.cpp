// TensorBoardReader against TensorBoardWriter's files, and its refusals: a cut frame, a flipped
// byte (either CRC), a field that runs past its message; fields it does not know are skipped.
#include "dtrain/io/TensorBoardReader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dtrain/io/TensorBoardWriter.h"
#include "support/ScratchDir.h"

namespace dtrain::io {
namespace {

using ::testing::HasSubstr;

std::string error_of(std::string_view bytes) {
  try {
    tensorboard::read_events(bytes, "f.tfevents");
  } catch (const EventFileError& e) {
    return e.what();
  }
  return "";
}

TEST(TensorBoardReader, ReadsWhatTheWriterWrote) {
  dtrain::testing::ScratchDir dir;
  std::filesystem::path path;
  {
    TensorBoardWriter writer(dir.path());
    path = writer.path();
    writer.write({10, 0, 1700000000.25, {{"train/loss", 0.75}, {"train/lr", 0.01}}});
    writer.write({-3, 1, 1700000002.0, {}});
  }
  const auto events = read_event_file(path);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_EQ(events[1].step, 10);
  EXPECT_DOUBLE_EQ(events[1].wall_time, 1700000000.25);
  ASSERT_EQ(events[1].scalars.size(), 2u);
  EXPECT_EQ(events[1].scalars[1].first, "train/lr");
  EXPECT_FLOAT_EQ(events[1].scalars[1].second, 0.01f);
  EXPECT_EQ(events[2].step, -3);
  EXPECT_TRUE(events[2].scalars.empty());
}

TEST(TensorBoardReader, RefusesCutAndCorruptFrames) {
  const std::string frame =
      tensorboard::frame_record(tensorboard::encode_scalars_event({5, 0, 1.5, {{"a", 1.0}}}));
  const std::string two = frame + frame;
  EXPECT_THAT(error_of(two.substr(0, two.size() - 1)),
              HasSubstr("frame at byte " + std::to_string(frame.size())));
  EXPECT_THAT(error_of(two.substr(0, frame.size() + 5)), HasSubstr("needs 12 bytes"));
  std::string length_flipped = frame;
  length_flipped[0] ^= 1;
  EXPECT_THAT(error_of(length_flipped), HasSubstr("length's CRC"));
  std::string data_flipped = frame;
  data_flipped[14] ^= 1;
  EXPECT_THAT(error_of(data_flipped), HasSubstr("data's CRC"));
}

TEST(TensorBoardReader, RefusesAFieldPastItsMessageAndSkipsUnknownOnes) {
  // Event.file_version (3, length-delimited) promising 9 bytes where 2 follow.
  EXPECT_THAT(error_of(tensorboard::frame_record(std::string("\x1a\x09xy", 4))),
              HasSubstr("runs past its message"));
  // An unknown varint field (7) and an unknown fixed32 (8) around a step.
  const std::string event =
      std::string("\x38\x96\x01", 3) + std::string("\x10\x2a", 2) + std::string("\x45\0\0\0\0", 5);
  const auto events = tensorboard::read_events(tensorboard::frame_record(event), "f");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].step, 42);
}

}  // namespace
}  // namespace dtrain::io
