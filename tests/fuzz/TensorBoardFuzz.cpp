// Fuzz target: TensorBoard event files. The input is read as an event file (every frame's CRCs
// checked, unknown fields skipped), and it also describes scalars that are written with the
// writer's encoding and must read back exactly: step, wall time, then (tag, value) pairs.
#include <cmath>
#include <cstring>
#include <string>

#include "dtrain/io/TensorBoardReader.h"
#include "dtrain/io/TensorBoardWriter.h"
#include "fuzz/FuzzInput.h"

namespace {

// Takes `n` bytes from the front of `in` (fewer when it is shorter).
std::string take(std::string_view& in, std::size_t n) {
  n = std::min(n, in.size());
  std::string out(in.substr(0, n));
  in.remove_prefix(n);
  return out;
}

template <class T>
T take_pod(std::string_view& in) {
  T value{};
  const std::string raw = take(in, sizeof(T));
  std::memcpy(&value, raw.data(), raw.size());
  return value;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace dtrain;
  const std::string_view bytes = fuzz::as_text(data, size);
  try {
    io::tensorboard::read_events(bytes, "input");
  } catch (const io::EventFileError&) {
  }

  // The round trip. Values are written as float (TensorBoard's simple_value): compare the float.
  std::string_view in = bytes;
  io::MetricsRecord record;
  record.step = take_pod<std::int64_t>(in);
  record.wall_time = take_pod<double>(in);
  while (!in.empty()) {
    const auto tag_size = static_cast<std::size_t>(take_pod<std::uint8_t>(in));
    std::string tag = take(in, tag_size);
    record.scalars.emplace_back(std::move(tag), take_pod<double>(in));
  }
  const std::string file =
      io::tensorboard::frame_record(io::tensorboard::encode_file_version_event(record.wall_time)) +
      io::tensorboard::frame_record(io::tensorboard::encode_scalars_event(record));
  std::vector<io::tensorboard::Event> events;
  try {
    events = io::tensorboard::read_events(file, "round trip");
  } catch (const io::EventFileError& e) {
    fuzz::property_failed(std::string("the writer's bytes do not read back: ") + e.what());
  }
  const auto same_double = [](double a, double b) {
    return std::memcmp(&a, &b, sizeof(a)) == 0;  // bit-equal, so NaNs compare too
  };
  if (events.size() != 2 || events[0].file_version != "brain.Event:2" ||
      !same_double(events[0].wall_time, record.wall_time) || events[1].step != record.step ||
      !same_double(events[1].wall_time, record.wall_time) ||
      events[1].scalars.size() != record.scalars.size()) {
    fuzz::property_failed("round trip: events differ from what was written");
  }
  for (std::size_t i = 0; i < record.scalars.size(); ++i) {
    const float expected = static_cast<float>(record.scalars[i].second);
    const float got = events[1].scalars[i].second;
    if (events[1].scalars[i].first != record.scalars[i].first ||
        std::memcmp(&expected, &got, sizeof(float)) != 0) {
      fuzz::property_failed("round trip: scalar " + std::to_string(i) + " differs");
    }
  }
  return 0;
}
