// Reading TensorBoard event files back: TFRecord frames with both CRCs checked, then the Event
// fields TensorBoardWriter writes. For tests, the fuzzer's round trip and scripts that compare runs
// without TensorFlow; fields we do not know (other writers' images, histograms) are skipped.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace dtrain::io {

// An event file is truncated, fails a checksum or holds a malformed Event.
class EventFileError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace tensorboard {

// The fields of tensorflow.Event that TensorBoardWriter writes (see TensorBoardWriter.h).
struct Event {
  double wall_time = 0.0;
  std::int64_t step = 0;
  std::string file_version;                            // set only in a file's first event
  std::vector<std::pair<std::string, float>> scalars;  // Summary.Value tag -> simple_value
};

// One Event message (the data of one frame). Throws EventFileError naming `source` and the offset.
Event decode_event(std::string_view data, const std::string& source);

// Every event of an event file's bytes, in order. Throws EventFileError naming `source` and the
// byte offset of the frame that is truncated or whose length or data CRC does not match.
std::vector<Event> read_events(std::string_view bytes, const std::string& source);

}  // namespace tensorboard

// The events of the file at `path`; throws EventFileError naming it.
std::vector<tensorboard::Event> read_event_file(const std::filesystem::path& path);

}  // namespace dtrain::io
