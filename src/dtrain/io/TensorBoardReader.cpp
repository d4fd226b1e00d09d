// The protobuf wire format read back (varints, fixed32/fixed64, length-delimited fields), strictly:
// every length is checked against what is left, so a corrupt file is an error, never a read past
// its end.
#include "dtrain/io/TensorBoardReader.h"

#include <cstring>
#include <fstream>
#include <iterator>

#include "dtrain/io/Crc32c.h"

namespace dtrain::io::tensorboard {
namespace {

enum WireType : std::uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

// A cursor over one message; `base` is the message's offset in the file, for messages.
class Cursor {
 public:
  Cursor(std::string_view bytes, const std::string& source, std::size_t base)
      : bytes_(bytes), source_(source), base_(base) {}
  bool done() const { return pos_ >= bytes_.size(); }

  std::uint64_t varint() {
    std::uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (done()) fail("truncated varint");
      const auto byte = static_cast<unsigned char>(bytes_[pos_++]);
      value |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
      if (!(byte & 0x80)) return value;
    }
    fail("varint longer than ten bytes");
  }
  template <class T>
  T fixed() {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8);
    if (bytes_.size() - pos_ < sizeof(T)) fail("truncated fixed-width field");
    std::uint64_t bits = 0;  // little-endian on every host, as the format
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      bits |= static_cast<std::uint64_t>(static_cast<unsigned char>(bytes_[pos_ + i])) << (8 * i);
    }
    pos_ += sizeof(T);
    T value;
    if constexpr (sizeof(T) == 4) {
      const auto narrow = static_cast<std::uint32_t>(bits);
      std::memcpy(&value, &narrow, sizeof(T));
    } else {
      std::memcpy(&value, &bits, sizeof(T));
    }
    return value;
  }
  std::string_view chunk() {
    const std::uint64_t size = varint();
    if (size > bytes_.size() - pos_) fail("length-delimited field runs past its message");
    const auto out = bytes_.substr(pos_, size);
    pos_ += size;
    return out;
  }
  // Skips a field we do not read; groups (wire types 3 and 4, deprecated) are refused.
  void skip(std::uint32_t wire_type) {
    switch (wire_type) {
      case kVarint:
        varint();
        return;
      case kFixed64:
        fixed<double>();
        return;
      case kLengthDelimited:
        chunk();
        return;
      case kFixed32:
        fixed<float>();
        return;
      default:
        fail("unsupported wire type " + std::to_string(wire_type));
    }
  }
  std::size_t offset() const { return base_ + pos_; }
  [[noreturn]] void fail(const std::string& what) const {
    throw EventFileError(source_ + ": malformed event at byte " + std::to_string(base_ + pos_) + ": " + what);
  }

 private:
  std::string_view bytes_;
  const std::string& source_;
  std::size_t base_;
  std::size_t pos_ = 0;
};

std::uint32_t le32(std::string_view bytes, std::size_t at) {
  std::uint32_t value = 0;
  for (int i = 0; i < 4; ++i)
    value |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
  return value;
}

Event decode_at(std::string_view data, const std::string& source, std::size_t base) {
  Event event;
  Cursor event_cursor(data, source, base);
  while (!event_cursor.done()) {
    const std::uint64_t key = event_cursor.varint();
    const auto field = key >> 3;
    const auto wire_type = static_cast<std::uint32_t>(key & 7);
    if (field == 1 && wire_type == kFixed64) {
      event.wall_time = event_cursor.fixed<double>();
    } else if (field == 2 && wire_type == kVarint) {
      event.step = static_cast<std::int64_t>(event_cursor.varint());  // two's complement, as written
    } else if (field == 3 && wire_type == kLengthDelimited) {
      event.file_version = std::string(event_cursor.chunk());
    } else if (field == 5 && wire_type == kLengthDelimited) {
      const std::size_t summary_base = event_cursor.offset();
      Cursor summary(event_cursor.chunk(), source, summary_base);
      while (!summary.done()) {
        const std::uint64_t summary_key = summary.varint();
        if (summary_key != ((1u << 3) | kLengthDelimited)) {
          summary.skip(static_cast<std::uint32_t>(summary_key & 7));
          continue;
        }
        const std::size_t value_base = summary.offset();
        Cursor value(summary.chunk(), source, value_base);
        std::pair<std::string, float> scalar{"", 0.0f};
        bool simple = false;
        while (!value.done()) {
          const std::uint64_t value_key = value.varint();
          if (value_key == ((1u << 3) | kLengthDelimited)) {
            scalar.first = std::string(value.chunk());
          } else if (value_key == ((2u << 3) | kFixed32)) {
            scalar.second = value.fixed<float>();
            simple = true;
          } else {
            value.skip(static_cast<std::uint32_t>(value_key & 7));
          }
        }
        if (simple) event.scalars.push_back(std::move(scalar));  // images, histograms: not scalars
      }
    } else {
      event_cursor.skip(wire_type);
    }
  }
  return event;
}

}  // namespace

Event decode_event(std::string_view data, const std::string& source) {
  return decode_at(data, source, 0);
}

std::vector<Event> read_events(std::string_view bytes, const std::string& source) {
  std::vector<Event> events;
  std::size_t pos = 0;
  while (pos < bytes.size()) {
    const auto at = [&](std::size_t offset) { return source + ": frame at byte " + std::to_string(offset); };
    if (bytes.size() - pos < 12) throw EventFileError(at(pos) + " is truncated (its header needs 12 bytes)");
    std::uint64_t length = le32(bytes, pos) | (static_cast<std::uint64_t>(le32(bytes, pos + 4)) << 32);
    if (le32(bytes, pos + 8) != mask_crc32c(crc32c(bytes.data() + pos, 8))) {
      throw EventFileError(at(pos) + ": the length's CRC does not match");
    }
    if (length > bytes.size() - pos - 12 || bytes.size() - pos - 12 - length < 4) {
      throw EventFileError(at(pos) + " is truncated: it promises " + std::to_string(length) +
                           " bytes of data, " + std::to_string(bytes.size() - pos - 12) + " are left");
    }
    const std::string_view data = bytes.substr(pos + 12, length);
    if (le32(bytes, pos + 12 + length) != mask_crc32c(crc32c(data))) {
      throw EventFileError(at(pos) + ": the data's CRC does not match");
    }
    events.push_back(decode_at(data, source, pos + 12));
    pos += 12 + length + 4;
  }
  return events;
}

}  // namespace dtrain::io::tensorboard

namespace dtrain::io {

std::vector<tensorboard::Event> read_event_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw EventFileError(path.string() + ": cannot open the event file for reading");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw EventFileError(path.string() + ": read error");
  return tensorboard::read_events(bytes, path.string());
}

}  // namespace dtrain::io
