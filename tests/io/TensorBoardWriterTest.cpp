// CRC32C against its published check value, and TensorBoard event files decoded back by a small
// independent reader: TFRecord frames with both CRCs checked, then the Event protobuf fields.
#include "dtrain/io/TensorBoardWriter.h"

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <regex>

#include "dtrain/io/Crc32c.h"
#include "support/Files.h"
#include "support/ScratchDir.h"

namespace dtrain::io {
namespace {

TEST(Crc32c, CheckValue) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);
  EXPECT_EQ(crc32c(""), 0u);
  // Continuing a CRC over a split buffer gives the CRC of the whole.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
  // 32 zero bytes: the iSCSI test vector of RFC 3720.
  const std::string zeros(32, '\0');
  EXPECT_EQ(crc32c(zeros), 0x8A9136AAu);
  EXPECT_EQ(unmask_crc32c(mask_crc32c(0xE3069283u)), 0xE3069283u);
  EXPECT_NE(mask_crc32c(0xE3069283u), 0xE3069283u);
}

// ---- an independent decoder ----

struct Reader {
  const std::string& bytes;
  std::size_t pos = 0;
  bool done() const { return pos >= bytes.size(); }
  std::uint64_t varint() {
    std::uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      const auto byte = static_cast<unsigned char>(bytes.at(pos++));
      value |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return value;
    }
    ADD_FAILURE() << "varint too long";
    return value;
  }
  template <class T>
  T fixed() {
    T value;
    EXPECT_LE(pos + sizeof(T), bytes.size());
    std::memcpy(&value, bytes.data() + pos, sizeof(T));  // the test machine is little-endian, as the format
    pos += sizeof(T);
    return value;
  }
  std::string chunk() {
    const auto n = varint();
    auto s = bytes.substr(pos, n);
    pos += n;
    return s;
  }
};

struct DecodedEvent {
  double wall_time = 0;
  std::int64_t step = 0;
  std::string file_version;
  std::vector<std::pair<std::string, float>> values;
};

DecodedEvent decode_event(const std::string& data) {
  DecodedEvent event;
  Reader r{data};
  while (!r.done()) {
    const auto key = r.varint();
    switch (key) {
      case (1 << 3) | 1:
        event.wall_time = r.fixed<double>();
        break;
      case (2 << 3) | 0:
        event.step = static_cast<std::int64_t>(r.varint());
        break;
      case (3 << 3) | 2:
        event.file_version = r.chunk();
        break;
      case (5 << 3) | 2: {
        const std::string summary = r.chunk();
        Reader s{summary};
        while (!s.done()) {
          EXPECT_EQ(s.varint(), (1u << 3) | 2);  // Summary.value
          const std::string value = s.chunk();
          Reader v{value};
          std::pair<std::string, float> tv;
          while (!v.done()) {
            const auto vkey = v.varint();
            if (vkey == ((1 << 3) | 2)) {
              tv.first = v.chunk();
            } else if (vkey == ((2 << 3) | 5)) {
              tv.second = v.fixed<float>();
            } else {
              ADD_FAILURE() << "unexpected Value field key " << vkey;
              return event;
            }
          }
          event.values.push_back(tv);
        }
        break;
      }
      default:
        ADD_FAILURE() << "unexpected Event field key " << key;
        return event;
    }
  }
  return event;
}

std::vector<DecodedEvent> decode_file(const std::filesystem::path& path) {
  const std::string bytes = dtrain::testing::read_file(path);
  std::vector<DecodedEvent> events;
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    EXPECT_LE(pos + 12, bytes.size());
    std::uint64_t length;
    std::uint32_t length_crc, data_crc;
    std::memcpy(&length, bytes.data() + pos, 8);
    std::memcpy(&length_crc, bytes.data() + pos + 8, 4);
    EXPECT_EQ(length_crc, mask_crc32c(crc32c(bytes.data() + pos, 8))) << "length CRC at " << pos;
    EXPECT_LE(pos + 12 + length + 4, bytes.size());
    const std::string data = bytes.substr(pos + 12, length);
    std::memcpy(&data_crc, bytes.data() + pos + 12 + length, 4);
    EXPECT_EQ(data_crc, mask_crc32c(crc32c(data))) << "data CRC at " << pos;
    events.push_back(decode_event(data));
    pos += 12 + length + 4;
  }
  return events;
}

TEST(TensorBoardWriter, DecodesBackToTheScalarsWritten) {
  dtrain::testing::ScratchDir dir;
  std::filesystem::path path;
  {
    TensorBoardWriter writer(dir.path());
    path = writer.path();
    writer.write({10, 0, 1700000000.25, {{"train/loss", 0.75}, {"train/lr", 0.01}}});
    writer.write({20, 1, 1700000001.5, {{"val/top1", 0.875}}});
    writer.write({-3, 1, 1700000002.0, {}});  // negative steps take the ten-byte varint
    writer.flush();
  }
  EXPECT_TRUE(std::regex_match(path.filename().string(), std::regex(R"(events\.out\.tfevents\.\d{10}\..+)")))
      << path.filename();
  const auto events = decode_file(path);
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_GT(events[0].wall_time, 1.6e9);
  EXPECT_EQ(events[1].step, 10);
  EXPECT_DOUBLE_EQ(events[1].wall_time, 1700000000.25);
  ASSERT_EQ(events[1].values.size(), 2u);
  EXPECT_EQ(events[1].values[0].first, "train/loss");
  EXPECT_FLOAT_EQ(events[1].values[0].second, 0.75f);
  EXPECT_EQ(events[1].values[1].first, "train/lr");
  EXPECT_FLOAT_EQ(events[1].values[1].second, 0.01f);
  EXPECT_EQ(events[2].step, 20);
  ASSERT_EQ(events[2].values.size(), 1u);
  EXPECT_EQ(events[2].values[0].first, "val/top1");
  EXPECT_EQ(events[3].step, -3);
  EXPECT_TRUE(events[3].values.empty());
}

TEST(TensorBoardWriter, TwoWritersInOneFolderUseTwoFiles) {
  dtrain::testing::ScratchDir dir;
  TensorBoardWriter a(dir.path());
  TensorBoardWriter b(dir.path());
  EXPECT_NE(a.path(), b.path());
}

}  // namespace
}  // namespace dtrain::io
