// TensorBoard scalars without TensorFlow or protobuf: Event protos encoded by hand and framed as
// TFRecords (length, masked CRC32C of the length, data, masked CRC32C of the data) in
// events.out.tfevents.<10-digit time>.<host>, which `tensorboard --logdir` reads.
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "dtrain/io/MetricsSink.h"

namespace dtrain::io {

namespace tensorboard {

// The protobuf encodings of tensorflow.Event with the fields TensorBoard's scalar view reads:
// wall_time = 1 (double), step = 2 (int64), file_version = 3 (string), summary = 5 (Summary);
// Summary.value = 1 (repeated Value); Value.tag = 1 (string), simple_value = 2 (float).
std::string encode_file_version_event(double wall_time, std::string_view version = "brain.Event:2");
std::string encode_scalars_event(const MetricsRecord& record);

// One TFRecord frame around `data`.
std::string frame_record(std::string_view data);

}  // namespace tensorboard

class TensorBoardWriter : public MetricsSink {
 public:
  // Creates <dir>/events.out.tfevents.<wall seconds, 10 digits>.<host name> and writes the
  // file_version record. Throws std::runtime_error when the file cannot be created.
  explicit TensorBoardWriter(const std::filesystem::path& dir);
  ~TensorBoardWriter() override;

  void write(const MetricsRecord& record) override;
  void flush() override;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::ofstream out_;
};

}  // namespace dtrain::io
