// `dtrain bench data`: how fast batches come out of the data pipeline, against loader threads
// (the DDP and Apex tutorial's I/O figure). Two sources: an in-memory set (the loader's batching,
// normalisation and augmentation) and an image folder (reading and decoding the files, which dtrain does
// once, in parallel over the given threads, before training).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace dtrain::cli {

struct BenchDataOptions {
  std::string dataset = "fashion-mnist";  // the in-memory set (any data.dataset but image-folder)
  std::string root;                       // its data.root ("" = the data set's default)
  std::string image_folder;               // an image folder to time too ("" = none)
  std::int64_t export_images = 0;         // first write this many images of the in-memory set there as PNGs
  int image_size = 28;                    // image folder: resized to this square
  std::string threads = "0,1,2,4";
  int batch = 64;
  int batches = 300;    // timed batches per thread count (in-memory)
  bool augment = true;  // random crop (padding 2) and horizontal flip, as a training loader does
  std::string plot;     // draw samples/s against threads into this PNG ("" = no plot)
  std::string gnuplot = "gnuplot";
};

struct BenchDataResult {
  std::string source;   // "in-memory" | "image-folder"
  std::string dataset;  // the data set's name
  int threads = 0;      // loader threads (in-memory: 0 = on the caller's thread) or decoding threads
  std::int64_t samples = 0;
  double seconds = 0.0;
  double samples_per_second = 0.0;
};

// "0,1,2,4" -> {0, 1, 2, 4}; throws std::invalid_argument naming the bad item.
std::vector<int> parse_thread_list(const std::string& list);

// Throws std::invalid_argument saying what to change.
void validate(const BenchDataOptions& options);

// Every measurement: the in-memory set for each thread count, then the image folder (when given).
std::vector<BenchDataResult> run_data_benchmark(const BenchDataOptions& options);

std::string to_json_line(const BenchDataResult& result);

}  // namespace dtrain::cli
