// `dtrain bench data`; see BenchData.h.
#include "dtrain/cli/BenchData.h"

#include <ATen/Parallel.h>
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <stdexcept>

#include "dtrain/config/Registry.h"
#include "dtrain/config/RunConfig.h"
#include "dtrain/config/Schema.h"
#include "dtrain/data/Factory.h"
#include "dtrain/data/ImageFolder.h"
#include "dtrain/data/Loader.h"
#include "dtrain/data/Partition.h"
#include "dtrain/experiment/Report.h"
#include "dtrain/io/AtomicFile.h"
#include "dtrain/util/Clock.h"

namespace dtrain::cli {
namespace {

namespace fs = std::filesystem;
using util::Clock;
using util::seconds_since;

config::DataConfig in_memory_config(const BenchDataOptions& o, int threads) {
  config::DataConfig d;
  d.dataset = o.dataset;
  d.root = o.root;
  d.batch_size = o.batch;
  d.loader_threads = threads;
  if (o.augment) {
    d.random_crop_padding = 2;
    d.horizontal_flip = true;
  }
  return d;
}

// Batches per second out of a training loader over the whole set, after a short warm-up; epochs
// are restarted as needed so that every thread count times the same number of batches.
BenchDataResult time_loader(const std::shared_ptr<const data::Dataset>& train, const config::DataConfig& d,
                            int batches) {
  const auto shard = data::whole(train->size());
  auto loader = data::make_train_loader(train, shard, d, /*seed=*/0);
  std::int64_t epoch = 0;
  loader->start_epoch(epoch);
  auto next = [&] {
    auto batch = loader->next();
    if (!batch) {
      loader->start_epoch(++epoch);
      batch = loader->next();
    }
    return batch->targets.size(0);
  };
  for (int i = 0; i < 10; ++i) next();
  std::int64_t samples = 0;
  const auto start = Clock::now();
  for (int i = 0; i < batches; ++i) samples += next();
  BenchDataResult r;
  r.source = "in-memory";
  r.dataset = train->name();
  r.threads = d.loader_threads;
  r.samples = samples;
  r.seconds = seconds_since(start);
  r.samples_per_second = r.seconds > 0 ? static_cast<double>(samples) / r.seconds : 0.0;
  return r;
}

void draw(const BenchDataOptions& o, const std::vector<BenchDataResult>& results) {
  const fs::path png(o.plot);
  const fs::path dir = png.has_parent_path() ? png.parent_path() : fs::path(".");
  fs::create_directories(dir);
  std::ostringstream memory, folder;
  for (const auto& r : results) {
    (r.source == "in-memory" ? memory : folder) << r.threads << " " << r.samples_per_second << "\n";
  }
  const auto stem = png.stem().string();
  const auto memory_dat = dir / (stem + "_in_memory.dat");
  const auto folder_dat = dir / (stem + "_image_folder.dat");
  io::write_file_atomic(memory_dat, memory.str());
  std::string plot = fmt::format(
      "'{}' using 1:2 with linespoints lw 2 title 'in-memory {}: batches made by loader threads "
      "(0 = made on the training thread)'",
      memory_dat.string(), o.dataset);
  if (!folder.str().empty()) {
    io::write_file_atomic(folder_dat, folder.str());
    plot += fmt::format(
        ", '{}' using 1:2 with linespoints lw 2 title 'image folder: files read, decoded and resized to {} "
        "px "
        "by the threads'",
        folder_dat.string(), o.image_size);
  }
  const auto script = dir / (stem + ".gp");
  io::write_file_atomic(
      script, fmt::format("set terminal pngcairo size 960,540 noenhanced font ',11'\nset output '{}'\n"
                          "set title 'Data loading throughput against threads (batch {})'\n"
                          "set xlabel 'threads'\n"
                          "set ylabel 'samples/s (log scale)'\nset logscale y\nset xtics 1\nset grid\n"
                          "set key below\nplot {}\n",
                          png.string(), o.batch, plot));
  experiment::run_gnuplot(script, o.gnuplot);
}

}  // namespace

std::vector<int> parse_thread_list(const std::string& list) {
  std::vector<int> threads;
  std::stringstream in(list);
  std::string item;
  while (std::getline(in, item, ',')) {
    std::size_t used = 0;
    int value = -1;
    try {
      value = std::stoi(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != item.size() || value < 0 || value > 256) {
      throw std::invalid_argument(
          fmt::format("--threads: '{}' is not a thread count; expected numbers in [0, 256] separated by "
                      "commas, e.g. 0,1,2,4",
                      item));
    }
    threads.push_back(value);
  }
  if (threads.empty()) throw std::invalid_argument("--threads: empty; expected e.g. 0,1,2,4");
  return threads;
}

void validate(const BenchDataOptions& o) {
  parse_thread_list(o.threads);
  if (o.batch < 1) throw std::invalid_argument(fmt::format("--batch must be at least 1, got {}", o.batch));
  if (o.batches < 1)
    throw std::invalid_argument(fmt::format("--batches must be at least 1, got {}", o.batches));
  if (o.image_size < 1)
    throw std::invalid_argument(fmt::format("--image-size must be at least 1, got {}", o.image_size));
  const auto& datasets = config::registered_choices(config::kDatasetKey);
  const auto dataset = datasets.resolve(o.dataset);
  if (!dataset) {
    throw std::invalid_argument(
        fmt::format("--dataset: unknown data set '{}'; expected one of {}", o.dataset, datasets.list()));
  }
  if (*dataset == "image-folder") {
    throw std::invalid_argument(
        "--dataset: the in-memory source cannot be image-folder; time an image folder with --image-folder "
        "DIR");
  }
  if (o.export_images > 0 && o.image_folder.empty())
    throw std::invalid_argument("--export needs --image-folder DIR: the folder to write the images into");
}

std::vector<BenchDataResult> run_data_benchmark(const BenchDataOptions& o) {
  validate(o);
  const auto thread_counts = parse_thread_list(o.threads);
  std::vector<BenchDataResult> results;

  // The in-memory set is loaded once; each thread count gets a loader of its own.
  const auto base = in_memory_config(o, 0);
  const auto sets = data::load_datasets(base);
  for (int t : thread_counts) results.push_back(time_loader(sets.train, in_memory_config(o, t), o.batches));

  if (!o.image_folder.empty()) {
    if (o.export_images > 0 && !fs::exists(o.image_folder)) {
      const auto* images = dynamic_cast<const data::ImageDataset*>(sets.train_plain.get());
      if (!images) {
        throw std::invalid_argument(fmt::format("--export: data set {} is not an image set", o.dataset));
      }
      data::export_image_folder(*images, o.image_folder, o.export_images, "png");
    }
    const int before = at::get_num_threads();
    std::vector<int> measured;
    for (int t : thread_counts) {
      const int threads = std::max(1, t);  // decoding runs on at least one thread
      if (std::find(measured.begin(), measured.end(), threads) != measured.end()) continue;
      measured.push_back(threads);
      at::set_num_threads(threads);
      const auto start = Clock::now();
      const auto set = data::load_image_folder(o.image_folder, o.image_size, /*train=*/true);
      BenchDataResult r;
      r.source = "image-folder";
      r.dataset = set.name();
      r.threads = threads;
      r.samples = set.size();
      r.seconds = seconds_since(start);
      r.samples_per_second = r.seconds > 0 ? static_cast<double>(r.samples) / r.seconds : 0.0;
      results.push_back(r);
    }
    at::set_num_threads(before);
  }
  if (!o.plot.empty()) draw(o, results);
  return results;
}

std::string to_json_line(const BenchDataResult& r) {
  return nlohmann::json{{"source", r.source},   {"dataset", r.dataset},
                        {"threads", r.threads}, {"samples", r.samples},
                        {"seconds", r.seconds}, {"samples_per_second", r.samples_per_second}}
      .dump();
}

}  // namespace dtrain::cli
