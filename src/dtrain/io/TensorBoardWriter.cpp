// Hand-written protobuf wire format (varints, fixed64 doubles, fixed32 floats, length-delimited
// strings and messages) for the handful of Event fields TensorBoard needs.
#include "dtrain/io/TensorBoardWriter.h"

#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <type_traits>

#include "dtrain/io/Crc32c.h"

namespace dtrain::io {
namespace {

enum WireType : std::uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

void put_varint(std::string& out, std::uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7F) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_key(std::string& out, std::uint32_t field, WireType type) {
  put_varint(out, (field << 3) | type);
}

template <class T>
void put_little_endian(std::string& out, T value) {
  static_assert(std::is_unsigned_v<T>);
  for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xFF));
}

void put_double(std::string& out, std::uint32_t field, double value) {
  std::uint64_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  put_key(out, field, kFixed64);
  put_little_endian(out, bits);
}

void put_float(std::string& out, std::uint32_t field, float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  put_key(out, field, kFixed32);
  put_little_endian(out, bits);
}

void put_int64(std::string& out, std::uint32_t field, std::int64_t value) {
  put_key(out, field, kVarint);
  put_varint(out, static_cast<std::uint64_t>(value));  // int64 negatives take ten bytes, as protobuf does
}

void put_bytes(std::string& out, std::uint32_t field, std::string_view bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out.append(bytes.data(), bytes.size());
}

std::string host_name() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

namespace tensorboard {

std::string encode_file_version_event(double wall_time, std::string_view version) {
  std::string event;
  put_double(event, 1, wall_time);
  put_bytes(event, 3, version);
  return event;
}

std::string encode_scalars_event(const MetricsRecord& record) {
  std::string summary;
  for (const auto& [tag, value] : record.scalars) {
    std::string value_message;
    put_bytes(value_message, 1, tag);
    put_float(value_message, 2, static_cast<float>(value));
    put_bytes(summary, 1, value_message);
  }
  std::string event;
  put_double(event, 1, record.wall_time);
  put_int64(event, 2, record.step);
  put_bytes(event, 5, summary);
  return event;
}

std::string frame_record(std::string_view data) {
  std::string frame;
  std::string length;
  put_little_endian(length, static_cast<std::uint64_t>(data.size()));
  frame += length;
  put_little_endian(frame, mask_crc32c(crc32c(length)));
  frame.append(data.data(), data.size());
  put_little_endian(frame, mask_crc32c(crc32c(data)));
  return frame;
}

}  // namespace tensorboard

TensorBoardWriter::TensorBoardWriter(const std::filesystem::path& dir) {
  const double now = wall_time_now();
  char seconds[32];
  std::snprintf(seconds, sizeof(seconds), "%010lld", static_cast<long long>(now));
  // The pid keeps two writers started in the same second apart; TensorBoard reads any suffix.
  path_ = dir / ("events.out.tfevents." + std::string(seconds) + "." + host_name() + "." +
                 std::to_string(::getpid()));
  const auto base = path_.string();
  for (int n = 1; std::filesystem::exists(path_); ++n) path_ = base + "." + std::to_string(n);
  out_.open(path_, std::ios::binary);
  if (!out_) {
    throw std::runtime_error("cannot create the TensorBoard event file " + path_.string() + ": " +
                             std::strerror(errno) + "; check that the run folder is writable");
  }
  out_ << tensorboard::frame_record(tensorboard::encode_file_version_event(now));
  out_.flush();
}

TensorBoardWriter::~TensorBoardWriter() {
  out_.flush();
}

void TensorBoardWriter::write(const MetricsRecord& record) {
  out_ << tensorboard::frame_record(tensorboard::encode_scalars_event(record));
}

void TensorBoardWriter::flush() {
  out_.flush();
}

}  // namespace dtrain::io
